// `attnzoo bench attention`: time and peak memory of each attention backend against the sequence
// length N, next to reference cost estimates (standard multi-head attention at d_model 512, 8
// heads), with the scaling exponent of each backend fitted on a log-log scale so that N² and N
// growth read directly off the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::cli {

struct AttentionBenchOptions {
  std::vector<std::string> backends;  // empty: every registered backend
  std::vector<int64_t> lengths = {512, 1024, 2048, 4096, 8192, 16384};
  int64_t batch = 1;
  int64_t heads = 8;
  int64_t dim = 512;  // d_model; head_dim = dim / heads
  std::string dtype = "fp32";
  std::string device = "cpu";
  bool backward = false;  // time forward + backward of sum(out · g) with respect to q, k, v
  bool causal = false;
  bool padding = false;  // key lengths at 75% of N for every other batch entry
  int64_t repeats = 5;
  int64_t warmup = 1;
  double max_memory_gb = 8.0;  // skip a (backend, N) predicted to need more
  double max_seconds = 20.0;   // a call slower than this ends the backend's sweep
  int64_t threads = 0;         // 0: LibTorch's default
  int64_t seed = 0;
  std::string json;
  std::string plot;
  // Backend settings (AttentionBackendOptions).
  int64_t chunk_size = 256;
  int64_t block_size = 64;
  int64_t window = 0;
};

// Runs the benchmark, prints the table on stdout and progress on stderr; returns the exit status.
// Throws (one-line messages naming the flag) on invalid options.
int run_attention_bench(const AttentionBenchOptions& options);

}  // namespace attnzoo::cli
