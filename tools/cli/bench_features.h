// `attnzoo bench features`: the time of the audio frontend on one file: the features of its
// decoded samples in memory (what kaldi-native-fbank and torchaudio.compliance.kaldi.fbank are
// compared on, tools/bench/bench_fbank_cpu.py) and the whole path from the file (read, resample,
// features, block by block). Every timed call is kept; medians and minima are printed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnzoo::cli {

struct FeatureBenchOptions {
  std::string input;                  // an audio file
  std::string model = "conformer_s";  // whose `features:` section is used
  std::vector<std::string> overrides;
  int64_t iterations = 10;
  int64_t warmup = 2;
  int64_t threads = 0;  // 0: LibTorch's default
  std::string json;     // every timed call and the summary
  std::string output;   // safetensors with the in-memory features (for a parity check)
};

int run_feature_bench(const FeatureBenchOptions& options);

}  // namespace attnzoo::cli
