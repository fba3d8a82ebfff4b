// The statistics files of global CMVN (cepstral mean and variance normalisation) that speech
// toolkits keep beside a checkpoint, read into the mean and the inverse standard deviation of
// each feature:
//   kaldi_text   Kaldi's compute-cmvn-stats written as text, WeNet's `global_cmvn`:
//                "[ sum_1 ... sum_F count \n sumsq_1 ... sumsq_F 0 ]"
//   wenet_json   WeNet's JSON form: {"mean_stat": [F], "var_stat": [F], "frame_num": count}
//   espnet_npz   ESPnet's feats_stats.npz (collect_stats): count, sum [F], sum_square [F]
//   npy          the Kaldi matrix [2, F + 1] as an .npy array, which ESPnet's GlobalMVN also takes
// The format is told by the bytes. All four give, as WeNet's load_cmvn and ESPnet's GlobalMVN
// compute them in float64: mean = sum / count, var = sumsq / count − mean², floored at 1e-20,
// istd = 1 / √var. Kaldi's binary form is refused by name, as WeNet refuses it.
//
// Torch-free (fuzzed, tests/fuzz/fuzz_cmvn_stats.cpp); errors are CheckpointError naming the file.
#pragma once

#include <attnzoo/io/byte_source.h>

#include <string>
#include <vector>

namespace attnzoo::io {

enum class CmvnStatsFormat { kKaldiText, kWenetJson, kEspnetNpz, kNpy };
const char* to_string(CmvnStatsFormat format);

struct CmvnStats {
  CmvnStatsFormat format = CmvnStatsFormat::kKaldiText;
  double frames = 0.0;       // the count the sums are over
  std::vector<double> mean;  // [F]
  std::vector<double> istd;  // [F]
};

CmvnStats parse_cmvn_stats(const ByteSource& source);
// The file at `path` (at most 256 MiB).
CmvnStats load_cmvn_stats(const std::string& path);

}  // namespace attnzoo::io
