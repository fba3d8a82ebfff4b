// Reading audio with libsndfile: a file or a buffer in memory, in blocks, as mono samples.
//
// The containers are those a speech pipeline meets: WAV (RIFF and RF64; PCM 8/16/24/32-bit,
// float, double, μ-law, A-law), FLAC, Ogg (Vorbis, Opus) and MP3, each where the system's
// libsndfile decodes it (libsndfile_decodes() asks it at run time). The format is identified
// from the first bytes before libsndfile sees the data, and anything else (AIFF, ADPCM codecs,
// raw PCM, a text file) is refused: libsndfile reads some thirty formats, and its less-travelled
// parsers stay away from untrusted input, as preprocess/image/header.h does for OpenCV.
//
// Samples come as float32 in [-1, 1] (libsndfile's normalisation: 16-bit PCM v / 32768 exactly,
// so features scaled back by 32768 see Kaldi's integers). Channels are averaged into one
// (AudioReadOptions::channel picks one instead). Blocks keep memory bounded by the block size
// whatever the length of the file; read_audio() returns the whole waveform.
//
// Every problem is an AudioError naming the file (or the buffer's name): missing, a directory,
// empty, not audio, truncated (a WAV data chunk or a FLAC/MP3 stream shorter than its header
// says; a cut Ogg stream cannot be opened), an unsupported encoding, no samples, NaN or infinite
// samples (float WAV), longer than AudioReadOptions::max_seconds.
#pragma once

#include <attnzoo/preprocess/audio/error.h>

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace attnzoo {

enum class AudioContainer { kWav, kRf64, kFlac, kOgg, kMp3 };
const char* audio_container_name(AudioContainer container);  // "WAV", "RF64", "FLAC", ...

// Whether the libsndfile of this process decodes `codec`: "WAV", "FLAC", "Vorbis", "Opus" or
// "MP3" (asked with sf_command(SFC_GET_FORMAT_MAJOR/SUBTYPE) at run time; a libsndfile built
// without libvorbis, libopus or mpg123 lacks some).
bool libsndfile_decodes(const std::string& codec);
std::string libsndfile_version();  // "libsndfile-1.2.0"

struct AudioInfo {
  AudioContainer container = AudioContainer::kWav;
  std::string encoding;  // "PCM 16-bit", "float 32-bit", "Vorbis", "Opus", "MP3", ...
  int64_t sample_rate = 0;
  int64_t channels = 0;
  int64_t frames = 0;  // per channel, as the header announces it (an MP3's is the encoder's count)
  double seconds() const { return sample_rate > 0 ? double(frames) / sample_rate : 0.0; }
};

struct AudioReadOptions {
  // -1: the mean of all channels; c >= 0: channel c alone (an AudioError if the file has fewer).
  int64_t channel = -1;
  // The longest audio accepted, in seconds, checked against the header before decoding and
  // against what is decoded: a compressed file is small for its length (a few kilobytes of FLAC
  // hold minutes of silence), and read_audio() holds all of it.
  double max_seconds = 4 * 3600.0;
  // Frames per block: the memory of AudioReader::read().
  int64_t block_frames = 16384;
};

// A stream of mono blocks. Opening identifies the container, checks it (a WAV's data chunk
// against the file's length), lets libsndfile parse the header, and checks the encoding, the
// sample rate (1 kHz to 768 kHz), the channel asked for, a non-zero length and max_seconds.
class AudioReader {
 public:
  static AudioReader open(const std::string& path, const AudioReadOptions& options = {});
  // `data` must outlive the reader; `source` names it in errors.
  static AudioReader from_memory(const void* data, size_t size,
                                 const std::string& source = "<memory>",
                                 const AudioReadOptions& options = {});
  AudioReader(AudioReader&&) noexcept;
  AudioReader& operator=(AudioReader&&) noexcept;
  ~AudioReader();

  const AudioInfo& info() const;
  const std::string& source() const;
  int64_t frames_read() const;

  // The next block: float32 [n], 1 <= n <= block_frames mono samples; [0] at the end, where
  // the stream is checked for holding what its header announced.
  torch::Tensor read();

 private:
  struct Impl;
  explicit AudioReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct Waveform {
  torch::Tensor samples;  // float32 [N], mono, at `info.sample_rate`
  AudioInfo info;
};

// The whole file (or buffer) through AudioReader, blocks concatenated.
Waveform read_audio(const std::string& path, const AudioReadOptions& options = {});
Waveform read_audio_from_memory(const void* data, size_t size,
                                const std::string& source = "<memory>",
                                const AudioReadOptions& options = {});

}  // namespace attnzoo
