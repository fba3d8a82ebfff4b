// libFuzzer target: the tar reader (io/tar_archive.h: ustar, GNU long names, pax headers) and
// gunzip under it, on arbitrary bytes. Whatever it accepts must list files that lie inside the
// (inflated) bytes, each found by its name, readable whole (ASan checks every byte read) and as a
// slice of the same size. Whatever it refuses must be a CheckpointError.
#include <attnzoo/core/error.h>
#include <attnzoo/io/tar_archive.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::io;
  const MemorySource source(data, size, "fuzz");
  TarLimits limits;
  limits.max_gunzip_bytes = 16 << 20;
  limits.max_entries = 1000;
  try {
    const TarArchive tar(source, limits);
    const uint64_t total = tar.source().size();
    for (const auto& entry : tar.entries()) {
      if (entry.data_offset > total || entry.size > total - entry.data_offset) __builtin_trap();
      if (tar.find(entry.name) == nullptr) __builtin_trap();
      const auto bytes = tar.read_string(entry, 1 << 20, "file");
      if (bytes.size() != entry.size) __builtin_trap();
      const auto slice = tar.open(entry);
      if (slice->size() != entry.size) __builtin_trap();
      if (entry.size > 0) {
        unsigned char last = 0;
        slice->read(entry.size - 1, &last, 1, "last byte");
        if (last != static_cast<unsigned char>(bytes.back())) __builtin_trap();
      }
    }
  } catch (const attnzoo::CheckpointError&) {
  }
  return 0;
}
