// Gzipped files inflated once for a series of readers. A model loaded from a gzipped .nemo reads
// the archive several times, each through its own TarArchive: is it a NeMo model, its config, its
// tokenizer, its weights. The inflated bytes are shared while any reader holds them; and while an
// InflationScope lives (the task APIs hold one while they load a model), the bytes of the file
// inflated last are kept (one file at most) for the next reader, so one load inflates its file
// once. A file is the same file while its name, size and modification time are; sources that
// are not files (a buffer, an entry of another archive) are inflated each time.
#pragma once

#include <attnzoo/io/byte_source.h>

#include <cstdint>
#include <memory>
#include <string>

namespace attnzoo::io {

// gunzip(source, max_bytes) (io/gunzip.h), or the bytes it gave for the same file before.
std::shared_ptr<const std::string> inflate_shared(const ByteSource& source, uint64_t max_bytes);

// Keeps the file inflated last while it lives; scopes nest, and the last to end drops the bytes
// (those a reader still holds stay until it is done).
class InflationScope {
 public:
  InflationScope();
  ~InflationScope();
  InflationScope(const InflationScope&) = delete;
  InflationScope& operator=(const InflationScope&) = delete;
};

// Files inflated by inflate_shared in this process so far.
uint64_t inflation_count();

}  // namespace attnzoo::io
