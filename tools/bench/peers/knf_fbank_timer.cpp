// Times kaldi-native-fbank's C++ fbank (knf::OnlineFbank, the library under its Python module)
// for tools/bench/bench_fbank_cpu.py: compiled by that script against the headers and the shared
// module of the pinned PyPI wheel, so the peer is measured without the Python binding's
// list conversion. Reads raw float32 samples (scaled as Kaldi's int16 values), runs `warmup` +
// `iterations` extractions (fresh extractor, accept the waveform, finish, copy the frames into
// one contiguous buffer) and prints every timed call in ms, one per line; with a fourth argument
// also writes the features of the last call there as raw float32.
//
// usage: knf_fbank_timer SAMPLES.f32 WARMUP ITERATIONS [FEATURES.f32]
#include "kaldi-native-fbank/csrc/online-feature.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SAMPLES.f32 WARMUP ITERATIONS [FEATURES.f32]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : -1;
  if (size <= 0 || size % static_cast<std::streamoff>(sizeof(float)) != 0) {
    std::fprintf(stderr, "%s: cannot read float32 samples\n", argv[1]);
    return 1;
  }
  std::vector<float> samples(static_cast<size_t>(size) / sizeof(float));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(samples.data()), size)) {
    std::fprintf(stderr, "%s: cannot read float32 samples\n", argv[1]);
    return 1;
  }
  const int warmup = std::atoi(argv[2]), iterations = std::atoi(argv[3]);

  knf::FbankOptions options;
  options.frame_opts.dither = 0.0f;
  options.frame_opts.samp_freq = 16000.0f;
  options.frame_opts.snip_edges = true;
  options.mel_opts.num_bins = 80;
  std::vector<float> features;
  for (int i = 0; i < warmup + iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    knf::OnlineFbank fbank(options);
    fbank.AcceptWaveform(16000.0f, samples.data(), static_cast<int>(samples.size()));
    fbank.InputFinished();
    const int frames = fbank.NumFramesReady(), dim = fbank.Dim();
    features.resize(static_cast<size_t>(frames) * dim);
    for (int f = 0; f < frames; ++f) {
      std::copy(fbank.GetFrame(f), fbank.GetFrame(f) + dim, features.data() + size_t(f) * dim);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) std::printf("%.6f\n", ms);
  }
  if (argc > 4) {
    std::ofstream out(argv[4], std::ios::binary);
    out.write(reinterpret_cast<const char*>(features.data()),
              static_cast<std::streamsize>(features.size() * sizeof(float)));
  }
  return 0;
}
