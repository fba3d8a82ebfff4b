// Reading audio: every encoding the frontend accepts, written here with the same libsndfile
// from the espeak-ng speech of the fixture (skipped visibly where this libsndfile lacks a codec),
// channels, blocks, memory against file, and each bad input of the issue refused with one
// message naming the file.
#include <attnzoo/preprocess/audio/read.h>
#include "audio_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cstring>
#include <filesystem>
#include <sstream>

namespace attnzoo {
namespace test_audio_read {

using ::testing::HasSubstr;
using testing::read_file;
using testing::reference;
using testing::Scratch;
using ::testing::StartsWith;
using testing::write_file;
using testing::write_sndfile;

// The fixture's 16 kHz speech, 16-bit exact (k / 32768), as [N, 1].
torch::Tensor speech() {
  static const torch::Tensor x =
      read_audio(
          reference().path(reference().manifest()["signals"]["speech_16k"].get<std::string>()))
          .samples.unsqueeze(1);
  return x;
}

std::string read_error(const std::string& path, const AudioReadOptions& options = {}) {
  try {
    read_audio(path, options);
  } catch (const AudioError& e) {
    return e.what();
  }
  return "(no error)";
}

// Lossless encodings give the 16-bit samples back exactly (8-bit and the companded ones within
// their quantisation step).
TEST(AudioRead, LosslessEncodings) {
  Scratch scratch;
  struct Case {
    const char* name;
    int format;
    double tolerance;
    const char* encoding;
  };
  const Case cases[] = {
      {"pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 0.0, "PCM 16-bit"},
      {"pcm24.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 0.0, "PCM 24-bit"},
      {"pcm32.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 0.0, "PCM 32-bit"},
      {"float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 0.0, "float 32-bit"},
      {"double.wav", SF_FORMAT_WAV | SF_FORMAT_DOUBLE, 0.0, "float 64-bit"},
      {"pcm8.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 1.0 / 128, "PCM 8-bit unsigned"},
      {"ulaw.wav", SF_FORMAT_WAV | SF_FORMAT_ULAW, 0.03, "mu-law"},
      {"alaw.wav", SF_FORMAT_WAV | SF_FORMAT_ALAW, 0.03, "A-law"},
      {"wavex.wav", SF_FORMAT_WAVEX | SF_FORMAT_PCM_16, 0.0, "PCM 16-bit"},
      {"rf64.wav", SF_FORMAT_RF64 | SF_FORMAT_PCM_16, 0.0, "PCM 16-bit"},
      {"pcm16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 0.0, "PCM 16-bit"},
      {"pcm24.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 0.0, "PCM 24-bit"},
  };
  const auto x = speech();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto path = scratch.path(c.name);
    if (std::strstr(c.name, "flac") && !libsndfile_decodes("FLAC")) {
      std::printf("skipped: this libsndfile has no FLAC\n");
      continue;
    }
    ASSERT_TRUE(write_sndfile(path, x, 16000, c.format));
    const auto wave = read_audio(path);
    EXPECT_EQ(wave.info.sample_rate, 16000);
    EXPECT_EQ(wave.info.channels, 1);
    EXPECT_EQ(wave.info.encoding, c.encoding);
    ASSERT_EQ(wave.samples.size(0), x.size(0));
    EXPECT_LE(testing::max_abs_diff(wave.samples, x.squeeze(1)), c.tolerance);
  }
}

// Lossy codecs: the decoded length and the loudness envelope (RMS per 10 ms) match the source.
void check_lossy(const std::string& codec, const char* file, int format) {
  if (!libsndfile_decodes(codec)) GTEST_SKIP() << "this libsndfile does not decode " << codec;
  Scratch scratch;
  const auto path = scratch.path(file);
  if (!write_sndfile(path, speech(), 16000, format)) {
    GTEST_SKIP() << "this libsndfile does not encode " << codec << " (needed to make the file)";
  }
  const auto wave = read_audio(path);
  const auto x = speech().squeeze(1);
  EXPECT_EQ(wave.info.encoding, codec);
  EXPECT_EQ(wave.info.sample_rate, 16000);
  EXPECT_NEAR(double(wave.samples.size(0)), double(x.size(0)), 0.01 * double(x.size(0)));
  const int64_t n = std::min(wave.samples.size(0), x.size(0)) / 160 * 160;
  const auto envelope = [&](const torch::Tensor& s) {
    return s.narrow(0, 0, n).reshape({-1, 160}).square().mean(1).sqrt();
  };
  const auto a = envelope(wave.samples), b = envelope(x);
  const double correlation = ((a - a.mean()) * (b - b.mean())).sum().item<double>() /
                             std::sqrt((a - a.mean()).square().sum().item<double>() *
                                       (b - b.mean()).square().sum().item<double>());
  std::printf("%s: %ld samples (source %ld), envelope correlation %.4f\n", codec.c_str(),
              long(wave.samples.size(0)), long(x.size(0)), correlation);
  EXPECT_GT(correlation, 0.95);
}

TEST(AudioRead, OggVorbis) {
  check_lossy("Vorbis", "speech.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS);
}
TEST(AudioRead, OggOpus) { check_lossy("Opus", "speech.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS); }
TEST(AudioRead, Mp3) {
  check_lossy("MP3", "speech.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III);
}

TEST(AudioRead, ChannelsAreAveragedOrPicked) {
  Scratch scratch;
  const auto x = speech().squeeze(1);
  const auto three = torch::stack({x, x * 0.5, -x * 0.25}, 1);
  const auto path = scratch.path("three.wav");
  ASSERT_TRUE(write_sndfile(path, three, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
  const auto mean = read_audio(path);
  EXPECT_EQ(mean.info.channels, 3);
  EXPECT_TRUE(torch::allclose(mean.samples, three.mean(1), 0.0, 1e-7));
  AudioReadOptions pick;
  pick.channel = 2;
  EXPECT_TRUE(torch::equal(read_audio(path, pick).samples, three.select(1, 2)));
  pick.channel = 3;
  EXPECT_EQ(read_error(path, pick),
            path + ": has 3 channels; channel 3 was asked for (channels count from 0)");
}

TEST(AudioRead, BlocksAndMemoryEqualTheFile) {
  const auto path =
      reference().path(reference().manifest()["stereo"]["speech_44k_stereo"].get<std::string>());
  const auto whole = read_audio(path);
  AudioReadOptions options;
  options.block_frames = 1000;
  auto reader = AudioReader::open(path, options);
  std::vector<torch::Tensor> blocks;
  for (auto b = reader.read(); b.numel() > 0; b = reader.read()) {
    EXPECT_LE(b.size(0), 1000);
    blocks.push_back(b);
  }
  EXPECT_EQ(reader.read().numel(), 0);  // stays at the end
  EXPECT_TRUE(torch::equal(torch::cat(blocks), whole.samples));
  EXPECT_EQ(reader.frames_read(), whole.info.frames);
  const auto bytes = read_file(path);
  const auto memory = read_audio_from_memory(bytes.data(), bytes.size(), "speech in memory");
  EXPECT_TRUE(torch::equal(memory.samples, whole.samples));
  EXPECT_EQ(memory.info.sample_rate, 44100);
  EXPECT_EQ(memory.info.container, AudioContainer::kWav);
}

// The bad inputs, each refused with one message that names the file.
TEST(AudioRead, RefusesBadFiles) {
  Scratch scratch;
  const auto x = speech();
  const auto wav = scratch.path("good.wav");
  ASSERT_TRUE(write_sndfile(wav, x, 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16));
  const auto bytes = read_file(wav);

  EXPECT_EQ(read_error(scratch.path("missing.wav")),
            scratch.path("missing.wav") + ": no such file");
  EXPECT_EQ(read_error(scratch.path("")), scratch.path("") + ": is a directory, not an audio file");
  const auto empty = scratch.path("empty.wav");
  write_file(empty, "");
  EXPECT_EQ(read_error(empty), empty + ": empty file (0 bytes)");
  const auto text = scratch.path("text.wav");
  write_file(text, "This is not audio at all.\n");
  EXPECT_EQ(read_error(text), text +
                                  ": not audio in a supported format (WAV, FLAC, Ogg "
                                  "Vorbis/Opus, MP3); it starts with 54 68 69 73 20 69 73 20");
  const auto cut = scratch.path("cut.wav");
  write_file(cut, bytes.substr(0, bytes.size() / 2));
  EXPECT_EQ(read_error(cut), cut + ": truncated WAV: the data chunk announces " +
                                 std::to_string(bytes.size() - 44) + " bytes, the file holds " +
                                 std::to_string(bytes.size() / 2 - 44) +
                                 " after its header (was the download or copy interrupted?)");
  const auto header_only = scratch.path("header_only.wav");
  write_file(header_only, bytes.substr(0, 30));
  EXPECT_THAT(read_error(header_only), StartsWith(header_only + ": cannot decode the WAV data"));

  const auto silent = scratch.path("zero_length.wav");
  ASSERT_TRUE(write_sndfile(silent, torch::zeros({0, 1}), 16000, SF_FORMAT_WAV | SF_FORMAT_PCM_16));
  EXPECT_EQ(read_error(silent), silent + ": no audio (0 samples)");

  auto nan = x.clone();
  nan[1234][0] = std::numeric_limits<float>::quiet_NaN();
  const auto nan_path = scratch.path("nan.wav");
  ASSERT_TRUE(write_sndfile(nan_path, nan, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
  EXPECT_EQ(read_error(nan_path), nan_path + ": NaN or infinite sample at frame 1234 (0.077125 s)");
  auto inf = x.clone();
  inf[40000][0] = -std::numeric_limits<float>::infinity();
  const auto inf_path = scratch.path("inf.wav");
  ASSERT_TRUE(write_sndfile(inf_path, inf, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
  EXPECT_EQ(read_error(inf_path), inf_path + ": NaN or infinite sample at frame 40000 (2.5 s)");

  const auto adpcm = scratch.path("adpcm.wav");
  ASSERT_TRUE(write_sndfile(adpcm, x, 16000, SF_FORMAT_WAV | SF_FORMAT_IMA_ADPCM));
  EXPECT_EQ(read_error(adpcm), adpcm +
                                   ": unsupported encoding 'IMA ADPCM' in WAV (the frontend "
                                   "reads PCM, float, mu-law, A-law, FLAC, Vorbis, Opus and "
                                   "MP3)");
  const auto aiff = scratch.path("speech.aiff");
  ASSERT_TRUE(write_sndfile(aiff, x, 16000, SF_FORMAT_AIFF | SF_FORMAT_PCM_16));
  EXPECT_THAT(read_error(aiff), StartsWith(aiff + ": not audio in a supported format"));
  const auto slow = scratch.path("500hz.wav");
  ASSERT_TRUE(write_sndfile(slow, x.narrow(0, 0, 1000), 500, SF_FORMAT_WAV | SF_FORMAT_PCM_16));
  EXPECT_EQ(read_error(slow),
            slow + ": sample rate 500 Hz, outside the 1000 to 768000 Hz the frontend resamples");
  AudioReadOptions short_limit;
  short_limit.max_seconds = 1.5;
  std::ostringstream seconds;
  seconds << double(x.size(0)) / 16000.0;
  EXPECT_EQ(read_error(wav, short_limit),
            wav + ": WAV of " + seconds.str() + " s, longer than the limit of 1.5 s");
}

TEST(AudioRead, RefusesTruncatedCompressedFiles) {
  Scratch scratch;
  const auto x = speech();
  struct Case {
    const char* codec;
    const char* name;
    int format;
    const char* expected;
  };
  const Case cases[] = {
      {"FLAC", "cut.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16,
       ": truncated or corrupt FLAC: decoding failed after "},
      {"Vorbis", "cut.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, ": truncated Ogg: the data ends "},
      {"Opus", "cut.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS, ": truncated Ogg: the data ends "},
      {"MP3", "cut.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III,
       ": truncated MP3: its header announces "},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto whole = scratch.path(std::string("whole_") + c.name);
    if (!libsndfile_decodes(c.codec) || !write_sndfile(whole, x, 16000, c.format)) {
      std::printf("skipped %s: this libsndfile does not read and write it\n", c.codec);
      continue;
    }
    const auto cut = scratch.path(c.name);
    const auto bytes = read_file(whole);
    write_file(cut, bytes.substr(0, bytes.size() * 6 / 10));
    EXPECT_THAT(read_error(cut), StartsWith(cut + c.expected));
  }
}

// The codecs the lossy and lossless tests skip without: Debian 12's libsndfile has them all, and
// the issue requires FLAC, Ogg/Vorbis and Opus (MP3 "where the system libsndfile has it"), so
// their absence is a failure here, not a quiet skip elsewhere.
TEST(AudioRead, ReportsWhatLibsndfileDecodes) {
  EXPECT_TRUE(libsndfile_decodes("WAV"));
  for (const char* required : {"FLAC", "Vorbis", "Opus"}) {
    EXPECT_TRUE(libsndfile_decodes(required)) << libsndfile_version() << " lacks " << required;
  }
  std::printf("%s decodes:", libsndfile_version().c_str());
  for (const char* codec : {"FLAC", "Vorbis", "Opus", "MP3"}) {
    std::printf(" %s %s", codec, libsndfile_decodes(codec) ? "yes" : "NO");
  }
  std::printf("\n");
  EXPECT_THAT([] { libsndfile_decodes("AAC"); },
              ::testing::ThrowsMessage<c10::ValueError>(HasSubstr("unknown codec 'AAC'")));
}

// The fuzz target's seed corpus decodes (what it is for: reaching the decoders).
TEST(AudioRead, FuzzSeedCorpusDecodes) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ATTNZOO_FUZZ_AUDIO_CORPUS_DIR)) {
    if (entry.path().filename().string().rfind("regress_", 0) == 0) continue;
    SCOPED_TRACE(entry.path().string());
    const auto bytes = read_file(entry.path().string());
    EXPECT_GT(read_audio_from_memory(bytes.data(), bytes.size()).samples.size(0), 0);
    ++files;
  }
  EXPECT_GE(files, 5);
}

}  // namespace test_audio_read
}  // namespace attnzoo
