// timm model folders, as timm's save_for_hf (and push_to_hf_hub) writes them: config.json with
// `architecture` (a timm model name), `num_classes`, `global_pool`, the `model_args` it was
// created with, `pretrained_cfg` (the data config: input_size, interpolation, crop_pct,
// crop_mode, mean, std) and, when the weights have them, `label_names`; the weights in
// model.safetensors or pytorch_model.bin. The architecture is the zoo's model of that name
// (configs/vit/), with the folder's overrides; its preprocessing is the folder's pretrained_cfg.
#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/source_json.h>
#include <attnzoo/configs/sources.h>
#include <attnzoo/configs/yaml_reader.h>

#include <filesystem>
#include <map>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;
using detail::flow_list;
using detail::number_text;
using detail::SourceJson;

// timm's global_pool values as attnzoo's.
std::string pool_name(const SourceJson& c, const std::string& key) {
  const std::string pool = c.string(key, "token");
  if (pool == "token" || pool == "avg" || pool == "max" || pool == "avgmax") return pool;
  if (pool.empty()) return "none";
  c.fail(key, "is not a pooling attnzoo's ViT implements (token, avg, max, avgmax, '')");
}

// model_args: the keyword arguments of timm's VisionTransformer, as architecture keys.
void apply_model_args(const SourceJson& c, YAML::Node arch) {
  const auto* args = c.find("model_args");
  if (!args) return;
  if (!args->is_object()) c.fail("model_args", "expected an object");
  const auto same = [&](const std::string& key, const nlohmann::json& value) {
    const std::string where = "model_args." + key;
    if (value.is_boolean()) {
      arch[key] = value.get<bool>();
    } else if (value.is_number_integer()) {
      arch[key] = value.get<int64_t>();
    } else if (value.is_number()) {
      arch[key] = number_text(value.get<double>());
    } else if (value.is_null()) {
      arch[key] = YAML::Node(YAML::NodeType::Null);
    } else {
      c.fail(where, "expected a number, a boolean or null");
    }
  };
  static const char* const kSameName[] = {
      "in_chans",      "num_classes",    "embed_dim",     "depth",          "num_heads",
      "mlp_ratio",     "qkv_bias",       "qk_norm",       "proj_bias",      "init_values",
      "class_token",   "no_embed_class", "reg_tokens",    "pre_norm",       "final_norm",
      "fc_norm",       "drop_rate",      "pos_drop_rate", "proj_drop_rate", "attn_drop_rate",
      "drop_path_rate"};
  for (const auto& [key, value] : args->items()) {
    const std::string where = "model_args." + key;
    if (std::find(std::begin(kSameName), std::end(kSameName), key) != std::end(kSameName)) {
      same(key, value);
    } else if (key == "img_size") {
      const auto size = c.integers(where, {}, 1, 8192);
      if (size.size() > 2) c.fail(where, "expected a size or [height, width]");
      arch["img_size"] = size[0];
      if (size.size() == 2 && size[1] != size[0]) arch["img_width"] = size[1];
    } else if (key == "patch_size") {
      const auto size = c.integers(where, {}, 1, 8192);
      if (size.size() > 2 || (size.size() == 2 && size[0] != size[1])) {
        c.fail(where, "attnzoo's patches are square");
      }
      arch["patch_size"] = size[0];
    } else if (key == "global_pool") {
      arch["global_pool"] = pool_name(c, where);
    } else if (key == "act_layer") {
      const auto act = c.string(where, std::nullopt);
      if (act != "gelu" && act != "gelu_tanh") {
        c.fail(where, "is not an activation attnzoo's ViT implements (gelu, gelu_tanh)");
      }
      arch["activation"] = act;
    } else if (key == "pos_embed") {
      if (c.string(where, std::nullopt) != "learn") {
        c.fail(where, "attnzoo's ViT has a learned position embedding ('learn') only");
      }
    } else if (key == "dynamic_img_size" || key == "weight_init" || key == "fix_init") {
      // attnzoo resamples the position embedding for any input size; initialisation is not
      // part of a trained model.
    } else if (key == "dynamic_img_pad" || key == "patch_drop_rate") {
      if (value != nlohmann::json(false) && value != nlohmann::json(0) &&
          value != nlohmann::json(0.0)) {
        c.fail(where, "is an option attnzoo's ViT does not implement");
      }
    } else {
      c.fail(where, "is not an option attnzoo's ViT implements");
    }
  }
}

// pretrained_cfg: timm's data config as the preprocess section.
YAML::Node read_pretrained_cfg(const SourceJson& c, YAML::Node pre) {
  if (!c.has("pretrained_cfg")) return pre;
  const auto size = c.integers("pretrained_cfg.input_size", {}, 1, 8192);
  if (!size.empty()) {
    if (size.size() != 3) c.fail("pretrained_cfg.input_size", "expected [channels, height, width]");
    pre["input_size"] = flow_list(size);
  }
  if (c.has("pretrained_cfg.interpolation")) {
    const auto mode = c.string("pretrained_cfg.interpolation", std::nullopt);
    if (mode != "bicubic" && mode != "bilinear") {
      c.fail("pretrained_cfg.interpolation",
             "is not a filter attnzoo's frontend has (bicubic, bilinear)");
    }
    pre["interpolation"] = mode;
  }
  if (c.has("pretrained_cfg.crop_pct")) {
    pre["crop_pct"] = number_text(c.number("pretrained_cfg.crop_pct", std::nullopt, 1e-6, 1.0));
  }
  if (c.has("pretrained_cfg.crop_mode")) {
    const auto mode = c.string("pretrained_cfg.crop_mode", std::nullopt);
    if (mode != "center" && mode != "squash") {
      c.fail("pretrained_cfg.crop_mode", "is not a crop attnzoo's frontend has (center, squash)");
    }
    pre["crop_mode"] = mode;
  }
  for (const char* key : {"mean", "std"}) {
    const std::string where = std::string("pretrained_cfg.") + key;
    if (c.has(where)) pre[key] = flow_list(c.numbers(where, 3));
  }
  return pre;
}

class TimmSource final : public ModelSource {
 public:
  const char* name() const override { return "timm"; }

  bool detect(const std::string& path) const override {
    const auto config = detail::folder_config(path);
    return config && config->has("architecture") && config->has("pretrained_cfg");
  }

  std::string document(const std::string& path) const override {
    const fs::path dir(path);
    const auto c = SourceJson::read((dir / "config.json").string());
    const std::string architecture = c.string("architecture", std::nullopt);
    const auto registry = default_registry();
    if (!registry.contains(architecture)) {
      c.fail("architecture",
             "is not a model of attnzoo's zoo (attnzoo models lists them; a YAML of that name "
             "in a zoo folder adds it)");
    }
    const std::string zoo_file = registry.file(architecture);
    YAML::Node doc = YAML::Load(detail::read_document_file(zoo_file, "model config"));
    if (doc["family"].as<std::string>("") != "vit") {
      c.fail("architecture", "names a model of family " + doc["family"].as<std::string>("") +
                                 "; timm folders are read as vit models");
    }
    doc["name"] = detail::source_model_name(path);
    YAML::Node arch = doc["architecture"];
    const auto zoo_classes = arch["num_classes"].as<int64_t>(1000);
    if (c.has("num_classes"))
      arch["num_classes"] = c.integer("num_classes", std::nullopt, 0, 1000000);
    if (c.has("global_pool")) arch["global_pool"] = pool_name(c, "global_pool");
    apply_model_args(c, arch);
    doc["preprocess"] = read_pretrained_cfg(c, doc["preprocess"]);
    const auto classes = arch["num_classes"].as<int64_t>(1000);
    if (c.has("label_names")) {
      const auto* names = c.find("label_names");
      std::vector<std::string> labels;
      if (names->is_array()) {
        for (const auto& name : *names) {
          if (!name.is_string() || name.get<std::string>().empty()) labels.clear();
          if (!name.is_string() || name.get<std::string>().empty()) break;
          labels.push_back(name.get<std::string>());
        }
      }
      if (static_cast<int64_t>(labels.size()) != classes) {
        c.fail("label_names", "expected " + std::to_string(classes) + " non-empty names");
      }
      doc["labels"] = labels;
    } else if (classes != zoo_classes || classes == 0) {
      doc.remove("labels");
    }
    YAML::Node checkpoint;
    checkpoint["format"] = "timm";
    checkpoint["file"] = detail::folder_weights(path);
    doc["checkpoint"] = checkpoint;
    return detail::emit_document(
        doc, {"Read from " + fs::absolute(dir).lexically_normal().string() + ":",
              "timm " + architecture + " (attnzoo's " + zoo_file +
                  ") with the folder's "
                  "num_classes, global_pool, model_args, pretrained_cfg and label_names."});
  }
};

}  // namespace

std::unique_ptr<ModelSource> make_timm_source() { return std::make_unique<TimmSource>(); }

}  // namespace attnzoo
