// Shared by the audio frontend's tests: the reference files written by make_audio_reference.py (a
// CTest fixture), files written with libsndfile, and the comparison rule against float32
// references.
#pragma once

#include "common/reference_files.h"
#include "common/test_util.h"

#include <attnzoo/preprocess/audio/fbank.h>

#include <sndfile.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace attnzoo::testing {

// The folder make_audio_reference.py writes (the fixture preprocess.make_audio_reference).
inline const ReferenceFiles& reference() {
  static const ReferenceFiles files(ATTNZOO_AUDIO_REFERENCE_DIR, "audio");
  return files;
}

// An option set of the manifest (AudioFeatureOptions' field names) as options.
inline AudioFeatureOptions fbank_options(const nlohmann::json& o) {
  AudioFeatureOptions options;
  options.kind = AudioFeatureKind::kFbank;
  options.num_mel_bins = o["num_mel_bins"].get<int64_t>();
  options.frame_length_ms = o["frame_length_ms"].get<double>();
  options.frame_shift_ms = o["frame_shift_ms"].get<double>();
  options.preemphasis = o["preemphasis"].get<double>();
  options.remove_dc_offset = o["remove_dc_offset"].get<bool>();
  options.window = parse_frame_window(o["window"].get<std::string>());
  options.snip_edges = o["snip_edges"].get<bool>();
  options.energy_floor = o["energy_floor"].get<double>();
  options.low_freq = o["low_freq"].get<double>();
  options.high_freq = o["high_freq"].get<double>();
  options.int16_scale = o["int16_scale"].get<bool>();
  return options;
}

// Ours against a float32 reference, with the reference's own rounding error measured against
// the float64 oracle. The rule (FlashAttention's, ARCHITECTURE.md): every element within
// 1e-3 + 2 × the reference's own error; `over` counts the elements above 1e-3.
struct Parity {
  double max = 0.0;            // max |ours - reference|
  double reference_max = 0.0;  // max |reference - float64|
  int64_t over = 0;            // elements with |ours - reference| > 1e-3
  int64_t count = 0;
  bool ok = false;
};

inline Parity parity(const torch::Tensor& ours, const torch::Tensor& reference,
                     const torch::Tensor& oracle) {
  Parity p;
  const auto d = (ours.to(torch::kDouble) - reference.to(torch::kDouble)).abs();
  const auto own = (reference.to(torch::kDouble) - oracle.to(torch::kDouble)).abs();
  p.max = d.max().item<double>();
  p.reference_max = own.max().item<double>();
  p.over = (d > 1e-3).sum().item<int64_t>();
  p.count = d.numel();
  p.ok = (d <= 1e-3 + 2.0 * own).all().item<bool>();
  return p;
}

// Writes frames [N, C] float32 (interleaved by row) with libsndfile in `format`
// (SF_FORMAT_WAV | SF_FORMAT_PCM_16, ...). Returns false when this libsndfile cannot write it.
inline bool write_sndfile(const std::string& path, const torch::Tensor& frames, int rate,
                          int format) {
  const auto data = frames.to(torch::kFloat).contiguous();
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = static_cast<int>(data.size(1));
  info.format = format;
  if (!sf_format_check(&info)) return false;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  if (file == nullptr) return false;
  // Float data is clipped to [-1, 1] by the integer encoders, as by any writer.
  sf_command(file, SFC_SET_CLIPPING, nullptr, SF_TRUE);
  const auto written = sf_writef_float(file, data.data_ptr<float>(), data.size(0));
  sf_close(file);
  return written == data.size(0);
}

// `samples` pushed into a FeatureStream in blocks of 1 to max_block samples (sizes drawn from
// rng), then finish(): all the frames in order, and how many came out before finish().
struct StreamedFeatures {
  torch::Tensor features;
  int64_t before_finish = 0;
};
inline StreamedFeatures stream_in_blocks(const FeatureExtractor& extractor,
                                         const torch::Tensor& samples, int64_t max_block,
                                         std::mt19937_64& rng) {
  FeatureStream stream(extractor);
  std::vector<torch::Tensor> parts;
  StreamedFeatures out;
  for (int64_t at = 0; at < samples.size(0);) {
    const int64_t n = std::min<int64_t>(samples.size(0) - at, 1 + rng() % max_block);
    parts.push_back(stream.push(samples.narrow(0, at, n)));
    out.before_finish += parts.back().size(0);
    at += n;
  }
  parts.push_back(stream.finish());
  out.features = torch::cat(parts);
  return out;
}

// The Python interpreter of the venv, as ctest passes it.
inline std::string python() {
  const char* value = std::getenv("ATTNZOO_PYTHON");
  return value != nullptr ? value : "";
}

}  // namespace attnzoo::testing
