// Hugging Face model folders, as save_pretrained writes them: config.json (the model's config;
// keys equal to the config class's defaults may be left out, and take those defaults here),
// the weights (model.safetensors, pytorch_model.bin, or a sharded index of either) and the
// processor's settings (preprocessor_config.json). Three model types:
//
//   vit                              ViTForImageClassification, ViTModel
//   deit                             DeiTForImageClassificationWithTeacher (both heads, averaged),
//                                    DeiTForImageClassification (the class head), DeiTModel
//   audio-spectrogram-transformer    ASTForAudioClassification, ASTModel
//
// with ViTImageProcessor / DeiTImageProcessor (resize to size with resample, then the center
// crop to crop_size for DeiT, rescale, normalize) and ASTFeatureExtractor (Kaldi fbank, padded or
// cut to max_length frames, normalized by mean and twice std).
#include <attnzoo/configs/source_json.h>
#include <attnzoo/configs/sources.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;
using detail::flow_list;
using detail::number_text;
using detail::SourceJson;

// The defaults of ViTConfig, DeiTConfig and ASTConfig (transformers), for keys save_pretrained
// leaves out because they equal them.
struct TransformerDefaults {
  int64_t hidden_size = 768, layers = 12, heads = 12, intermediate = 3072;
  double layer_norm_eps = 1e-12;
};

// The encoder's keys, common to the three types, as ViT architecture keys.
void read_encoder(const SourceJson& c, YAML::Node arch) {
  const TransformerDefaults d;
  const int64_t hidden = c.integer("hidden_size", d.hidden_size, 1, 1 << 16);
  const int64_t heads = c.integer("num_attention_heads", d.heads, 1, 4096);
  const int64_t intermediate = c.integer("intermediate_size", d.intermediate, 1, 1 << 20);
  if (hidden % heads != 0) {
    c.fail("num_attention_heads", "does not divide hidden_size " + std::to_string(hidden));
  }
  // attnzoo's MLP is int(embed_dim · mlp_ratio) wide, as timm's: the ratio that gives exactly
  // intermediate_size (a quarter unit above it where the plain quotient rounds below).
  double ratio = static_cast<double>(intermediate) / static_cast<double>(hidden);
  if (static_cast<int64_t>(static_cast<double>(hidden) * ratio) != intermediate) {
    ratio = (static_cast<double>(intermediate) + 0.25) / static_cast<double>(hidden);
  }
  arch["embed_dim"] = hidden;
  arch["depth"] = c.integer("num_hidden_layers", d.layers, 1, 1000);
  arch["num_heads"] = heads;
  arch["mlp_ratio"] = number_text(ratio);
  arch["qkv_bias"] = c.boolean("qkv_bias", true);
  arch["norm_eps"] = number_text(c.number("layer_norm_eps", d.layer_norm_eps, 1e-30, 1.0));
  const std::string act = c.string("hidden_act", "gelu");
  if (act == "gelu") {
    arch["activation"] = "gelu";
  } else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") {
    arch["activation"] = "gelu_tanh";
  } else {
    c.fail("hidden_act",
           "is not an activation attnzoo implements (gelu, gelu_new, "
           "gelu_pytorch_tanh, gelu_fast)");
  }
  // Dropout at training time: the embeddings', the attention output's and the MLP's (hidden),
  // the attention probabilities'.
  const double hidden_drop = c.number("hidden_dropout_prob", 0.0, 0.0, 0.999999);
  arch["pos_drop_rate"] = number_text(hidden_drop);
  arch["proj_drop_rate"] = number_text(hidden_drop);
  arch["attn_drop_rate"] =
      number_text(c.number("attention_probs_dropout_prob", 0.0, 0.0, 0.999999));
}

// id2label as class names in order; PretrainedConfig's default (two classes) when absent.
std::vector<std::string> read_id2label(const SourceJson& c) {
  const auto* map = c.find("id2label");
  if (!map) return {"LABEL_0", "LABEL_1"};
  if (!map->is_object() || map->empty()) c.fail("id2label", "expected an object of class names");
  std::vector<std::string> names(map->size());
  std::vector<bool> seen(map->size(), false);
  for (const auto& [key, value] : map->items()) {
    size_t index = 0;
    try {
      size_t used = 0;
      index = std::stoul(key, &used);
      if (used != key.size()) throw std::invalid_argument(key);
    } catch (const std::exception&) {
      c.fail("id2label", "has the key '" + key + "', not a class index");
    }
    if (index >= names.size() || seen[index] || !value.is_string() ||
        value.get<std::string>().empty()) {
      c.fail("id2label", "must name each class 0 to " + std::to_string(names.size() - 1) +
                             " once, by a non-empty string");
    }
    seen[index] = true;
    names[index] = value.get<std::string>();
  }
  return names;
}

// The architecture as config.json's `architectures` names it, among those of the type; absent
// (a config saved on its own), the classifier, whose head the weights then must have.
std::string read_architecture(const SourceJson& c, const std::vector<std::string>& accepted) {
  const auto* list = c.find("architectures");
  if (!list) return accepted.front();
  if (!list->is_array() || list->size() != 1 || !(*list)[0].is_string()) {
    c.fail("architectures", "expected one architecture");
  }
  const auto name = (*list)[0].get<std::string>();
  for (const auto& a : accepted) {
    if (a == name) return name;
  }
  std::string known;
  for (const auto& a : accepted) known += (known.empty() ? "" : ", ") + a;
  c.fail("architectures", "is not a model attnzoo runs for this model_type (" + known + ")");
}

// ViTImageProcessor / DeiTImageProcessor as the preprocess section.
YAML::Node read_image_processor(const fs::path& dir) {
  const auto p = SourceJson::read((dir / "preprocessor_config.json").string());
  const std::string type = p.has("image_processor_type") ? p.string("image_processor_type", "")
                                                         : p.string("feature_extractor_type", "");
  const std::vector<std::string> known = {"ViTImageProcessor",      "ViTImageProcessorFast",
                                          "ViTFeatureExtractor",    "DeiTImageProcessor",
                                          "DeiTImageProcessorFast", "DeiTFeatureExtractor"};
  if (std::find(known.begin(), known.end(), type) == known.end()) {
    p.fail(p.has("image_processor_type") ? "image_processor_type" : "feature_extractor_type",
           "is not an image processor attnzoo reproduces (ViTImageProcessor, "
           "DeiTImageProcessor)");
  }
  // The processor's own defaults for the keys its file leaves out.
  const bool deit = type.rfind("DeiT", 0) == 0;
  if (!p.boolean("do_resize", true)) {
    p.fail("do_resize", "attnzoo's frontend resizes every image to the model's size");
  }
  const auto size_of = [&](const std::string& key,
                           int64_t fallback) -> std::pair<int64_t, int64_t> {
    const auto* value = p.find(key);
    if (!value) return {fallback, fallback};
    if (value->is_number_integer()) {
      const auto side = p.integer(key, std::nullopt, 1, 8192);
      return {side, side};
    }
    if (!value->is_object() || !value->contains("height") || !value->contains("width")) {
      p.fail(key, "expected {height, width} (shortest_edge is not what this processor takes)");
    }
    return {p.integer(key + ".height", std::nullopt, 1, 8192),
            p.integer(key + ".width", std::nullopt, 1, 8192)};
  };
  const auto [height, width] = size_of("size", deit ? 256 : 224);
  const int64_t resample = p.integer("resample", deit ? 3 : 2, 0, 5);
  if (resample != 2 && resample != 3) {
    p.fail("resample", "is not a filter attnzoo's frontend has (2 bilinear, 3 bicubic)");
  }
  YAML::Node pre;
  int64_t crop_h = height, crop_w = width;
  if (p.boolean("do_center_crop", deit)) {
    std::tie(crop_h, crop_w) = size_of("crop_size", 224);
    if (crop_h > height || crop_w > width) p.fail("crop_size", "is larger than the resized image");
  }
  // Resized to size exactly, then the crop: crop_pct is crop over size, the same on both sides.
  const double crop_pct = static_cast<double>(crop_h) / static_cast<double>(height);
  if (static_cast<int64_t>(std::floor(crop_h / crop_pct)) != height ||
      static_cast<int64_t>(std::floor(crop_w / crop_pct)) != width) {
    p.fail("crop_size", "crops height and width by different fractions of size");
  }
  pre["input_size"] = flow_list(std::vector<int64_t>{3, crop_h, crop_w});
  pre["crop_pct"] = number_text(crop_pct);
  pre["crop_mode"] = "squash";
  pre["interpolation"] = resample == 3 ? "bicubic" : "bilinear";
  // (pixels · rescale_factor − mean) / std, as attnzoo's (pixels / 255 − mean') / std'.
  double rescale =
      p.boolean("do_rescale", true) ? p.number("rescale_factor", 1.0 / 255.0, 1e-12, 1e6) : 1.0;
  double scale = 255.0 * rescale;
  if (std::abs(scale - 1.0) < 1e-12) scale = 1.0;
  std::vector<double> mean = {0.0, 0.0, 0.0}, stdev = {1.0, 1.0, 1.0};
  if (p.boolean("do_normalize", true)) {
    const std::vector<double> imagenet_mean = {0.485, 0.456, 0.406};
    const std::vector<double> imagenet_std = {0.229, 0.224, 0.225};
    mean = p.has("image_mean") ? p.numbers("image_mean", 3)
                               : (deit ? imagenet_mean : std::vector<double>{0.5, 0.5, 0.5});
    stdev = p.has("image_std") ? p.numbers("image_std", 3)
                               : (deit ? imagenet_std : std::vector<double>{0.5, 0.5, 0.5});
  }
  for (size_t c = 0; c < 3; ++c) {
    if (stdev[c] <= 0.0) p.fail("image_std", "must be positive");
    mean[c] /= scale;
    stdev[c] /= scale;
  }
  pre["mean"] = flow_list(mean);
  pre["std"] = flow_list(stdev);
  return pre;
}

// ASTFeatureExtractor as the features section: torchaudio's Kaldi fbank as the extractor calls
// it (Hanning window, samples not scaled to 16 bits, 10 ms shift, no dither), max_length frames,
// (x − mean) / (2 std).
YAML::Node read_ast_features(const fs::path& dir, int64_t mel_bins, int64_t frames) {
  const auto p = SourceJson::read((dir / "preprocessor_config.json").string());
  const std::string type = p.string("feature_extractor_type", "");
  if (type != "ASTFeatureExtractor") {
    p.fail("feature_extractor_type",
           "is not a feature extractor attnzoo reproduces "
           "(ASTFeatureExtractor)");
  }
  if (p.integer("feature_size", 1, 1, 1) != 1) p.fail("feature_size", "must be 1");
  if (p.integer("num_mel_bins", 128, 1, 4096) != mel_bins) {
    p.fail("num_mel_bins", "differs from config.json's num_mel_bins " + std::to_string(mel_bins));
  }
  if (p.integer("max_length", 1024, 1, 1 << 20) != frames) {
    p.fail("max_length", "differs from config.json's max_length " + std::to_string(frames));
  }
  if (p.number("padding_value", 0.0, -1e30, 1e30) != 0.0) {
    p.fail("padding_value", "attnzoo pads with zero frames");
  }
  YAML::Node f;
  f["kind"] = "fbank";
  f["sample_rate"] = p.integer("sampling_rate", 16000, 1000, 384000);
  f["num_mel_bins"] = mel_bins;
  f["frame_length_ms"] = "25.0";
  f["frame_shift_ms"] = "10.0";
  f["dither"] = "0.0";
  f["preemphasis"] = "0.97";
  f["remove_dc_offset"] = true;
  f["window"] = "hanning";
  f["snip_edges"] = true;
  f["low_freq"] = "20.0";
  f["high_freq"] = "0.0";
  f["int16_scale"] = false;
  f["allow_empty_mel_bins"] = true;
  f["frames"] = frames;
  const bool normalize = p.boolean("do_normalize", true);
  f["mean"] = number_text(normalize ? p.number("mean", -4.2677393, -1e6, 1e6) : 0.0);
  f["std"] = number_text(normalize ? 2.0 * p.number("std", 4.5689974, 1e-12, 1e6) : 1.0);
  return f;
}

class HfSource final : public ModelSource {
 public:
  const char* name() const override { return "hf"; }

  bool detect(const std::string& path) const override {
    const auto config = detail::folder_config(path);
    return config && config->has("model_type");
  }

  std::string document(const std::string& path) const override {
    const fs::path dir(path);
    const auto c = SourceJson::read((dir / "config.json").string());
    const std::string type = c.string("model_type", std::nullopt);
    YAML::Node doc;
    doc["name"] = detail::source_model_name(path);
    YAML::Node arch;
    std::string architecture;
    if (type == "vit" || type == "deit") {
      const bool deit = type == "deit";
      architecture = read_architecture(
          c, deit ? std::vector<std::string>{"DeiTForImageClassificationWithTeacher",
                                             "DeiTForImageClassification", "DeiTModel"}
                  : std::vector<std::string>{"ViTForImageClassification", "ViTModel"});
      doc["family"] = "vit";
      const auto image = c.integers("image_size", {224}, 1, 8192);
      const auto patch = c.integers("patch_size", {16}, 1, 8192);
      if (image.size() > 2) c.fail("image_size", "expected a size or [height, width]");
      if (patch.size() > 2 || (patch.size() == 2 && patch[0] != patch[1])) {
        c.fail("patch_size", "attnzoo's patches are square");
      }
      arch["img_size"] = image[0];
      if (image.size() == 2 && image[1] != image[0]) arch["img_width"] = image[1];
      arch["patch_size"] = patch[0];
      arch["in_chans"] = c.integer("num_channels", 3, 1, 64);
      arch["class_token"] = true;
      arch["dist_token"] = deit;
      if (deit) arch["dist_head"] = architecture == "DeiTForImageClassificationWithTeacher";
      arch["global_pool"] = "token";
      read_encoder(c, arch);
      const bool head = architecture != "ViTModel" && architecture != "DeiTModel";
      const auto labels = read_id2label(c);
      arch["num_classes"] = head ? static_cast<int64_t>(labels.size()) : int64_t{0};
      doc["architecture"] = arch;
      doc["preprocess"] = read_image_processor(dir);
      if (head) doc["labels"] = labels;
    } else if (type == "audio-spectrogram-transformer") {
      architecture = read_architecture(c, {"ASTForAudioClassification", "ASTModel"});
      doc["family"] = "ast";
      const int64_t mel_bins = c.integer("num_mel_bins", 128, 1, 4096);
      const int64_t frames = c.integer("max_length", 1024, 1, 1 << 20);
      const int64_t stride = c.integer("frequency_stride", 10, 1, 8192);
      if (c.integer("time_stride", 10, 1, 8192) != stride) {
        c.fail("time_stride", "differs from frequency_stride; attnzoo's AST strides both alike");
      }
      arch["num_mel_bins"] = mel_bins;
      arch["max_length"] = frames;
      arch["patch_size"] = c.integer("patch_size", 16, 1, 8192);
      arch["patch_stride"] = stride;
      read_encoder(c, arch);
      // The AST family has no position dropout: the embeddings' dropout is its drop_rate-free
      // inference path; keep what it reads.
      arch.remove("pos_drop_rate");
      const bool head = architecture == "ASTForAudioClassification";
      const auto labels = read_id2label(c);
      arch["num_classes"] = head ? static_cast<int64_t>(labels.size()) : int64_t{0};
      doc["architecture"] = arch;
      doc["features"] = read_ast_features(dir, mel_bins, frames);
      if (head) doc["labels"] = labels;
    } else {
      c.fail("model_type",
             "is not a model type attnzoo reads (vit, deit, "
             "audio-spectrogram-transformer)");
    }
    YAML::Node checkpoint;
    checkpoint["format"] = "hf";
    checkpoint["file"] = detail::folder_weights(path);
    doc["checkpoint"] = checkpoint;
    const std::string version = c.string("transformers_version", "an unknown version");
    return detail::emit_document(
        doc, {"Read from " + fs::absolute(dir).lexically_normal().string() + ":",
              "Hugging Face " + architecture + " (model_type " + type + "), transformers " +
                  version + "."});
  }
};

}  // namespace

std::unique_ptr<ModelSource> make_hf_source() { return std::make_unique<HfSource>(); }

}  // namespace attnzoo
