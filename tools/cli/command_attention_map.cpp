// `attnzoo attention-map`: where a model's attention goes, as one PNG.
// The input is prepared as the model takes it (the config's eval preprocessing of an image, or
// its audio features); the family says how the tokens lie over it (configs/model_family.h).
//   Patches on a grid (ViT on an image): per head of the chosen layer the CLS token's attention
//       to the patches (the mean over all queries when the model pools without a class token),
//       and the attention rollout over all layers (Abnar & Zuidema 2020), each upsampled to the
//       picture and overlaid on it with a colour map; a labelled grid.
//   Frames along time (the Conformer on audio): the log-mel features on top and, per head of the
//       chosen layer, the attention each encoder frame receives (the mean over queries) as one
//       heat-map row, on a shared time axis.
// Probabilities are recorded during the model's ordinary forward (AttentionRecorder), through the
// math backend under the configured backend's mask: what the model computes, not an
// approximation of it.
#include "tools/cli/commands.h"
#include "tools/cli/plot.h"

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/api/inference.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/train/diagnostics.h>

#include <torch/torch.h>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <set>
#include <stdexcept>

namespace attnzoo::cli {
namespace {

struct AttentionMapOptions {
  std::string model;
  std::string weights;
  std::string format;
  std::string key;
  std::vector<std::string> overrides;
  int64_t layer = -1;
  std::string input;
  std::string out;
};

// The layout of the figures, in pixels.
constexpr int kGap = 8;          // between and around tiles
constexpr int kTitle = 28;       // the title line
constexpr int kLabel = 22;       // the label above a grid's tile
constexpr int kMinTile = 160;    // grid tiles are the picture scaled by an integer to at least this
constexpr int kColumns = 4;      // grid tiles per row
constexpr int kPlotWidth = 640;  // timeline: at least this wide, a whole number per frame
constexpr int kRowHeight = 24;   // timeline: one head
constexpr int kRowLabel = 90;    // timeline: the labels' column

std::string extension_of(const std::string& path) {
  auto ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool is_audio_file(const std::string& path) {
  static const std::set<std::string> audio = {".wav",  ".flac", ".mp3", ".ogg", ".opus",
                                              ".aiff", ".aif",  ".au",  ".w64", ".caf"};
  return audio.count(extension_of(path)) > 0;
}

bool is_image_file(const std::string& path) {
  static const std::set<std::string> image = {".png",  ".jpg", ".jpeg", ".bmp",
                                              ".webp", ".tif", ".tiff"};
  return image.count(extension_of(path)) > 0;
}

// --layer N (negative: from the end) as an index in [0, layers).
int64_t resolve_layer(int64_t layer, int64_t layers) {
  if (layer < -layers || layer >= layers) {
    throw Error("--layer " + std::to_string(layer) + ": out of range, the model has " +
                std::to_string(layers) + " layers (0 to " + std::to_string(layers - 1) +
                ", or -1 for the last)");
  }
  return layer < 0 ? layers + layer : layer;
}

// values [rows, cols] (any floating dtype) -> 8-bit, min to 0 and max to 255 (a flat map: 0).
cv::Mat to_gray(const torch::Tensor& values) {
  auto v = values.to(torch::kFloat).contiguous();
  const float lo = v.min().item<float>(), hi = v.max().item<float>();
  v = hi > lo ? (v - lo) / (hi - lo) : torch::zeros_like(v);
  v = (v * 255.0f).round().clamp(0, 255).to(torch::kByte).contiguous();
  return cv::Mat(static_cast<int>(v.size(0)), static_cast<int>(v.size(1)), CV_8UC1, v.data_ptr())
      .clone();
}

void put_label(cv::Mat& canvas, const std::string& text, int x, int baseline) {
  cv::putText(canvas, text, cv::Point(x, baseline), cv::FONT_HERSHEY_SIMPLEX, 0.45,
              cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
}

// The preprocessed image [3, H, W] (normalised) back to 8-bit BGR for display.
cv::Mat display_image(const torch::Tensor& pixels, const ImageTransformOptions& image) {
  const auto mean = torch::tensor(std::vector<double>(image.mean.begin(), image.mean.end()))
                        .to(torch::kFloat)
                        .view({3, 1, 1});
  const auto std = torch::tensor(std::vector<double>(image.std.begin(), image.std.end()))
                       .to(torch::kFloat)
                       .view({3, 1, 1});
  const auto rgb = (pixels * std + mean)
                       .clamp(0.0, 1.0)
                       .mul(255.0)
                       .round()
                       .to(torch::kByte)
                       .permute({1, 2, 0})
                       .contiguous();
  cv::Mat view(static_cast<int>(rgb.size(0)), static_cast<int>(rgb.size(1)), CV_8UC3,
               rgb.data_ptr());
  cv::Mat bgr;
  cv::cvtColor(view, bgr, cv::COLOR_RGB2BGR);
  return bgr;
}

// The input as the model takes it (a batch of one), and the picture to draw attention over: the
// image, or the log-mel features (time along x, low frequencies at the bottom).
struct PreparedInput {
  ModelInput input;
  cv::Mat picture;
  bool rows_reversed = false;  // the picture's rows run opposite to the tokens' (low bins at the
                               // bottom of a spectrogram)
  std::string description;     // "H x W pixels" or "T x F features"
};

PreparedInput prepare_input(const AttentionMapOptions& options, const ModelConfig& config) {
  const auto& family = model_family(config.family);
  PreparedInput prepared;
  if (family.input_kind() == InputKind::kImages) {
    const EvalImageTransform transform(image_transform_options(config.image));
    const auto pixels = transform(decode_image(options.input));  // [C, H, W]
    prepared.input.values = pixels.unsqueeze(0);
    prepared.picture = display_image(pixels, config.image.transform);
    prepared.description =
        std::to_string(pixels.size(1)) + " x " + std::to_string(pixels.size(2)) + " pixels";
    return prepared;
  }
  const FeatureExtractor extractor(audio_feature_options(config.features));
  const auto features = audio_file_features(options.input, extractor).features;  // [T, F]
  const int64_t needed = family.min_frames(config);
  if (features.size(0) < needed) {
    throw Error(options.input + ": too short, " + std::to_string(features.size(0)) +
                " feature frames; " + config.name + " needs at least " + std::to_string(needed));
  }
  prepared.input.values = features.unsqueeze(0);
  cv::Mat mel_color;
  cv::applyColorMap(to_gray(features.t().flip({0})), mel_color, cv::COLORMAP_VIRIDIS);
  prepared.picture = mel_color;
  prepared.rows_reversed = true;
  prepared.description =
      std::to_string(features.size(0)) + " x " + std::to_string(features.size(1)) + " features";
  return prepared;
}

// Tokens on a grid (the patches of an image or a spectrogram): one tile per head of `layer` and
// one of the rollout over all layers, each a heat map over the picture.
cv::Mat draw_grid(const ModelConfig& config, const PreparedInput& prepared,
                  const TokenLayout& layout, const std::vector<torch::Tensor>& all, int64_t layer,
                  std::string& what) {
  const int64_t rows = layout.rows, cols = layout.cols;
  // The first token's row when it makes the prediction; otherwise every token contributes to the
  // pooled features, and the mean over the queries says where the model looks.
  const bool first = layout.first_token_predicts;
  const auto pick = [&](const torch::Tensor& a) {  // [..., N, N] -> [..., rows, cols]
    auto q = first ? a.select(-2, 0) : a.mean(-2);
    q = q.narrow(-1, layout.prefix, rows * cols);
    auto sizes = q.sizes().vec();
    sizes.pop_back();
    sizes.push_back(rows);
    sizes.push_back(cols);
    q = q.reshape(sizes);
    return prepared.rows_reversed ? q.flip({-2}) : q;
  };
  const auto heads_maps = pick(all[static_cast<size_t>(layer)][0]);  // [H, rows, cols]
  const auto rollout_map = pick(attention_rollout(all)[0]);          // [rows, cols]

  const auto& image = prepared.picture;
  const int scale = std::max(
      1, (kMinTile + std::min(image.rows, image.cols) - 1) / std::min(image.rows, image.cols));
  cv::Mat tile_image;
  cv::resize(image, tile_image, cv::Size(image.cols * scale, image.rows * scale), 0, 0,
             cv::INTER_CUBIC);
  const auto overlay = [&](const torch::Tensor& map) {
    cv::Mat gray, big, heat, out;
    gray = to_gray(map);
    cv::resize(gray, big, tile_image.size(), 0, 0, cv::INTER_LINEAR);
    cv::applyColorMap(big, heat, cv::COLORMAP_JET);
    cv::addWeighted(tile_image, 0.45, heat, 0.55, 0.0, out);
    return out;
  };
  std::vector<std::pair<std::string, cv::Mat>> tiles = {{"input", tile_image}};
  const int64_t heads = heads_maps.size(0);
  for (int64_t h = 0; h < heads; ++h) {
    tiles.emplace_back("layer " + std::to_string(layer) + " head " + std::to_string(h),
                       overlay(heads_maps[h]));
  }
  tiles.emplace_back("rollout, " + std::to_string(all.size()) + " layers", overlay(rollout_map));

  const int n = static_cast<int>(tiles.size());
  const int columns = std::min(n, kColumns), grid_rows = (n + columns - 1) / columns;
  const int tw = tile_image.cols, th = tile_image.rows;
  cv::Mat canvas(kTitle + grid_rows * (kLabel + th + kGap) + kGap,
                 columns * tw + (columns + 1) * kGap, CV_8UC3, cv::Scalar(255, 255, 255));
  const std::string query = first ? "CLS token's attention" : "mean attention of all tokens";
  put_label(canvas, config.name + ": " + query + " to the patches", kGap, 19);
  for (int i = 0; i < n; ++i) {
    const int x = kGap + (i % columns) * (tw + kGap);
    const int y = kTitle + (i / columns) * (kLabel + th + kGap);
    put_label(canvas, tiles[static_cast<size_t>(i)].first, x, y + 16);
    tiles[static_cast<size_t>(i)].second.copyTo(canvas(cv::Rect(x, y + kLabel, tw, th)));
  }
  what = ", " + std::to_string(rows) + " x " + std::to_string(cols) + " patches; layer " +
         std::to_string(layer) + " of " + std::to_string(all.size()) + ", " +
         std::to_string(heads) + " heads, " + query;
  return canvas;
}

// Tokens along time (encoder frames): one row per head of `layer`, the attention each frame
// receives (mean over the queries), under the picture stretched over the same span.
cv::Mat draw_timeline(const ModelConfig& config, const PreparedInput& prepared,
                      const std::vector<torch::Tensor>& all, int64_t layer, std::string& what) {
  const auto received = all[static_cast<size_t>(layer)][0].mean(1);  // [H, T']
  const int64_t heads = received.size(0), frames = received.size(1);

  const int cell = std::max<int>(2, static_cast<int>((kPlotWidth + frames - 1) / frames));
  const int plot_w = cell * static_cast<int>(frames);
  const int mel_h = std::clamp(2 * prepared.picture.rows, 80, 240);
  cv::Mat canvas(kTitle + mel_h + kGap + static_cast<int>(heads) * kRowHeight + kGap,
                 kRowLabel + plot_w + kGap, CV_8UC3, cv::Scalar(255, 255, 255));
  put_label(canvas,
            config.name + ": layer " + std::to_string(layer) + " of " + std::to_string(all.size()) +
                ", attention received per encoder frame " + "(mean over queries)",
            kGap, 19);
  cv::Mat mel_big;
  cv::resize(prepared.picture, mel_big, cv::Size(plot_w, mel_h), 0, 0, cv::INTER_LINEAR);
  mel_big.copyTo(canvas(cv::Rect(kRowLabel, kTitle, plot_w, mel_h)));
  put_label(canvas, "log-mel", kGap, kTitle + mel_h / 2 + 5);
  const int rows_y = kTitle + mel_h + kGap;
  for (int64_t h = 0; h < heads; ++h) {
    cv::Mat gray = to_gray(received[h].unsqueeze(0)), big, color;
    cv::resize(gray, big, cv::Size(plot_w, kRowHeight), 0, 0, cv::INTER_NEAREST);
    cv::applyColorMap(big, color, cv::COLORMAP_INFERNO);
    const int y = rows_y + static_cast<int>(h) * kRowHeight;
    color.copyTo(canvas(cv::Rect(kRowLabel, y, plot_w, kRowHeight)));
    put_label(canvas, "head " + std::to_string(h), kGap, y + kRowHeight / 2 + 5);
  }
  what = " -> " + std::to_string(frames) + " encoder frames; layer " + std::to_string(layer) +
         " of " + std::to_string(all.size()) + ", " + std::to_string(heads) + " heads";
  return canvas;
}

int run_attention_map(const AttentionMapOptions& options) {
  if (extension_of(options.out) != ".png") {
    throw Error("--out " + options.out + ": must name a .png file");
  }
  const auto config = resolve_model_config(options.model, options.overrides);
  const auto& family = model_family(config.family);
  const bool images = family.input_kind() == InputKind::kImages;
  // The input and the layer are checked before the model is built (a large one takes seconds).
  std::error_code error;
  if (!std::filesystem::is_regular_file(options.input, error)) {
    throw Error(options.input + ": no such file");
  }
  if (images ? is_audio_file(options.input) : is_image_file(options.input)) {
    throw Error(options.input + (images ? ": an audio file" : ": an image") + ", but " +
                config.name + " is a " + config.family + " model, which takes " +
                input_kind_name(family.input_kind()));
  }
  const int64_t layer = resolve_layer(options.layer, family.attention_layers(config));
  torch::InferenceMode inference;
  const auto prepared = prepare_input(options, config);
  std::string weights;
  auto model = inference_model(config, options.weights, options.format, options.key, torch::kCPU,
                               torch::kFloat, weights);
  const auto records = record_attention(*model.module, [&] { model.forward(prepared.input); });
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(records.size()) == family.attention_layers(config));
  std::vector<torch::Tensor> all;
  for (const auto& r : records) all.push_back(r.weights);
  const auto layout = family.token_layout(config, prepared.input);
  // A grid shows the rollout over every layer; a timeline the chosen layer only.
  const bool grid = layout.rows > 1;
  for (size_t l = 0; l < all.size(); ++l) {
    if ((grid || l == static_cast<size_t>(layer)) && !all[l].defined()) {
      throw Error("attention backend '" + family.attention_backend(config) +
                  "' approximates softmax attention: no probabilities to show");
    }
  }
  std::string what;
  cv::Mat canvas;
  if (grid) {
    canvas = draw_grid(config, prepared, layout, all, layer, what);
  } else {
    canvas = draw_timeline(config, prepared, all, layer, what);
  }
  try {
    write_png(canvas, options.out);
  } catch (const Error& e) {
    throw Error(std::string("--out ") + e.what());
  }
  std::cout << config.name << " (" << config.source << "), " << weights << "\n"
            << options.input << ": " << prepared.description << what << " -> " << options.out
            << " (" << canvas.cols << " x " << canvas.rows << ")\n";
  return 0;
}

}  // namespace

Command add_attention_map_command(CLI::App& app) {
  auto options = std::make_shared<AttentionMapOptions>();
  auto* sub = app.add_subcommand(
      "attention-map",
      "Draw a model's attention on an image or an audio file as a PNG (patches: per-head maps "
      "and rollout; encoder frames: heads x time)");
  add_model_options(sub, options->model, options->weights, options->format, options->key,
                    options->overrides, all_checkpoint_formats());
  sub->add_option("--layer", options->layer,
                  "The layer whose heads are drawn (0-based; negative: from the end)")
      ->capture_default_str();
  sub->add_option("input", options->input,
                  "An image or an audio file, as the model takes (see attnzoo models)")
      ->required();
  sub->add_option("--out", options->out, "The PNG to write")->required();
  return {sub, [options] { return run_attention_map(*options); }};
}

}  // namespace attnzoo::cli
