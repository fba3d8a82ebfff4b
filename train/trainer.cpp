#include <attnzoo/train/trainer.h>

#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/preprocess/audio_features.h>
#include <attnzoo/preprocess/audio_from_config.h>
#include <attnzoo/preprocess/from_config.h>
#include <attnzoo/preprocess/image_augment.h>
#include <attnzoo/preprocess/image_decode.h>
#include <attnzoo/preprocess/spec_augment.h>
#include <attnzoo/train/diagnostics.h>
#include <attnzoo/train/distributed.h>
#include <attnzoo/train/optimizer.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kCsvHeader =
    "step,epoch,loss,lr,grad_norm,examples_per_second,val_loss,val_top1,val_top5";

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Beta(a, a) from two Gammas, drawn with our own generator (portable across standard libraries
// is not needed here: the batch mixing of a run only has to repeat within this build).
double beta_sample(std::mt19937_64& rng, double a) {
  std::gamma_distribution<double> gamma(a, 1.0);
  const double x = gamma(rng), y = gamma(rng);
  return x + y > 0.0 ? x / (x + y) : 0.5;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600)
    out << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s / 60) % 60 << "m";
  else if (s >= 60)
    out << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else
    out << s << "s";
  return out.str();
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream out;
  out << std::setprecision(8) << v;
  return out.str();
}

// The optimiser's settings from the config.
AdamWOptions adamw_options(const TrainOptimizerConfig& c) {
  AdamWOptions o;
  o.lr = c.lr;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.weight_decay = c.weight_decay;
  o.no_decay_on_norms_biases_tokens = c.no_decay_on_norms_biases_tokens;
  for (const auto& r : c.rules) {
    ParameterGroupRule rule;
    rule.pattern = r.pattern;
    rule.lr = r.lr;
    rule.weight_decay = r.weight_decay;
    for (const auto& s : r.slices) rule.slices.push_back({s.lr, s.weight_decay});
    o.rules.push_back(std::move(rule));
  }
  return o;
}

int64_t model_classes(const ModelConfig& config) {
  return model_family(config.family).num_classes(config);
}

bool takes_images(const ModelConfig& config) {
  return model_family(config.family).input_kind() == InputKind::kImages;
}

// bf16 autocast on CUDA for the scope (LibTorch's at::autocast, as torch.autocast in Python).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(at::kCUDA, previous_);
    at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace

ExampleLoader example_loader(const ModelConfig& model, const TrainAugmentConfig* augment) {
  if (takes_images(model)) {
    const auto eval = std::make_shared<EvalImageTransform>(image_transform_options(model.image));
    std::shared_ptr<TrainImageTransform> train;
    if (augment && augment->random_resized_crop) {
      TrainTransformOptions o;
      const auto e = image_transform_options(model.image);
      o.height = e.height;
      o.width = e.width;
      o.scale = augment->crop_scale;
      o.ratio = augment->crop_ratio;
      o.interpolation = e.interpolation;
      o.hflip = augment->hflip;
      o.affine = {augment->affine_degrees, augment->affine_translate, augment->affine_scale,
                  augment->affine_shear};
      o.elastic = {augment->elastic_alpha, augment->elastic_sigma, augment->elastic_p};
      o.color_jitter = {augment->color_jitter, augment->color_jitter, augment->color_jitter, 0.0};
      o.mean = e.mean;
      o.std = e.std;
      train = std::make_shared<TrainImageTransform>(o);
    }
    const double hflip = augment && !augment->random_resized_crop ? augment->hflip : 0.0;
    return [eval, train, hflip](const LabelledExample& example, std::mt19937_64& rng) {
      const auto rgb = decode_image(example.path);
      if (train) return (*train)(rgb, rng);
      auto x = (*eval)(rgb);
      if (hflip > 0.0 && uniform(rng, 0.0, 1.0) < hflip) x = horizontal_flip(x);
      return x;
    };
  }
  const auto extractor = std::make_shared<FeatureExtractor>(audio_feature_options(model.features));
  std::shared_ptr<SpecAugment> spec;
  if (augment && augment->spec_augment) {
    SpecAugmentOptions o;
    o.num_freq_masks = augment->freq_masks;
    o.max_freq_width = augment->freq_width;
    o.num_time_masks = augment->time_masks;
    o.max_time_width = augment->time_width;
    o.max_time_ratio = augment->time_ratio;
    o.time_warp_window = augment->time_warp;
    spec = std::make_shared<SpecAugment>(o);
  }
  return [extractor, spec](const LabelledExample& example, std::mt19937_64& rng) {
    auto features = audio_file_features(example.path, *extractor).features;
    return spec ? (*spec)(features, rng) : features;
  };
}

LabelledDataset load_dataset(const TrainDataConfig& data, const std::string& which) {
  const auto& where = which == "val" ? data.val : data.train;
  TORCH_CHECK_VALUE(!where.empty(), "the config has no data.", which);
  return data.kind == "image_folder" ? image_folder_dataset(where, data.classes)
                                     : list_dataset(where, data.classes);
}

torch::Tensor classify_batch(ZooModel& model, const Batch& batch) {
  const auto device = model.module->parameters().front().device();
  ModelInput input{batch.inputs.to(device), {}};
  if (batch.lengths.defined()) input.lengths = batch.lengths.to(device);
  return model.classify(input);
}

EvalResult evaluate(ZooModel& model, const LabelledDataset& dataset, int64_t batch_size,
                    int64_t workers, const torch::Device& device,
                    const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t classes = model_classes(model.config);
  TORCH_CHECK_VALUE(static_cast<int64_t>(dataset.classes.size()) <= classes, dataset.source, ": ",
                    dataset.classes.size(), " classes, but the model's head has ", classes);
  const bool was_training = model.module->is_training();
  model.module->eval();
  LoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = false;
  o.drop_last = false;
  o.pad = !takes_images(model.config);
  o.workers = workers;
  EpochLoader loader(dataset, example_loader(model.config, nullptr), o, 0);
  EvalResult r;
  r.classes = dataset.classes;
  r.confusion = torch::zeros({classes, classes}, torch::kLong);
  double loss_sum = 0.0;
  int64_t top1 = 0, top5 = 0;
  const int64_t k = std::min<int64_t>(5, classes);
  torch::NoGradGuard no_grad;
  while (auto batch = loader.next()) {
    const auto logits = classify_batch(model, *batch).to(torch::kCPU, torch::kFloat);
    const auto& labels = batch->labels;
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    const auto predicted = logits.argmax(-1);
    top1 += (predicted == labels).sum().item<int64_t>();
    top5 += (std::get<1>(logits.topk(k, -1)) == labels.unsqueeze(1)).any(1).sum().item<int64_t>();
    r.confusion.index_put_({labels, predicted}, torch::ones_like(labels), /*accumulate=*/true);
    r.examples += labels.size(0);
    if (progress) progress(r.examples, static_cast<int64_t>(dataset.examples.size()));
  }
  if (was_training) model.module->train();
  const double n = static_cast<double>(std::max<int64_t>(r.examples, 1));
  r.loss = loss_sum / n;
  r.top1 = static_cast<double>(top1) / n;
  r.top5 = static_cast<double>(top5) / n;
  (void)device;
  return r;
}

struct Trainer::State {
  TrainConfig config;
  TrainerOptions options;
  ZooModel model;
  std::unique_ptr<AdamW> optimizer;
  WarmupCosineSchedule schedule;
  LabelledDataset train, val;
  bool has_val = false;
  torch::Device device{torch::kCPU};
  int64_t batches_per_epoch = 0, total_steps = 0, step = 0;
  fs::path output;
  DistributedEnv env;
  std::unique_ptr<DataParallel> parallel;  // world_size > 1
  // train.ema_decay > 0: the averaged copy (in eval mode) and its parameters and buffers, paired
  // with the model's by position.
  std::optional<ZooModel> ema;
  std::vector<torch::Tensor> ema_tensors, model_tensors;
  int64_t ema_updates = 0;
  // The model that is evaluated and written: the average when there is one.
  ZooModel& final_model() { return ema ? *ema : model; }
  bool main_rank() const { return env.rank == 0; }
  std::ostream& log() const {
    static std::ostream discard(nullptr);  // ranks other than 0 stay quiet
    if (!main_rank()) return discard;
    return options.log ? *options.log : std::cerr;
  }
};

Trainer::Trainer(TrainConfig config, TrainerOptions options) : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.config = std::move(config);
  s.options = std::move(options);
  const auto& c = s.config;
  if (c.train.threads > 0) torch::set_num_threads(static_cast<int>(c.train.threads));
  s.device = torch::Device(c.train.device);
  if (s.device.is_cuda() && !torch::cuda::is_available()) {
    throw Error(c.source + ": train.device " + c.train.device +
                ": no CUDA device is available to this process");
  }
  s.train = load_dataset(c.data, "train");
  if (!c.data.val.empty()) {
    s.val = load_dataset(c.data, "val");
    s.has_val = true;
    if (s.val.classes != s.train.classes) {
      throw Error(c.data.val + ": its classes differ from " + c.data.train +
                  "'s; list them in data.classes");
    }
  }
  const int64_t classes = model_classes(c.model);
  if (classes != static_cast<int64_t>(s.train.classes.size())) {
    throw Error(c.source + ": the model's head has " + std::to_string(classes) +
                " classes (architecture.num_classes), the data " +
                std::to_string(s.train.classes.size()) + " (" + c.data.train + ")");
  }
  // Data-parallel (torchrun's environment): train.batch_size per rank, world_size times that per
  // step.
  s.env = DistributedEnv::from_environment();
  const int64_t global_batch = c.train.batch_size * s.env.world_size;
  s.batches_per_epoch =
      batches_per_epoch(static_cast<int64_t>(s.train.examples.size()), global_batch, true);
  if (s.batches_per_epoch < c.train.accumulation) {
    throw Error(c.data.train + ": " + std::to_string(s.train.examples.size()) +
                " examples do not fill one step of " + std::to_string(c.train.accumulation) +
                " x " + std::to_string(global_batch));
  }
  s.total_steps = c.train.steps > 0 ? c.train.steps
                                    : c.train.epochs * (s.batches_per_epoch / c.train.accumulation);
  s.schedule.warmup_steps = c.schedule.warmup_steps;
  s.schedule.total_steps = s.total_steps;
  s.schedule.min_ratio = c.schedule.min_lr_ratio;
  s.output = c.train.output;

  torch::manual_seed(static_cast<uint64_t>(c.train.seed));
  s.model = build_model(c.model);
  if (!c.init_weights.empty()) {
    for (const auto& note : load_weights(s.model, c.init_weights, c.init_format).notes) {
      if (s.env.rank == 0) std::cerr << c.init_weights << ": " << note << "\n";
    }
  }
  s.model.module->to(s.device);
  s.model.module->train();
  s.optimizer =
      std::make_unique<AdamW>(s.model.module->named_parameters(), adamw_options(c.optimizer));
  if (c.train.ema_decay > 0.0) {
    // Built before the generator is reseeded below, so that dropout draws the same with and
    // without the average.
    s.ema = build_model(c.model);
    s.ema->module->to(s.device);
    s.ema->module->eval();
    const auto floating = [](const torch::Tensor& x) { return x.is_floating_point(); };
    const auto model_sd = state_dict(*s.model.module);
    const auto ema_sd = state_dict(*s.ema->module);
    torch::NoGradGuard no_grad;
    for (const auto& item : model_sd) {
      auto e = ema_sd[item.key()];
      e.copy_(item.value());
      if (floating(e)) {
        s.model_tensors.push_back(item.value());
        s.ema_tensors.push_back(e);
      }
    }
  }
  // The generator after initialisation: dropout and drop-path draw from it.
  torch::manual_seed(mix(static_cast<uint64_t>(c.train.seed) ^ 0xd50f7ULL));

  if (!s.options.resume.empty()) {
    const auto file = io::load_safetensors(s.options.resume);
    const auto meta = [&](const std::string& key) {
      const auto it = file.metadata.find(key);
      if (it == file.metadata.end()) {
        throw CheckpointError(s.options.resume + ": not a training checkpoint (no '" + key +
                              "' in its metadata)");
      }
      return it->second;
    };
    if (meta("model") != c.model.name) {
      throw CheckpointError(s.options.resume + ": a checkpoint of model '" + meta("model") +
                            "', the config trains '" + c.model.name + "'");
    }
    io::TensorDict model_tensors, optimizer_tensors, ema_tensors;
    torch::Tensor generator;
    for (const auto& item : file.tensors) {
      const auto& name = item.key();
      if (name.rfind("model.", 0) == 0)
        model_tensors.insert(name.substr(6), item.value());
      else if (name.rfind("ema.", 0) == 0)
        ema_tensors.insert(name.substr(4), item.value());
      else if (name.rfind("optimizer.", 0) == 0)
        optimizer_tensors.insert(name.substr(10), item.value());
      else if (name == "rng.cpu")
        generator = item.value();
    }
    LoadOptions load;
    load.source = s.options.resume;
    load_state_dict(*s.model.module, model_tensors, load);
    s.optimizer->load_state_dict(optimizer_tensors);
    if (s.ema) {
      if (ema_tensors.is_empty()) {
        throw CheckpointError(s.options.resume +
                              ": no ema.* tensors, but the config sets train.ema_decay (a "
                              "checkpoint of a run without the average)");
      }
      load.source = s.options.resume + " (ema.*)";
      load_state_dict(*s.ema->module, ema_tensors, load);
      const auto it = file.metadata.find("ema_updates");
      s.ema_updates = it == file.metadata.end() ? 0 : std::stoll(it->second);
    }
    s.step = std::stoll(meta("step"));
    if (s.step > s.total_steps) {
      throw CheckpointError(s.options.resume + ": at step " + std::to_string(s.step) +
                            ", past this run's " + std::to_string(s.total_steps) + " steps");
    }
    if (!generator.defined()) {
      throw CheckpointError(s.options.resume + ": no rng.cpu state");
    }
    auto cpu_generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    std::lock_guard<std::mutex> lock(cpu_generator.mutex());
    cpu_generator.set_state(generator);
  }
  if (s.env.enabled()) {
    s.parallel = std::make_unique<DataParallel>(s.env, s.device);
    s.parallel->broadcast(*s.model.module);
    s.parallel->attach(*s.model.module);
  }
}

Trainer::~Trainer() = default;

ZooModel& Trainer::model() { return state_->model; }
const TrainConfig& Trainer::config() const { return state_->config; }
const LabelledDataset& Trainer::train_data() const { return state_->train; }
int64_t Trainer::total_steps() const { return state_->total_steps; }
int64_t Trainer::step() const { return state_->step; }
std::string Trainer::output_dir() const { return state_->output.string(); }

void Trainer::save_checkpoint(const std::string& path) const {
  const auto& s = *state_;
  io::TensorDict tensors;
  for (const auto& item : state_dict(*s.model.module)) {
    tensors.insert("model." + item.key(), item.value().to(torch::kCPU));
  }
  for (const auto& item : s.optimizer->state_dict()) {
    tensors.insert("optimizer." + item.key(), item.value().to(torch::kCPU));
  }
  if (s.ema) {
    for (const auto& item : state_dict(*s.ema->module)) {
      tensors.insert("ema." + item.key(), item.value().to(torch::kCPU));
    }
  }
  {
    auto cpu_generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu_generator.mutex());
    tensors.insert("rng.cpu", cpu_generator.get_state());
  }
  nlohmann::json classes = s.train.classes;
  io::save_safetensors(path, tensors,
                       {{"model", s.config.model.name},
                        {"step", std::to_string(s.step)},
                        {"total_steps", std::to_string(s.total_steps)},
                        {"config", s.config.source},
                        {"ema_updates", std::to_string(s.ema_updates)},
                        {"classes", classes.dump()}});
}

std::vector<TrainMetrics> Trainer::run() {
  auto& s = *state_;
  const auto& c = s.config;
  const auto& t = c.train;
  fs::create_directories(s.output);
  const auto csv_path = s.output / "metrics.csv";
  const bool fresh = s.step == 0 || !fs::exists(csv_path);
  std::ofstream csv;  // rank 0 writes the run's files; the others' streams stay closed
  if (s.main_rank()) {
    csv.open(csv_path, fresh ? std::ios::trunc : std::ios::app);
    if (!csv) throw Error(csv_path.string() + ": cannot write");
    if (fresh) csv << kCsvHeader << "\n";
  }

  LoaderOptions lo;
  lo.batch_size = t.batch_size;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.pad = !takes_images(c.model);
  lo.seed = static_cast<uint64_t>(t.seed);
  lo.workers = c.data.workers;
  lo.prefetch = c.data.prefetch;
  lo.batch_size = t.batch_size * s.env.world_size;
  lo.shard = s.env.rank;
  lo.shards = s.env.world_size;
  const auto loader_fn = example_loader(c.model, &c.augment);
  const auto classes = static_cast<int64_t>(s.train.classes.size());
  const bool autocast = t.precision == "bf16" && s.device.is_cuda();

  std::vector<TrainMetrics> history;
  std::unique_ptr<EpochLoader> loader;
  int64_t loader_epoch = -1;
  const auto next_batch = [&](int64_t micro) {
    const int64_t epoch = micro / s.batches_per_epoch, index = micro % s.batches_per_epoch;
    if (!loader || loader_epoch != epoch) {
      loader.reset();
      loader = std::make_unique<EpochLoader>(s.train, loader_fn, lo, epoch, index);
      loader_epoch = epoch;
    }
    auto batch = loader->next();
    TORCH_INTERNAL_ASSERT(batch.has_value(), "the epoch ended early");
    return std::move(*batch);
  };
  const auto examples_per_epoch = static_cast<double>(s.batches_per_epoch * lo.batch_size);

  double loss_sum = 0.0;
  int64_t loss_count = 0, examples = 0;
  auto window_start = std::chrono::steady_clock::now();
  const auto run_start = window_start;
  const int64_t first_step = s.step;
  double last_grad_norm = 0.0;
  const bool bar = s.options.progress_bar;
  auto& out = s.log();
  out << "training " << c.model.name << ": " << s.train.examples.size() << " examples, " << classes
      << " classes, " << s.total_steps << " steps of " << t.accumulation << " x " << lo.batch_size
      << (s.env.enabled() ? " (" + std::to_string(s.env.world_size) + " ranks x " +
                                std::to_string(t.batch_size) + ")"
                          : std::string())
      << (s.step > 0 ? ", resumed at step " + std::to_string(s.step) : "") << ", output "
      << s.output.string() << "\n";

  const auto eval_now = [&](TrainMetrics& row) {
    if (!s.has_val || !s.main_rank()) return;
    const auto r = evaluate(s.final_model(), s.val, t.batch_size, c.data.workers, s.device);
    row.val_loss = r.loss;
    row.val_top1 = r.top1;
    row.val_top5 = r.top5;
    if (bar) out << "\n";
    out << "step " << row.step << ": val loss " << std::fixed << std::setprecision(4) << r.loss
        << ", top-1 " << std::setprecision(2) << 100.0 * r.top1 << "%, top-5 " << 100.0 * r.top5
        << "% (" << r.examples << " examples)" << std::defaultfloat << "\n";
  };

  const int64_t last_step =
      s.options.stop_at_step > 0 ? std::min(s.options.stop_at_step, s.total_steps) : s.total_steps;
  // Diagnostics: every diagnostics_every steps, the first
  // micro-batch's attention statistics (recorded during its own forward) and the step's gradient
  // norms, appended to diagnostics.jsonl, with a summary line in the log.
  std::unique_ptr<std::ofstream> diagnostics;
  if (t.diagnostics_every > 0 && s.main_rank()) {
    diagnostics = std::make_unique<std::ofstream>(s.output / "diagnostics.jsonl",
                                                  fresh ? std::ios::trunc : std::ios::app);
  }
  while (s.step < last_step) {
    const bool diagnose = t.diagnostics_every > 0 && s.step % t.diagnostics_every == 0;
    nlohmann::json diagnosis;
    std::mt19937_64 rng(mix(static_cast<uint64_t>(t.seed) ^ mix(static_cast<uint64_t>(s.step))));
    s.optimizer->zero_grad();
    for (int64_t a = 0; a < t.accumulation; ++a) {
      auto batch = next_batch(s.step * t.accumulation + a);
      auto inputs = batch.inputs;
      const auto n = batch.labels.size(0);
      auto targets = torch::one_hot(batch.labels, classes).to(torch::kFloat);
      // Mixup / cutmix (images): the batch mixed with itself reversed, the targets alike.
      const bool use_mix = takes_images(c.model) &&
                           (c.augment.mixup_alpha > 0.0 || c.augment.cutmix_alpha > 0.0) &&
                           uniform(rng, 0.0, 1.0) < c.augment.mix_prob;
      if (use_mix) {
        const bool cutmix = c.augment.cutmix_alpha > 0.0 &&
                            (c.augment.mixup_alpha <= 0.0 || uniform(rng, 0.0, 1.0) < 0.5);
        double lam = beta_sample(rng, cutmix ? c.augment.cutmix_alpha : c.augment.mixup_alpha);
        const auto flipped = inputs.flip(0);
        if (cutmix) {
          const int64_t h = inputs.size(2), w = inputs.size(3);
          const double cut = std::sqrt(1.0 - lam);
          const auto ch = static_cast<int64_t>(h * cut), cw = static_cast<int64_t>(w * cut);
          const int64_t cy = random_int(rng, 0, h), cx = random_int(rng, 0, w);
          const int64_t y0 = std::clamp<int64_t>(cy - ch / 2, 0, h),
                        y1 = std::clamp<int64_t>(cy + ch / 2, 0, h);
          const int64_t x0 = std::clamp<int64_t>(cx - cw / 2, 0, w),
                        x1 = std::clamp<int64_t>(cx + cw / 2, 0, w);
          inputs = inputs.clone();
          inputs.narrow(2, y0, y1 - y0)
              .narrow(3, x0, x1 - x0)
              .copy_(flipped.narrow(2, y0, y1 - y0).narrow(3, x0, x1 - x0));
          lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(h * w);
        } else {
          inputs = lam * inputs + (1.0 - lam) * flipped;
        }
        targets = lam * targets + (1.0 - lam) * targets.flip(0);
      }
      if (t.label_smoothing > 0.0) {
        targets =
            targets * (1.0 - t.label_smoothing) + t.label_smoothing / static_cast<double>(classes);
      }
      batch.inputs = inputs;
      torch::Tensor loss;
      {
        AutocastScope scope(autocast);
        std::unique_ptr<AttentionRecorder> recorder;
        if (diagnose && a == 0) recorder = std::make_unique<AttentionRecorder>();
        const auto logits = classify_batch(s.model, batch);
        if (recorder) {
          const auto statistics = attention_statistics(recorder->records());
          diagnosis["attention"] = to_json(statistics);
          diagnosis["attention_text"] = to_text(statistics);
        }
        loss = -(targets.to(logits.device()) * torch::log_softmax(logits.to(torch::kFloat), -1))
                    .sum(-1)
                    .mean();
      }
      const double value = loss.item<double>();
      if (!std::isfinite(value)) {
        throw Error("step " + std::to_string(s.step) + ": the loss is " + std::to_string(value) +
                    " (lower optimizer.lr, set train.clip_grad_norm, or check the data)");
      }
      if (s.parallel) s.parallel->set_sync(a + 1 == t.accumulation);
      (loss / static_cast<double>(t.accumulation)).backward();
      loss_sum += s.parallel ? s.parallel->mean(value) : value;
      ++loss_count;
      examples += n * s.env.world_size;
    }
    if (s.parallel) s.parallel->finish_gradients();
    if (diagnose && diagnostics) {
      const auto norms = gradient_norms(s.model.module->named_parameters());
      diagnosis["step"] = s.step;
      diagnosis["gradients"] = to_json(norms);
      if (bar) out << "\n";
      out << "diagnostics at step " << s.step << ":\n"
          << diagnosis.value("attention_text", std::string()) << to_text(norms) << "\n";
      diagnosis.erase("attention_text");
      *diagnostics << diagnosis.dump() << "\n";
      diagnostics->flush();
    }
    std::vector<torch::Tensor> grads;
    for (const auto& p : s.model.module->parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    last_grad_norm =
        t.clip_grad_norm > 0.0
            ? torch::nn::utils::clip_grad_norm_(s.model.module->parameters(), t.clip_grad_norm)
            : torch::stack(torch::_foreach_norm(grads)).norm().item<double>();
    const double factor = s.schedule.factor(s.step);
    s.optimizer->step(factor);
    ++s.step;
    if (s.ema) {
      // timm's warmup: early averages forget the random initialisation quickly.
      const double n = static_cast<double>(s.ema_updates);
      const double decay =
          t.ema_warmup > 0
              ? std::min(t.ema_decay, (1.0 + n) / (static_cast<double>(t.ema_warmup) + n))
              : t.ema_decay;
      torch::NoGradGuard no_grad;
      torch::_foreach_lerp_(s.ema_tensors, s.model_tensors, 1.0 - decay);
      ++s.ema_updates;
    }

    // An epoch ended during this step's micro-batches.
    const bool epoch_end = (s.step * t.accumulation) / s.batches_per_epoch !=
                           ((s.step - 1) * t.accumulation) / s.batches_per_epoch;
    const bool log_row = s.step % t.log_every == 0 || s.step == s.total_steps;
    const bool eval_row = s.has_val && (t.eval_every > 0 ? s.step % t.eval_every == 0 : epoch_end);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
    if (bar) {
      const double done = static_cast<double>(s.step) / static_cast<double>(s.total_steps);
      const double since =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      const double eta = since / static_cast<double>(s.step - first_step) *
                         static_cast<double>(s.total_steps - s.step);
      const int width = 24, filled = static_cast<int>(done * width);
      out << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << s.step
          << "/" << s.total_steps << " loss " << std::fixed << std::setprecision(4)
          << loss_sum / std::max<int64_t>(loss_count, 1) << " lr " << std::scientific
          << std::setprecision(2) << c.optimizer.lr * factor << std::fixed << std::setprecision(1)
          << " " << static_cast<double>(examples) / std::max(elapsed, 1e-9) << " ex/s ETA "
          << duration_text(eta) << std::defaultfloat << "   " << std::flush;
    }
    if (log_row || eval_row) {
      TrainMetrics row;
      row.step = s.step;
      row.epoch = static_cast<double>(s.step * t.accumulation * lo.batch_size) / examples_per_epoch;
      row.loss = loss_sum / std::max<int64_t>(loss_count, 1);
      row.lr = c.optimizer.lr * factor;
      row.grad_norm = last_grad_norm;
      row.examples_per_second = static_cast<double>(examples) / std::max(elapsed, 1e-9);
      row.val_loss = row.val_top1 = row.val_top5 = kNaN;
      if (!bar) {
        out << "step " << row.step << "/" << s.total_steps << " epoch " << std::fixed
            << std::setprecision(2) << row.epoch << " loss " << std::setprecision(4) << row.loss
            << " lr " << std::scientific << std::setprecision(2) << row.lr << std::fixed << " grad "
            << std::setprecision(3) << row.grad_norm << " " << std::setprecision(1)
            << row.examples_per_second << " ex/s" << std::defaultfloat << "\n";
      }
      if (eval_row) eval_now(row);
      csv << row.step << "," << csv_number(row.epoch) << "," << csv_number(row.loss) << ","
          << csv_number(row.lr) << "," << csv_number(row.grad_norm) << ","
          << csv_number(row.examples_per_second) << "," << csv_number(row.val_loss) << ","
          << csv_number(row.val_top1) << "," << csv_number(row.val_top5) << "\n";
      csv.flush();
      history.push_back(row);
      if (eval_row && s.options.on_metrics) s.options.on_metrics(history);
      loss_sum = 0.0;
      loss_count = 0;
      examples = 0;
      window_start = std::chrono::steady_clock::now();
    }
    const bool checkpoint_now =
        s.step == last_step ||
        (t.checkpoint_every > 0 ? s.step % t.checkpoint_every == 0 : epoch_end);
    if (checkpoint_now && s.main_rank()) {
      save_checkpoint((s.output / "checkpoint.safetensors").string());
    }
  }
  if (bar) out << "\n";
  if (s.step < s.total_steps) {
    out << "stopped at step " << s.step << " of " << s.total_steps << "; resume from "
        << (s.output / "checkpoint.safetensors").string() << "\n";
    return history;
  }
  if (!s.main_rank()) return history;
  // The weights alone, for `attnzoo eval`, `classify` and `encode --weights`.
  io::TensorDict weights;
  for (const auto& item : state_dict(*s.final_model().module)) {
    weights.insert(item.key(), item.value().to(torch::kCPU));
  }
  nlohmann::json class_names = s.train.classes;
  io::save_safetensors((s.output / "model.safetensors").string(), weights,
                       {{"model", c.model.name},
                        {"format", "attnzoo"},
                        {"step", std::to_string(s.step)},
                        {"weights", s.ema ? "ema" : "last"},
                        {"classes", class_names.dump()}});
  out << "done: " << s.step << " steps; " << (s.output / "model.safetensors").string() << ", "
      << (s.output / "checkpoint.safetensors").string() << ", " << csv_path.string() << "\n";
  if (s.options.on_metrics) s.options.on_metrics(history);
  return history;
}

}  // namespace attnzoo
