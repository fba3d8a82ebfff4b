#include <attnzoo/preprocess/audio/read.h>

#include <attnzoo/preprocess/audio/finite_samples.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <sndfile.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

namespace attnzoo {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw AudioError(source + ": " + what);
}

constexpr int64_t kMinSampleRate = 1000;
constexpr int64_t kMaxSampleRate = 768000;

}  // namespace

// The bytes under libsndfile: a buffer in memory or an open file, read through the same virtual
// I/O so that a file and its bytes in memory take one path. Not in the anonymous namespace: a
// member of AudioReader::Impl holds one.
namespace detail {
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  int64_t size() const { return size_; }
  int64_t position() const { return position_; }
  // Reads up to `count` bytes at the current position; returns the number read.
  virtual int64_t read(void* out, int64_t count) = 0;
  int64_t seek(int64_t offset, int whence) {
    int64_t target = offset;
    if (whence == SEEK_CUR) target += position_;
    if (whence == SEEK_END) target += size_;
    if (target < 0) return -1;
    position_ = target;  // past the end is allowed, as for a file; reads there return nothing
    return position_;
  }
  // Up to `count` bytes at `offset`, leaving the position where it was.
  std::string peek(int64_t offset, int64_t count) {
    const int64_t saved = position_;
    std::string bytes(static_cast<size_t>(std::max<int64_t>(0, count)), '\0');
    position_ = offset;
    bytes.resize(static_cast<size_t>(read(bytes.data(), count)));
    position_ = saved;
    return bytes;
  }

 protected:
  int64_t size_ = 0;
  int64_t position_ = 0;
};
}  // namespace detail

namespace {

using detail::ByteSource;

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, size_t size) : data_(static_cast<const uint8_t*>(data)) {
    size_ = static_cast<int64_t>(size);
  }
  int64_t read(void* out, int64_t count) override {
    const int64_t n = std::clamp<int64_t>(size_ - position_, 0, std::max<int64_t>(count, 0));
    if (n > 0) std::memcpy(out, data_ + position_, static_cast<size_t>(n));
    position_ += n;
    return n;
  }

 private:
  const uint8_t* data_;
};

class FileSource final : public ByteSource {
 public:
  FileSource(std::FILE* file, int64_t size) : file_(file) { size_ = size; }
  ~FileSource() override { std::fclose(file_); }
  int64_t read(void* out, int64_t count) override {
    if (count <= 0 || position_ >= size_) return 0;
    if (fseeko(file_, static_cast<off_t>(position_), SEEK_SET) != 0) return 0;
    const auto n = static_cast<int64_t>(std::fread(out, 1, static_cast<size_t>(count), file_));
    position_ += n;
    return n;
  }

 private:
  std::FILE* file_;
};

sf_count_t vio_filelen(void* user) { return static_cast<ByteSource*>(user)->size(); }
sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  return static_cast<ByteSource*>(user)->seek(offset, whence);
}
sf_count_t vio_read(void* out, sf_count_t count, void* user) {
  return static_cast<ByteSource*>(user)->read(out, count);
}
sf_count_t vio_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t vio_tell(void* user) { return static_cast<ByteSource*>(user)->position(); }

uint32_t le32(const std::string& b, size_t at) {
  return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8 |
         uint32_t(uint8_t(b[at + 2])) << 16 | uint32_t(uint8_t(b[at + 3])) << 24;
}

// An MPEG audio frame header (ISO 11172-3 / 13818-3): sync, and no reserved version, layer,
// bitrate or sample-rate index.
bool is_mpeg_frame_header(const std::string& b, size_t at) {
  if (b.size() < at + 4) return false;
  const auto b1 = uint8_t(b[at + 1]), b2 = uint8_t(b[at + 2]);
  return uint8_t(b[at]) == 0xFF && (b1 & 0xE0) == 0xE0 && ((b1 >> 3) & 3) != 1 &&
         ((b1 >> 1) & 3) != 0 && (b2 >> 4) != 15 && ((b2 >> 2) & 3) != 3;
}

std::string hex_prefix(const std::string& bytes) {
  std::ostringstream out;
  const size_t n = std::min<size_t>(bytes.size(), 8);
  for (size_t i = 0; i < n; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof(hex), "%02x", uint8_t(bytes[i]));
    out << (i ? " " : "") << hex;
  }
  return out.str();
}

// A RIFF WAV's data chunk must fit in the file. libsndfile reads a cut file as a shorter one
// (it only logs "should be"); Kaldi's reader and Python's wave module refuse it, and so do we.
// A size of 0 or 0xFFFFFFFF is the placeholder of a WAV written to a pipe: not checked.
void check_wav_data_chunk(ByteSource& bytes, const std::string& source) {
  int64_t offset = 12;
  for (int chunk = 0; chunk < 256 && offset + 8 <= bytes.size(); ++chunk) {
    const std::string header = bytes.peek(offset, 8);
    if (header.size() < 8) return;
    const uint32_t size = le32(header, 4);
    if (header.compare(0, 4, "data") == 0) {
      const int64_t available = bytes.size() - offset - 8;
      if (size != 0 && size != 0xFFFFFFFFu && int64_t{size} > available) {
        fail(source, "truncated WAV: the data chunk announces " + std::to_string(size) +
                         " bytes, the file holds " + std::to_string(available) +
                         " after its header (was the download or copy interrupted?)");
      }
      return;
    }
    offset += 8 + int64_t{size} + (size & 1);  // chunks are padded to an even size
  }
  // No data chunk within the file: libsndfile says so when it opens it.
}

// An Ogg stream must end with a whole page that carries the end-of-stream flag. libsndfile takes
// the length from the last page it finds, so a cut file reads as a shorter one; a page is at
// most 27 + 255 + 255 · 255 bytes, so the last one starts within that distance of the end.
void check_ogg_end(ByteSource& bytes, const std::string& source) {
  constexpr int64_t kMaxPage = 27 + 255 + 255 * 255;
  const int64_t from = std::max<int64_t>(0, bytes.size() - kMaxPage);
  const std::string tail = bytes.peek(from, bytes.size() - from);
  for (size_t at = tail.rfind("OggS"); at != std::string::npos;
       at = at == 0 ? std::string::npos : tail.rfind("OggS", at - 1)) {
    if (at + 27 > tail.size() || tail[at + 4] != 0) continue;  // stream structure version 0
    const size_t segments = uint8_t(tail[at + 26]);
    if (at + 27 + segments > tail.size()) continue;
    size_t body = 0;
    for (size_t i = 0; i < segments; ++i) body += uint8_t(tail[at + 27 + i]);
    if (at + 27 + segments + body != tail.size()) continue;  // not a page that ends the data
    if ((uint8_t(tail[at + 5]) & 0x04) == 0) {
      fail(source,
           "truncated Ogg: the stream ends without its end-of-stream page (was the "
           "download or copy interrupted?)");
    }
    return;
  }
  fail(source,
       "truncated Ogg: the data ends inside a page (was the download or copy "
       "interrupted?)");
}

// The container, from the first bytes; anything the frontend does not read is refused here.
AudioContainer identify(ByteSource& bytes, const std::string& source) {
  std::string head = bytes.peek(0, 16);
  if (head.size() >= 12 && head.compare(0, 4, "RIFF") == 0 && head.compare(8, 4, "WAVE") == 0) {
    check_wav_data_chunk(bytes, source);
    return AudioContainer::kWav;
  }
  if (head.size() >= 12 && head.compare(0, 4, "RF64") == 0 && head.compare(8, 4, "WAVE") == 0) {
    return AudioContainer::kRf64;
  }
  if (head.compare(0, 4, "OggS") == 0) {
    check_ogg_end(bytes, source);
    return AudioContainer::kOgg;
  }
  // An ID3v2 tag (MP3s, sometimes FLACs) is skipped to what follows it, as libsndfile does.
  int64_t start = 0;
  if (head.size() >= 10 && head.compare(0, 3, "ID3") == 0) {
    const auto syncsafe = [&](size_t i) { return int64_t(uint8_t(head[i]) & 0x7F); };
    start = 10 + (syncsafe(6) << 21 | syncsafe(7) << 14 | syncsafe(8) << 7 | syncsafe(9));
    if (uint8_t(head[5]) & 0x10) start += 10;  // footer
    head = bytes.peek(start, 4);
  }
  if (head.compare(0, 4, "fLaC") == 0) return AudioContainer::kFlac;
  if (is_mpeg_frame_header(head, 0)) return AudioContainer::kMp3;
  if (start > 0) fail(source, "an ID3 tag followed by neither MP3 nor FLAC data");
  fail(source,
       "not audio in a supported format (WAV, FLAC, Ogg Vorbis/Opus, MP3); it starts with " +
           hex_prefix(bytes.peek(0, 8)));
}

const char* subtype_name(int subtype) {
  switch (subtype) {
    case SF_FORMAT_PCM_S8:
      return "PCM 8-bit";
    case SF_FORMAT_PCM_U8:
      return "PCM 8-bit unsigned";
    case SF_FORMAT_PCM_16:
      return "PCM 16-bit";
    case SF_FORMAT_PCM_24:
      return "PCM 24-bit";
    case SF_FORMAT_PCM_32:
      return "PCM 32-bit";
    case SF_FORMAT_FLOAT:
      return "float 32-bit";
    case SF_FORMAT_DOUBLE:
      return "float 64-bit";
    case SF_FORMAT_ULAW:
      return "mu-law";
    case SF_FORMAT_ALAW:
      return "A-law";
    case SF_FORMAT_VORBIS:
      return "Vorbis";
    case SF_FORMAT_OPUS:
      return "Opus";
    case SF_FORMAT_MPEG_LAYER_I:
      return "MPEG layer I";
    case SF_FORMAT_MPEG_LAYER_II:
      return "MPEG layer II";
    case SF_FORMAT_MPEG_LAYER_III:
      return "MP3";
    default:
      return nullptr;
  }
}

// The name libsndfile gives a subtype it decodes but the frontend refuses (ADPCM, GSM, ...).
std::string libsndfile_subtype_name(int subtype) {
  SF_FORMAT_INFO info{};
  int count = 0;
  sf_command(nullptr, SFC_GET_FORMAT_SUBTYPE_COUNT, &count, sizeof(count));
  for (int i = 0; i < count; ++i) {
    info.format = i;
    if (sf_command(nullptr, SFC_GET_FORMAT_SUBTYPE, &info, sizeof(info)) == 0 &&
        info.format == subtype) {
      return info.name;
    }
  }
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%04x", subtype);
  return hex;
}

}  // namespace

const char* audio_container_name(AudioContainer container) {
  switch (container) {
    case AudioContainer::kWav:
      return "WAV";
    case AudioContainer::kRf64:
      return "RF64";
    case AudioContainer::kFlac:
      return "FLAC";
    case AudioContainer::kOgg:
      return "Ogg";
    case AudioContainer::kMp3:
      return "MP3";
  }
  return "?";
}

bool libsndfile_decodes(const std::string& codec) {
  int wanted_major = 0, wanted_subtype = 0;
  if (codec == "WAV") {
    wanted_major = SF_FORMAT_WAV;
  } else if (codec == "FLAC") {
    wanted_major = SF_FORMAT_FLAC;
  } else if (codec == "Vorbis") {
    wanted_major = SF_FORMAT_OGG, wanted_subtype = SF_FORMAT_VORBIS;
  } else if (codec == "Opus") {
    wanted_major = SF_FORMAT_OGG, wanted_subtype = SF_FORMAT_OPUS;
  } else if (codec == "MP3") {
    wanted_major = SF_FORMAT_MPEG, wanted_subtype = SF_FORMAT_MPEG_LAYER_III;
  } else {
    TORCH_CHECK_VALUE(false, "libsndfile_decodes: unknown codec '", codec,
                      "' (WAV, FLAC, Vorbis, Opus, MP3)");
  }
  const auto listed = [](int count_command, int item_command, int wanted) {
    int count = 0;
    sf_command(nullptr, count_command, &count, sizeof(count));
    for (int i = 0; i < count; ++i) {
      SF_FORMAT_INFO info{};
      info.format = i;
      if (sf_command(nullptr, item_command, &info, sizeof(info)) == 0 && info.format == wanted) {
        return true;
      }
    }
    return false;
  };
  return listed(SFC_GET_FORMAT_MAJOR_COUNT, SFC_GET_FORMAT_MAJOR, wanted_major) &&
         (wanted_subtype == 0 ||
          listed(SFC_GET_FORMAT_SUBTYPE_COUNT, SFC_GET_FORMAT_SUBTYPE, wanted_subtype));
}

std::string libsndfile_version() { return sf_version_string(); }

struct AudioReader::Impl {
  std::string source;
  AudioReadOptions options;
  std::unique_ptr<detail::ByteSource> bytes;
  SF_VIRTUAL_IO io{vio_filelen, vio_seek, vio_read, vio_write, vio_tell};
  SNDFILE* file = nullptr;
  AudioInfo info;
  int64_t frames_read = 0;
  bool at_end = false;
  std::vector<float> block;  // interleaved frames

  ~Impl() {
    if (file != nullptr) sf_close(file);
  }

  void open() {
    const auto& o = options;
    TORCH_CHECK_VALUE(o.channel >= -1, "AudioReadOptions.channel: -1 (mean of all) or a channel ",
                      "index >= 0, got ", o.channel);
    TORCH_CHECK_VALUE(o.block_frames >= 1 && o.block_frames <= (int64_t{1} << 24),
                      "AudioReadOptions.block_frames: 1 to 2^24, got ", o.block_frames);
    TORCH_CHECK_VALUE(o.max_seconds > 0, "AudioReadOptions.max_seconds: must be positive, got ",
                      o.max_seconds);
    if (bytes->size() == 0) fail(source, "empty file (0 bytes)");
    info.container = identify(*bytes, source);
    const std::string container = audio_container_name(info.container);
    bytes->seek(0, SEEK_SET);
    SF_INFO sf{};
    file = sf_open_virtual(&io, SFM_READ, &sf, bytes.get());
    if (file == nullptr) {
      std::string why = sf_strerror(nullptr);
      while (!why.empty() && (why.back() == '.' || why.back() == ' ')) why.pop_back();
      fail(source, "cannot decode the " + container + " data (libsndfile: " + why + ")");
    }
    const int subtype = sf.format & SF_FORMAT_SUBMASK;
    const char* encoding = subtype_name(subtype);
    if (encoding == nullptr) {
      fail(source, "unsupported encoding '" + libsndfile_subtype_name(subtype) + "' in " +
                       container + " (the frontend reads PCM, float, mu-law, A-law, FLAC, " +
                       "Vorbis, Opus and MP3)");
    }
    info.encoding = encoding;
    info.sample_rate = sf.samplerate;
    info.channels = sf.channels;
    info.frames = sf.frames;
    if (info.sample_rate < kMinSampleRate || info.sample_rate > kMaxSampleRate) {
      fail(source, "sample rate " + std::to_string(info.sample_rate) + " Hz, outside the " +
                       std::to_string(kMinSampleRate) + " to " + std::to_string(kMaxSampleRate) +
                       " Hz the frontend resamples");
    }
    if (info.channels < 1) fail(source, "no channels");
    if (o.channel >= info.channels) {
      fail(source, "has " + std::to_string(info.channels) + " channel" +
                       (info.channels > 1 ? "s" : "") + "; channel " + std::to_string(o.channel) +
                       " was asked for (channels count from 0)");
    }
    if (info.frames <= 0) fail(source, "no audio (0 samples)");
    check_duration(info.frames);
    block.resize(static_cast<size_t>(o.block_frames * info.channels));
  }

  void check_duration(int64_t frames) const {
    const double seconds = double(frames) / double(info.sample_rate);
    if (frames != SF_COUNT_MAX && seconds > options.max_seconds) {
      std::ostringstream what;
      what << audio_container_name(info.container) << " of " << seconds
           << " s, longer than the limit of " << options.max_seconds << " s";
      fail(source, what.str());
    }
  }

  torch::Tensor read() {
    if (at_end) return torch::empty({0}, torch::kFloat);
    const sf_count_t n = sf_readf_float(file, block.data(), options.block_frames);
    const int error = sf_error(file);
    if (error != SF_ERR_NO_ERROR) {
      std::string why = sf_error_number(error);
      while (!why.empty() && (why.back() == '.' || why.back() == ' ')) why.pop_back();
      const std::string container = audio_container_name(info.container);
      if (info.frames != SF_COUNT_MAX && frames_read < info.frames) {
        fail(source, "truncated or corrupt " + container + ": decoding failed after " +
                         std::to_string(frames_read) + " of the " + std::to_string(info.frames) +
                         " frames its header announces (libsndfile: " + why + ")");
      }
      fail(source, "corrupt " + container + ": decoding failed after " +
                       std::to_string(frames_read) + " frames (libsndfile: " + why + ")");
    }
    if (n <= 0) {
      at_end = true;
      // FLAC and MP3 announce their length; a cut stream decodes to fewer frames.
      if (info.frames != SF_COUNT_MAX && frames_read < info.frames) {
        fail(source, "truncated " + std::string(audio_container_name(info.container)) +
                         ": its header announces " + std::to_string(info.frames) +
                         " frames, the data holds " + std::to_string(frames_read) +
                         " (was the download or copy interrupted?)");
      }
      return torch::empty({0}, torch::kFloat);
    }
    const int64_t first = frames_read;
    frames_read += n;
    check_duration(frames_read);
    const auto interleaved =
        torch::from_blob(block.data(), {int64_t{n}, info.channels}, torch::kFloat);
    torch::Tensor mono;
    if (info.channels == 1) {
      mono = interleaved.reshape({n}).clone();
    } else if (options.channel >= 0) {
      mono = interleaved.select(1, options.channel).contiguous();
    } else {
      mono = interleaved.mean(1);
    }
    // Float encodings can hold NaN and infinities; every feature of the frame would be NaN.
    if (const auto element = first_non_finite(interleaved)) {
      const int64_t at = first + *element / info.channels;
      std::ostringstream what;
      what << "NaN or infinite sample at frame " << at << " (" << double(at) / info.sample_rate
           << " s)";
      fail(source, what.str());
    }
    return mono;
  }
};

AudioReader::AudioReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AudioReader::AudioReader(AudioReader&&) noexcept = default;
AudioReader& AudioReader::operator=(AudioReader&&) noexcept = default;
AudioReader::~AudioReader() = default;

AudioReader AudioReader::open(const std::string& path, const AudioReadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) fail(path, "no such file");
  if (fs::is_directory(status)) fail(path, "is a directory, not an audio file");
  // A FIFO or device would block or never end: only regular files are read.
  if (!fs::is_regular_file(status)) fail(path, "is not a regular file");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) fail(path, std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fileno(file), &st) != 0) {
    std::fclose(file);
    fail(path, std::string("cannot read its size (") + std::strerror(errno) + ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->source = path;
  impl->options = options;
  impl->bytes = std::make_unique<FileSource>(file, static_cast<int64_t>(st.st_size));
  impl->open();
  return AudioReader(std::move(impl));
}

AudioReader AudioReader::from_memory(const void* data, size_t size, const std::string& source,
                                     const AudioReadOptions& options) {
  TORCH_CHECK_VALUE(data != nullptr || size == 0, "AudioReader::from_memory: null data");
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  impl->options = options;
  impl->bytes = std::make_unique<MemorySource>(data, size);
  impl->open();
  return AudioReader(std::move(impl));
}

const AudioInfo& AudioReader::info() const { return impl_->info; }
const std::string& AudioReader::source() const { return impl_->source; }
int64_t AudioReader::frames_read() const { return impl_->frames_read; }
torch::Tensor AudioReader::read() { return impl_->read(); }

namespace {

Waveform read_all(AudioReader reader) {
  std::vector<torch::Tensor> blocks;
  for (auto block = reader.read(); block.numel() > 0; block = reader.read()) {
    blocks.push_back(block);
  }
  if (blocks.empty()) fail(reader.source(), "no audio (0 samples)");
  Waveform waveform;
  waveform.info = reader.info();
  waveform.info.frames = reader.frames_read();
  waveform.samples = blocks.size() == 1 ? blocks[0] : torch::cat(blocks);
  return waveform;
}

}  // namespace

Waveform read_audio(const std::string& path, const AudioReadOptions& options) {
  return read_all(AudioReader::open(path, options));
}

Waveform read_audio_from_memory(const void* data, size_t size, const std::string& source,
                                const AudioReadOptions& options) {
  return read_all(AudioReader::from_memory(data, size, source, options));
}

}  // namespace attnzoo
