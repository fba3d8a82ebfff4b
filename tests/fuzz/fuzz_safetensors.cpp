// libFuzzer target: the safetensors header parser on arbitrary bytes. Whatever it accepts must be
// in bounds (every tensor byte is read here, so ASan catches a bad offset) and must survive a
// write/re-read round trip; whatever it rejects must be rejected with SafetensorsError.
#include <attnzoo/io/safetensors_format.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::io;
  try {
    const auto header = parse_buffer(data, size, "fuzz");
    volatile unsigned char sink = 0;
    for (const auto& t : header.tensors) {
      for (uint64_t i = t.begin; i < t.end; ++i) sink = sink ^ data[header.data_offset + i];
    }
    const auto again = parse_header(make_header(header.tensors, header.metadata), header.data_size,
                                    "fuzz round trip");
    if (again.tensors.size() != header.tensors.size() || again.metadata != header.metadata) {
      __builtin_trap();
    }
    for (size_t i = 0; i < again.tensors.size(); ++i) {
      const auto& a = again.tensors[i];
      const auto& b = header.tensors[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.begin != b.begin ||
          a.end != b.end) {
        __builtin_trap();
      }
    }
  } catch (const SafetensorsError&) {
  }
  return 0;
}
