// `attnzoo encode`: audio files through a SpeechEncoder (api/speech_encoder.h): the features of
// the model's config and its Conformer, offline or chunk by chunk (--stream). Per file a line with
// the duration, frames and real-time factor (JSON lines with --json); with --out the encoder
// frames, embeddings, CTC log-probabilities and classification logits go to a safetensors file. A
// bad file gets its error and the others are still encoded; the exit status is 1 if any failed.
#include "tools/cli/commands.h"

#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>

namespace attnzoo::cli {
namespace {

struct EncodeOptions {
  std::string model;
  std::vector<std::string> audio;
  SpeechEncoderOptions encoder;
  std::string out;
  bool json = false;
  bool stream = false;
  double chunk_ms = 0.0;
};

int run_encode(EncodeOptions options) {
  if (options.stream) {
    // The chunk in encoder frames: chunk_ms over (frame shift × subsampling), or the config's.
    const auto config = resolve_model_config(options.model, options.encoder.overrides);
    int64_t chunk = config.streaming.chunk_size;
    if (options.chunk_ms > 0.0) {
      const double frame_ms = model_family(config.family).frame_ms(config);
      if (frame_ms <= 0.0) {
        throw Error("--chunk-ms: " + config.name + " is a " + config.family +
                    " model, whose outputs are not frames along time");
      }
      chunk = std::max<int64_t>(1, std::llround(options.chunk_ms / frame_ms));
    }
    if (chunk <= 0) {
      throw Error("--stream: give --chunk-ms or a config with streaming.chunk_size");
    }
    options.encoder.stream_chunk = chunk;
  }
  const SpeechEncoder encoder(options.model, options.encoder);
  const auto& config = encoder.config();
  if (!options.json) {
    std::cout << config.name << " (" << config.source << "), " << encoder.weights_description()
              << ", " << options.encoder.device << ", " << dtype_name(encoder.dtype());
    if (options.encoder.stream_chunk > 0) {
      std::cout << ", streaming in chunks of " << options.encoder.stream_chunk << " encoder frames";
    }
    std::cout << "\n";
  }
  io::TensorDict tensors;
  int failed = 0;
  for (size_t i = 0; i < options.audio.size(); ++i) {
    const auto results = encoder.encode(std::vector<std::string>{options.audio[i]});
    const auto& r = results.front();
    if (!r.ok()) {
      ++failed;
      if (options.json) {
        std::cout << nlohmann::json{{"audio", r.audio}, {"error", r.error}}.dump() << "\n";
      } else {
        std::cout << r.audio << ": error: " << r.error << "\n";
      }
      continue;
    }
    const double rtf = r.seconds > 0.0 ? r.encode_ms / (1000.0 * r.seconds) : 0.0;
    const std::string index = std::to_string(i);
    if (!options.out.empty()) {
      tensors.insert("encoded_" + index, r.encoded.contiguous());
      tensors.insert("embedding_" + index, r.embedding.contiguous());
      if (r.log_probs.defined()) tensors.insert("log_probs_" + index, r.log_probs.contiguous());
      if (r.logits.defined()) tensors.insert("logits_" + index, r.logits.contiguous());
    }
    if (options.json) {
      std::cout << nlohmann::json{{"audio", r.audio},
                                  {"index", i},
                                  {"seconds", r.seconds},
                                  {"feature_frames", r.feature_frames},
                                  {"encoder_frames", r.encoded.size(0)},
                                  {"ms", r.encode_ms},
                                  {"rtf", rtf}}
                       .dump()
                << "\n";
    } else {
      std::printf("%s: %.2f s, %lld feature frames -> %lld x %lld encoded, %.1f ms, RTF %.4f\n",
                  r.audio.c_str(), r.seconds, static_cast<long long>(r.feature_frames),
                  static_cast<long long>(r.encoded.size(0)),
                  static_cast<long long>(r.encoded.size(1)), r.encode_ms, rtf);
    }
    std::cout.flush();
  }
  if (!options.out.empty()) {
    io::save_safetensors(options.out, tensors,
                         {{"model", config.name}, {"weights", encoder.weights_description()}});
  }
  if (failed > 0) {
    std::cerr << "attnzoo encode: " << failed << " of " << options.audio.size()
              << " files failed\n";
    return 1;
  }
  return 0;
}

}  // namespace

Command add_encode_command(CLI::App& app) {
  auto options = std::make_shared<EncodeOptions>();
  auto* sub = app.add_subcommand("encode", "Encode audio files with a Conformer of the zoo");
  add_model_options(sub, options->model, options->encoder,
                    {"attnzoo", "torchaudio", "wenet", "espnet", "nemo"});
  add_device_options(sub, options->encoder);
  sub->add_option("--threads", options->encoder.threads, "LibTorch intra-op threads")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--batch-size", options->encoder.batch_size,
                  "Files per forward pass (padded and masked; --stream: one at a time)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--out", options->out,
                  "safetensors file for encoded_<i>, embedding_<i>, log_probs_<i> (a CTC head) "
                  "and logits_<i> (a classification head)");
  sub->add_flag("--json", options->json,
                "One JSON object per file and line: audio, seconds, frames, ms, rtf; or error");
  sub->add_flag("--stream", options->stream,
                "Encode chunk by chunk through the streaming caches (the model must stream)");
  sub->add_option("--chunk-ms", options->chunk_ms,
                  "With --stream: chunk length in milliseconds (default: the config's chunk)")
      ->check(CLI::Range(1.0, 1e6));
  sub->add_option("audio", options->audio, "Audio files")->required();
  return {sub, [options] { return run_encode(*options); }};
}

}  // namespace attnzoo::cli
