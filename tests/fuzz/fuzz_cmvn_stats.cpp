// libFuzzer target: the readers of CMVN statistics (io/cmvn_stats.h: Kaldi text, WeNet JSON,
// ESPnet's .npz and the .npy matrix, with the .npy header parser and the zip reader under them)
// on arbitrary bytes. Whatever they accept must be usable statistics: as many means as inverse
// standard deviations, at least one, all finite, every istd positive and at most 1e10 (the
// variance floor of 1e-20). Whatever they refuse must be a CheckpointError. The same bytes also go
// to the .npy reader alone: an accepted header's elements lie inside the bytes (ASan checks each
// one as it is read) and number as many as its shape says.
#include <attnzoo/core/error.h>
#include <attnzoo/io/cmvn_stats.h>
#include <attnzoo/io/npy_format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnzoo::io;
  const MemorySource source(data, size, "fuzz");
  try {
    const auto stats = parse_cmvn_stats(source);
    if (stats.mean.empty() || stats.mean.size() != stats.istd.size()) __builtin_trap();
    if (!(stats.frames > 0.0)) __builtin_trap();
    for (size_t i = 0; i < stats.mean.size(); ++i) {
      if (!std::isfinite(stats.mean[i]) || !(stats.istd[i] > 0.0) || !(stats.istd[i] <= 1e10)) {
        __builtin_trap();
      }
    }
  } catch (const attnzoo::CheckpointError&) {
  }
  try {
    const auto header = parse_npy_header(source);
    const auto values = read_npy_values(source, header);
    if (values.size() != header.count) __builtin_trap();
  } catch (const attnzoo::CheckpointError&) {
  }
  return 0;
}
