#include <attnzoo/core/error.h>
#include <attnzoo/io/gunzip.h>

#include <zlib.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace attnzoo::io {
namespace {

constexpr size_t kGunzipStep = size_t{1}
                               << 20;  // compressed bytes read, and output grown, per step
constexpr uint64_t kGunzipMaxRatio = 1032;

[[noreturn]] void gzip_fail(const ByteSource& source, const std::string& what) {
  throw CheckpointError(source.name() + ": " + what);
}

}  // namespace

bool is_gzip(const ByteSource& source) {
  if (source.size() < 2) return false;
  unsigned char magic[2];
  source.read(0, magic, 2, "gzip magic");
  return magic[0] == 0x1f && magic[1] == 0x8b;
}

std::string gunzip(const ByteSource& source, uint64_t max_bytes) {
  if (!is_gzip(source)) gzip_fail(source, "not a gzip file (no 1f 8b magic)");
  const uint64_t limit = std::min(max_bytes, source.size() > UINT64_MAX / kGunzipMaxRatio
                                                 ? UINT64_MAX
                                                 : source.size() * kGunzipMaxRatio);
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) gzip_fail(source, "zlib failed to start");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);
  std::vector<unsigned char> block(
      static_cast<size_t>(std::min<uint64_t>(kGunzipStep, source.size())));
  std::string out;
  uint64_t consumed = 0;
  int members = 0;
  // The next block of the file as inflate()'s input, once it has used up the last one.
  const auto refill = [&] {
    if (stream.avail_in == 0 && consumed < source.size()) {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(block.size(), source.size() - consumed));
      source.read(consumed, block.data(), n, "gzip data");
      consumed += n;
      stream.next_in = block.data();
      stream.avail_in = static_cast<uInt>(n);
    }
  };
  while (true) {
    refill();
    const uint64_t produced = out.size();
    // At the limit, one more byte of room tells whether the stream would produce more; it must
    // live until inflate() has written it.
    unsigned char probe = 0;
    if (produced >= limit) {
      stream.next_out = &probe;
      stream.avail_out = 1;
    } else {
      const size_t grow = static_cast<size_t>(std::min<uint64_t>(kGunzipStep, limit - produced));
      out.resize(produced + grow);
      stream.next_out = reinterpret_cast<unsigned char*>(out.data()) + produced;
      stream.avail_out = static_cast<uInt>(grow);
    }
    const uInt room = stream.avail_out;
    const int status = inflate(&stream, Z_NO_FLUSH);
    const uInt written = room - stream.avail_out;
    if (produced >= limit) {
      if (written > 0) {
        gzip_fail(source, "inflates to more than " + std::to_string(limit) + " bytes (the limit" +
                              (limit < max_bytes ? ": deflate's 1:1032 of the file's size)"
                                                 : " for this file)"));
      }
    } else {
      out.resize(produced + written);
    }
    if (status == Z_STREAM_END) {
      ++members;
      // Another member may follow; anything else after the last one is an error.
      if (stream.avail_in == 0 && consumed == source.size()) break;
      refill();
      if (stream.avail_in < 2 || stream.next_in[0] != 0x1f || stream.next_in[1] != 0x8b) {
        gzip_fail(source,
                  "bytes after gzip member " + std::to_string(members) + " are not another member");
      }
      if (inflateReset(&stream) != Z_OK) gzip_fail(source, "zlib failed to restart");
      continue;
    }
    if (status == Z_BUF_ERROR && stream.avail_in == 0 && consumed == source.size()) {
      gzip_fail(source, "ends before its gzip stream does (truncated)");
    }
    if (status != Z_OK && status != Z_BUF_ERROR) {
      gzip_fail(source, "corrupt gzip data (" +
                            (stream.msg ? std::string(stream.msg) : std::string("zlib")) + ")");
    }
  }
  return out;
}

}  // namespace attnzoo::io
