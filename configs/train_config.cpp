#include <attnzoo/configs/train_config.h>

#include <attnzoo/core/dtype_device.h>

#include <attnzoo/configs/config_sections.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/yaml_reader.h>
#include <attnzoo/models/conformer.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

namespace attnzoo {
namespace {

using detail::Document;
using detail::MapReader;
namespace fs = std::filesystem;

constexpr double kHuge = std::numeric_limits<double>::max();

using detail::names_a_file;
using detail::resolve;

TrainDataConfig read_data(MapReader data, const std::string& source) {
  TrainDataConfig d;
  d.kind = data.enumeration(
      "kind", std::nullopt,
      {TrainDataKind::kImageFolder, TrainDataKind::kImageList, TrainDataKind::kAudioList});
  const bool folder = d.kind == TrainDataKind::kImageFolder;
  const auto check = [&](const std::string& key, const std::string& value) {
    const std::string path = resolve(source, value);
    std::error_code error;
    if (folder ? !fs::is_directory(path, error) : !fs::is_regular_file(path, error)) {
      data.fail(key, "'" + path + "' is not " + (folder ? "a folder" : "a list file"));
    }
    return path;
  };
  d.train = check("train", data.string("train", std::nullopt));
  if (data.has("val")) d.val = check("val", data.string("val", std::nullopt));
  if (auto classes = data.string_list("classes")) {
    if (classes->size() < 2) data.fail("classes", "a classifier needs at least 2 classes");
    d.classes = *classes;
  }
  d.workers = data.integer("workers", 2, 0, 256);
  d.prefetch = data.integer("prefetch", 4, 1, 1024);
  data.finish();
  return d;
}

TrainAugmentConfig read_augment(MapReader a) {
  TrainAugmentConfig g;
  g.random_resized_crop = a.boolean("random_resized_crop", true);
  if (auto scale = a.number_list("crop_scale", 2, 0.0, 1.0, true)) {
    if ((*scale)[0] > (*scale)[1]) a.fail("crop_scale", "expected low <= high");
    g.crop_scale = {(*scale)[0], (*scale)[1]};
  }
  if (auto ratio = a.number_list("crop_ratio", 2, 0.0, 100.0, true)) {
    if ((*ratio)[0] > (*ratio)[1]) a.fail("crop_ratio", "expected low <= high");
    g.crop_ratio = {(*ratio)[0], (*ratio)[1]};
  }
  g.hflip = a.number("hflip", 0.5, 0.0, 1.0);
  g.color_jitter = a.number("color_jitter", 0.0, 0.0, 10.0);
  g.affine_degrees = a.number("affine_degrees", 0.0, 0.0, 180.0);
  g.affine_translate = a.number("affine_translate", 0.0, 0.0, 1.0);
  if (auto scale = a.number_list("affine_scale", 2, 0.0, 100.0, true)) {
    if ((*scale)[0] > (*scale)[1]) a.fail("affine_scale", "expected low <= high");
    g.affine_scale = {(*scale)[0], (*scale)[1]};
  }
  g.affine_shear = a.number("affine_shear", 0.0, 0.0, 89.0);
  g.elastic_alpha = a.number("elastic_alpha", 0.0, 0.0, 10000.0);
  g.elastic_sigma = a.number("elastic_sigma", 5.0, 0.0, 100.0);
  g.elastic_p = a.number("elastic_p", 1.0, 0.0, 1.0);
  g.mixup_alpha = a.number("mixup_alpha", 0.0, 0.0, 100.0);
  g.cutmix_alpha = a.number("cutmix_alpha", 0.0, 0.0, 100.0);
  g.mix_prob = a.number("mix_prob", 1.0, 0.0, 1.0);
  if (auto speeds = a.number_list("speed_perturb", 0, 0.5, 2.0)) g.speed_perturb = *speeds;
  g.spec_augment = a.boolean("spec_augment", false);
  g.freq_masks = a.integer("freq_masks", 2, 0, 100);
  g.freq_width = a.integer("freq_width", 27, 0, 10000);
  g.time_masks = a.integer("time_masks", 2, 0, 100);
  g.time_width = a.integer("time_width", 100, 0, 1000000);
  g.time_ratio = a.number("time_ratio", 1.0, 0.0, 1.0);
  g.time_warp = a.integer("time_warp", 0, 0, 10000);
  a.finish();
  return g;
}

AdamWOptions read_optimizer(MapReader o) {
  AdamWOptions c;
  o.choice("name", "adamw", {"adamw"});
  c.lr = o.number("lr", 1e-3, 0.0, 10.0, true);
  c.weight_decay = o.number("weight_decay", 0.05, 0.0, 10.0);
  if (auto betas = o.number_list("betas", 2, 0.0, 1.0)) {
    if ((*betas)[0] >= 1.0 || (*betas)[1] >= 1.0) o.fail("betas", "expected values below 1");
    c.beta1 = (*betas)[0];
    c.beta2 = (*betas)[1];
  }
  c.eps = o.number("eps", 1e-8, 0.0, 1.0, true);
  c.no_decay_on_norms_biases_tokens = o.boolean("no_decay_on_norms_biases_tokens", true);
  for (auto rule : o.map_list("rules")) {
    ParameterGroupRule r;
    r.pattern = rule.string("pattern", std::nullopt);
    try {
      std::regex check(r.pattern);
    } catch (const std::regex_error& e) {
      rule.fail("pattern", std::string("not a regular expression: ") + e.what());
    }
    r.lr = rule.nullable_number("lr", std::nullopt, 0.0, 10.0);
    r.weight_decay = rule.nullable_number("weight_decay", std::nullopt, 0.0, 10.0);
    for (auto slice : rule.map_list("slices")) {
      SliceSettings s;
      s.lr = slice.nullable_number("lr", std::nullopt, 0.0, 10.0);
      s.weight_decay = slice.nullable_number("weight_decay", std::nullopt, 0.0, 10.0);
      slice.finish();
      r.slices.push_back(s);
    }
    if (r.slices.size() == 1) rule.fail("slices", "one slice is the whole tensor: set lr instead");
    rule.finish();
    c.rules.push_back(std::move(r));
  }
  o.finish();
  return c;
}

TrainLoopConfig read_loop(MapReader t) {
  TrainLoopConfig l;
  l.loss = t.enumeration("loss", l.loss, {TrainLoss::kCrossEntropy, TrainLoss::kCtc});
  l.dynamic_chunk = t.integer("dynamic_chunk", 0, 0, detail::kMaxChunk);
  l.full_context_prob = t.number("full_context_prob", l.full_context_prob, 0.0, 1.0);
  l.dynamic_left_chunks = t.boolean("dynamic_left_chunks", false);
  l.epochs = t.integer("epochs", 1, 1, 1000000);
  l.steps = t.integer("steps", 0, 0, int64_t{1} << 40);
  l.batch_size = t.integer("batch_size", 32, 1, 1 << 20);
  l.accumulation = t.integer("accumulation", 1, 1, 1 << 16);
  l.clip_grad_norm = t.number("clip_grad_norm", 0.0, 0.0, kHuge);
  l.label_smoothing = t.number("label_smoothing", 0.0, 0.0, 1.0);
  if (l.label_smoothing >= 1.0) t.fail("label_smoothing", "expected a value below 1");
  l.ctc_weight = t.number("ctc_weight", 1.0, 0.0, 1.0);
  l.reverse_weight = t.number("reverse_weight", 0.0, 0.0, 1.0);
  if (l.reverse_weight >= 1.0) t.fail("reverse_weight", "expected a value below 1");
  l.seed = t.integer("seed", 0, 0, std::numeric_limits<int64_t>::max());
  l.device = t.device("device", "cpu");
  l.precision = parse_dtype("precision", t.choice("precision", "fp32", {"fp32", "bf16"}));
  if (l.precision == c10::kBFloat16 && l.device.is_cpu()) {
    t.fail("precision", "bf16 autocast is for CUDA; on the CPU train in fp32");
  }
  l.threads = t.integer("threads", 0, 0, 1024);
  l.log_every = t.integer("log_every", 10, 1, int64_t{1} << 40);
  l.eval_every = t.integer("eval_every", 0, 0, int64_t{1} << 40);
  l.checkpoint_every = t.integer("checkpoint_every", 0, 0, int64_t{1} << 40);
  l.diagnostics_every = t.integer("diagnostics_every", 0, 0, int64_t{1} << 40);
  l.ema_decay = t.number("ema_decay", 0.0, 0.0, 1.0);
  if (l.ema_decay >= 1.0) t.fail("ema_decay", "expected a value below 1 (0 switches it off)");
  l.ema_warmup = t.integer("ema_warmup", 10, 0, int64_t{1} << 40);
  l.output = t.string("output", "");
  t.finish();
  return l;
}

// What train.ctc_weight, reverse_weight and label_smoothing ask of a CTC model: an attention
// decoder, and a right-to-left one for reverse_weight > 0 (the Trainer checks the token table's
// <sos/eos>).
void check_attention_objective(const TrainConfig& c, MapReader& train) {
  const auto& t = c.train;
  if (t.ctc_weight >= 1.0) {
    if (t.label_smoothing > 0.0) {
      train.fail("label_smoothing",
                 "label smoothing is for train.loss cross_entropy, or for an attention decoder "
                 "(train.ctc_weight < 1)");
    }
    if (t.reverse_weight > 0.0) {
      train.fail("reverse_weight", "the right-to-left decoder learns with train.ctc_weight < 1");
    }
    return;
  }
  const auto* conformer = c.model.has_options<ConformerEncoderOptions>()
                              ? &c.model.options<ConformerEncoderOptions>()
                              : nullptr;
  if (!conformer || !conformer->decoder()) {
    train.fail("ctc_weight", "a ctc_weight below 1 trains an attention decoder; " + c.model.source +
                                 " has none (architecture.decoder)");
  }
  if (t.reverse_weight > 0.0 && conformer->decoder()->right_blocks() == 0) {
    train.fail("reverse_weight",
               "reverse_weight trains a right-to-left decoder; " + c.model.source +
                   "'s decoder has none (architecture.decoder.kind: bitransformer)");
  }
}

// What train.loss and train.dynamic_chunk ask of the model and the data. `model`: the model as
// the document names it (resolved), for a second reading with streaming on.
void check_objective(const TrainConfig& c, const std::string& model, MapReader& root,
                     MapReader& train) {
  const auto& family = model_family(c.model.family);
  if (c.train.loss == TrainLoss::kCtc) {
    if (family.ctc_vocab(c.model) <= 0) {
      train.fail("loss", "ctc needs a model with a CTC head; " + c.model.name +
                             " has none (architecture.vocab_size is 0)");
    }
    if (!c.model.decoding.defined()) {
      train.fail("loss", "ctc tokenizes the transcripts with the model's token table; " +
                             c.model.source + " has no decoding.units");
    }
    if (!c.data.classes.empty()) {
      root.fail("data",
                "data.classes name the classes of a classifier; train.loss ctc reads "
                "transcripts");
    }
    check_attention_objective(c, train);
  } else if (c.train.ctc_weight < 1.0 || c.train.reverse_weight > 0.0) {
    train.fail(c.train.ctc_weight < 1.0 ? "ctc_weight" : "reverse_weight",
               "joint CTC/attention training is for train.loss ctc");
  } else if (family.num_classes(c.model) <= 0) {
    train.fail("loss", "cross_entropy needs a model with a classification head; " + c.model.name +
                           " has none (set train.loss: ctc for a CTC head)");
  }
  if (c.train.dynamic_chunk > 0) {
    // The family says whether the model can stream: the model read again with a chunk mask.
    auto overrides = c.model_overrides;
    overrides.push_back("streaming.chunk_size=1");
    try {
      resolve_model_config(model, overrides);
    } catch (const ConfigError& e) {
      train.fail("dynamic_chunk",
                 std::string("dynamic chunks train a model to stream: ") + e.what());
    }
  }
}

TrainConfig read_train_document(const Document& document,
                                const std::vector<std::string>& overrides) {
  MapReader root(document, document.root(), "");
  TrainConfig c;
  c.source = document.source();
  c.overrides = overrides;
  c.model_ref = root.string("model", std::nullopt);
  if (auto sets = root.string_list("model_set")) c.model_overrides = *sets;
  // A model YAML is found relative to this file; a name through the registry.
  std::string model = c.model_ref;
  if (names_a_file(model)) model = resolve(c.source, model);
  try {
    c.model = resolve_model_config(model, c.model_overrides);
  } catch (const ConfigError& e) {
    root.fail("model", e.what());
  }
  if (root.has("init_weights")) {
    c.init_weights = resolve(c.source, root.string("init_weights", std::nullopt));
    std::error_code error;
    if (!fs::is_regular_file(c.init_weights, error)) {
      root.fail("init_weights", "'" + c.init_weights + "' is not a file");
    }
  }
  c.init_format = root.string("init_format", "");
  c.init_key = root.string("init_key", "");
  if (auto prefixes = root.string_list("init_new")) {
    if (!root.has("init_weights")) {
      root.fail("init_new", "names what init_weights may lack; give init_weights");
    }
    if (c.init_format != "" && c.init_format != "attnzoo") {
      root.fail("init_new", "needs init_weights in attnzoo's layout (init_format: attnzoo), not " +
                                c.init_format);
    }
    c.init_new = *prefixes;
  }
  // A model with weights of its own (a model folder's) starts from them.
  if (c.init_weights.empty()) c.init_weights = c.model.checkpoint_file;
  c.data = read_data(root.map("data", true), c.source);
  const auto input = model_family(c.model.family).input_kind();
  const auto wanted = input == InputKind::kImages ? "image_folder or image_list" : "audio_list";
  if ((c.data.kind == TrainDataKind::kAudioList) != (input == InputKind::kAudioFeatures)) {
    root.fail("data", std::string("data kind ") + to_string(c.data.kind) + " does not fit a " +
                          c.model.family + " model, which takes " + input_kind_name(input) +
                          " (data kind " + wanted + ")");
  }
  c.augment = read_augment(root.map("augment", false));
  c.optimizer = read_optimizer(root.map("optimizer", false));
  auto schedule = root.map("schedule", false);
  c.schedule.warmup_steps = schedule.integer("warmup_steps", 0, 0, int64_t{1} << 40);
  c.schedule.min_lr_ratio = schedule.number("min_lr_ratio", 0.0, 0.0, 1.0);
  schedule.finish();
  auto train = root.map("train", false);
  c.train = read_loop(train);
  check_objective(c, model, root, train);
  if (c.train.output.empty()) {
    c.train.output = "runs/" + c.model.name;
  }
  root.finish();
  return c;
}

}  // namespace

TrainConfig parse_train_config(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides) {
  Document document(yaml, source);
  for (const auto& item : overrides) document.apply_override(item);
  return read_train_document(document, overrides);
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_train_config(detail::read_document_file(path, "training config"), path, overrides);
}

}  // namespace attnzoo
