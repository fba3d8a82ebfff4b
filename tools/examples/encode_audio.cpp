// Encodes audio files with a Conformer of the zoo, offline and as a live stream: the README's
// speech example, built against an installed attnzoo (CMakeLists.txt beside it).
//
//   encode_audio conformer_kws $PREFIX/share/attnzoo/weights/conformer_kws.safetensors a.wav
//   encode_audio wenet_u2pp_conformer_librispeech wenet/final.pt a.wav   # WeNet's checkpoint
//
// The model is a name of the zoo (configs/conformer/) or a YAML file; its `features:` section
// brings the frontend (Kaldi fbank, rate). WEIGHTS "-" runs random weights (seed 0). For models
// that stream (a `streaming:` chunk), the file is also pushed through SpeechEncoder::Stream in
// 100 ms blocks, as live audio would arrive, and compared with the offline frames.
#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/preprocess/audio/read.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL WEIGHTS.safetensors|- AUDIO...\n", argv[0]);
    return 2;
  }
  try {
    attnzoo::SpeechEncoderOptions options;
    if (std::string(argv[2]) != "-") options.weights = argv[2];
    const attnzoo::SpeechEncoder encoder(argv[1], options);
    const auto& config = encoder.config();
    const std::vector<std::string> paths(argv + 3, argv + argc);
    int status = 0;
    for (const auto& u : encoder.encode(paths)) {  // a bad file gets its error, the others go on
      if (!u.ok()) {
        std::fprintf(stderr, "%s\n", u.error.c_str());
        status = 1;
        continue;
      }
      std::printf("%s: %.2f s -> %lld x %lld encoded frames every %.0f ms, %.1f ms\n",
                  u.audio.c_str(), u.seconds, static_cast<long long>(u.encoded.size(0)),
                  static_cast<long long>(u.encoded.size(1)), u.frame_ms, u.encode_ms);
      if (u.log_probs.defined()) {
        // Greedy CTC: the most likely token per frame, repeats and blanks (id 0) removed.
        const auto best = u.log_probs.argmax(-1);
        std::vector<int64_t> tokens;
        for (int64_t t = 0; t < best.size(0); ++t) {
          const auto id = best[t].item<int64_t>();
          if (id != 0 && (t == 0 || id != best[t - 1].item<int64_t>())) tokens.push_back(id);
        }
        std::printf("  CTC greedy: %zu tokens\n", tokens.size());
      }
      if (config.streaming.chunk_size > 0) {
        // Live: 100 ms blocks at the file's own rate, frames as each block completes them.
        const auto audio = attnzoo::read_audio(u.audio);
        auto stream = encoder.stream(audio.info.sample_rate);
        const int64_t block = audio.info.sample_rate / 10, n = audio.samples.size(0);
        std::vector<torch::Tensor> frames;
        for (int64_t at = 0; at < n; at += block) {
          frames.push_back(stream.push(audio.samples.narrow(0, at, std::min(block, n - at))));
        }
        frames.push_back(stream.finish());
        const auto streamed = torch::cat(frames);
        std::printf("  streamed in chunks of %lld: %lld frames, max difference %.1e\n",
                    static_cast<long long>(stream.chunk_size()),
                    static_cast<long long>(streamed.size(0)),
                    (streamed - u.encoded).abs().max().item<double>());
      }
    }
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "encode_audio: %s\n", e.what());
    return 1;
  }
}
