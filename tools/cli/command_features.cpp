// `attnzoo features`: audio files through a speech model's frontend (its config's `features:`
// section: Kaldi fbank or Whisper log-mel at the model's rate; preprocess/), written as the
// zero-padded batch "features" [B, T, F] and "lengths" [B] (int64) of a safetensors file: the
// input `attnzoo forward` takes for a Conformer, and a way to compare our features with
// kaldi-native-fbank's or torchaudio's from a script. Files are read in blocks, so a long
// recording costs the memory of its features, not of its samples.
#include "tools/cli/commands.h"

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/audio/features.h>

#include <torch/torch.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace attnzoo::cli {
namespace {

struct FeaturesOptions {
  std::string model;
  std::vector<std::string> audio;
  std::string output;
  std::vector<std::string> overrides;
  int64_t channel = -1;
};

int run_features(const FeaturesOptions& options) {
  const auto config = resolve_model_config(options.model, options.overrides);
  if (model_family(config.family).input_kind() != InputKind::kAudioFeatures) {
    throw Error(config.name + " is a " + config.family +
                " model; features prepares audio for speech models");
  }
  if (!config.features) {
    throw Error(config.name + " (" + config.source +
                "): the config has no features section; the model takes features "
                "made elsewhere");
  }
  const FeatureExtractor extractor(audio_feature_options(config.features));
  AudioReadOptions read;
  read.channel = options.channel;

  // Every file is featurised before anything is written: one bad file, no output.
  std::vector<torch::Tensor> utterances;
  std::ostringstream report;
  for (const auto& path : options.audio) {
    const auto result = audio_file_features(path, extractor, read);
    const auto& info = result.info;
    report << path << ": " << audio_container_name(info.container) << " " << info.encoding << ", "
           << info.sample_rate << " Hz, " << info.channels << " channel"
           << (info.channels > 1 ? "s" : "") << ", " << info.seconds() << " s -> "
           << result.features.size(0) << " frames\n";
    utterances.push_back(result.features);
  }
  const auto batch = pad_features(utterances);

  std::string list;
  for (const auto& path : options.audio) list += (list.empty() ? "" : "\n") + path;
  io::TensorDict tensors;
  tensors.insert("features", batch.features);
  tensors.insert("lengths", batch.lengths);
  io::save_safetensors(options.output, tensors,
                       {{"model", config.name},
                        {"config", config.source},
                        {"audio", list},
                        {"features", extractor.describe()}});
  std::ostringstream shape, lengths_shape;
  shape << batch.features.sizes();
  lengths_shape << batch.lengths.sizes();
  std::cout << report.str() << config.name << " (" << config.source << "): " << extractor.describe()
            << "\n"
            << "features " << shape.str() << ", lengths " << lengths_shape.str() << " -> "
            << options.output << "\n";
  return 0;
}

}  // namespace

Command add_features_command(CLI::App& app) {
  auto options = std::make_shared<FeaturesOptions>();
  auto* sub = app.add_subcommand(
      "features",
      "Read audio files and compute a speech model's features; write 'features' and 'lengths'");
  sub->add_option("--model", options->model,
                  "A registered name (see attnzoo models) or a YAML file")
      ->required();
  sub->add_option("audio", options->audio, "Audio files (WAV, FLAC, Ogg Vorbis/Opus, MP3)")
      ->required();
  sub->add_option("--out", options->output,
                  "safetensors file to write 'features' [B, T, F] and 'lengths' [B]")
      ->required();
  // One value per --set, so that the files may follow it.
  sub->add_option("--set", options->overrides,
                  "Override a config value, key.path=value (YAML value); repeatable")
      ->allow_extra_args(false);
  sub->add_option("--channel", options->channel,
                  "Use this channel only (from 0); default: the mean of all channels")
      ->check(CLI::NonNegativeNumber);
  return {sub, [options] { return run_features(*options); }};
}

}  // namespace attnzoo::cli
