#include <attnzoo/train/trainer.h>

#include <attnzoo/api/frontend_options.h>
#include <attnzoo/api/model_tokenizer.h>
#include <attnzoo/core/splitmix64.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/audio/read.h>
#include <attnzoo/preprocess/audio/spec_augment.h>
#include <attnzoo/preprocess/image/augment.h>
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/train/attention_training.h>
#include <attnzoo/train/ctc_training.h>
#include <attnzoo/train/diagnostics.h>
#include <attnzoo/train/distributed.h>
#include <attnzoo/train/mixup.h>
#include <attnzoo/train/optimizer.h>
#include <attnzoo/train/progress.h>
#include <attnzoo/train/run_log.h>
#include <attnzoo/train/training_checkpoint.h>
#include <attnzoo/train/weight_average.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace attnzoo {
namespace {

namespace fs = std::filesystem;

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
  const auto speeds = augment ? augment->speed_perturb : std::vector<double>{};
  return [extractor, spec, speeds](const LabelledExample& example, std::mt19937_64& rng) {
    torch::Tensor features;
    if (speeds.empty()) {
      features = audio_file_features(example.path, *extractor).features;
    } else {
      // Played at `speed`: the samples taken as recorded at rate x speed, resampled to the model's.
      const auto n = static_cast<int64_t>(speeds.size());
      const double speed = speeds[static_cast<size_t>(random_int(rng, 0, n))];
      const auto audio = read_audio(example.path);
      features = waveform_features(
          audio.samples, std::llround(static_cast<double>(audio.info.sample_rate) * speed),
          *extractor, example.path);
    }
    return spec ? (*spec)(features, rng) : features;
  };
}

LabelledDataset load_dataset(const TrainDataConfig& data, const std::string& which,
                             const decoding::Tokenizer* tokenizer) {
  const auto& where = which == "val" ? data.val : data.train;
  TORCH_CHECK_VALUE(!where.empty(), "the config has no data.", which);
  if (tokenizer) return transcript_list_dataset(where, *tokenizer);
  return data.kind == TrainDataKind::kImageFolder ? image_folder_dataset(where, data.classes)
                                                  : list_dataset(where, data.classes);
}

torch::Tensor classify_batch(ZooModel& model, const Batch& batch) {
  const auto parameter = model.module->parameters().front();
  // Inputs in the model's dtype: a model moved to bfloat16 for evaluation takes bfloat16.
  ModelInput input{batch.inputs.to(parameter.device(), batch.inputs.is_floating_point()
                                                           ? parameter.scalar_type()
                                                           : batch.inputs.scalar_type()),
                   {}};
  const auto device = parameter.device();
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
  EpochLoader loader(dataset, example_loader(model.config, nullptr),
                     evaluation_loader_options(batch_size, workers, !takes_images(model.config)),
                     0);
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

namespace {

// Mixup's settings from the config: batches of images are mixed, other inputs never; the targets
// of all are smoothed.
MixupOptions mixup_options(const TrainConfig& c, int64_t classes) {
  MixupOptions o;
  if (takes_images(c.model)) {
    o.mixup_alpha = c.augment.mixup_alpha;
    o.cutmix_alpha = c.augment.cutmix_alpha;
  }
  o.prob = c.augment.mix_prob;
  o.label_smoothing = c.train.label_smoothing;
  o.num_classes = classes;
  return o;
}

// The run's micro-batches by number: micro-batch m is batch m % per_epoch of epoch m / per_epoch,
// from one loader per epoch, started at the batch asked for (so a resumed run needs no skipping).
class TrainingBatches {
 public:
  TrainingBatches(const LabelledDataset& data, ExampleLoader load, LoaderOptions options,
                  int64_t per_epoch)
      : data_(data), load_(std::move(load)), options_(options), per_epoch_(per_epoch) {}

  Batch operator()(int64_t micro) {
    const int64_t epoch = micro / per_epoch_, index = micro % per_epoch_;
    if (!loader_ || epoch_ != epoch) {
      loader_.reset();
      loader_ = std::make_unique<EpochLoader>(data_, load_, options_, epoch, index);
      epoch_ = epoch;
    }
    auto batch = loader_->next();
    TORCH_INTERNAL_ASSERT(batch.has_value(), "the epoch ended early");
    return std::move(*batch);
  }

 private:
  const LabelledDataset& data_;
  ExampleLoader load_;
  LoaderOptions options_;
  int64_t per_epoch_;
  std::unique_ptr<EpochLoader> loader_;
  int64_t epoch_ = -1;
};

// The training loss and throughput since the previous metrics row.
struct MetricsWindow {
  double loss_sum = 0.0;
  int64_t losses = 0, examples = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void add(double loss, int64_t batch_examples) {
    loss_sum += loss;
    ++losses;
    examples += batch_examples;
  }
  double mean_loss() const { return loss_sum / std::max<int64_t>(losses, 1); }
  double examples_per_second() const {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(examples) / std::max(elapsed, 1e-9);
  }
};

}  // namespace

struct Trainer::State {
  TrainConfig config;
  TrainerOptions options;
  ZooModel model;
  std::unique_ptr<AdamW> optimizer;
  WarmupCosineSchedule schedule;
  LabelledDataset train, val;
  bool has_val = false;
  // train.loss ctc: the transcripts' tokenizer and the validation's search (the model's).
  std::optional<decoding::Tokenizer> tokenizer;
  CtcSearchSettings search;
  bool ctc() const { return tokenizer.has_value(); }
  // train.ctc_weight < 1: the model's attention decoder learns beside the CTC head.
  bool joint() const { return ctc() && config.train.ctc_weight < 1.0; }
  AttentionDecoderImpl& decoder() { return *model.module->as<ConformerEncoderImpl>()->decoder; }
  torch::Device device{torch::kCPU};
  int64_t batches_per_epoch = 0, total_steps = 0, step = 0;
  fs::path output;
  DistributedEnv env;
  std::unique_ptr<DataParallel> parallel;  // world_size > 1
  // train.ema_decay > 0: the averaged copy (in eval mode) and its average of the model's weights.
  std::optional<ZooModel> ema;
  std::unique_ptr<WeightAverage> average;
  // The model that is evaluated and written: the average when there is one.
  ZooModel& final_model() { return ema ? *ema : model; }
  bool main_rank() const { return env.rank == 0; }
  std::ostream& log() const {
    static std::ostream discard(nullptr);  // ranks other than 0 stay quiet
    if (!main_rank()) return discard;
    return options.log ? *options.log : std::cerr;
  }
  TrainingParts parts() const { return {model.module.get(), optimizer.get(), average.get()}; }

  // Each rank's share of every global batch of the run, shuffled by the seed.
  LoaderOptions loader_options() const {
    LoaderOptions o;
    o.shuffle = true;
    o.drop_last = true;
    o.pad = !takes_images(config.model);
    o.seed = static_cast<uint64_t>(config.train.seed);
    o.workers = config.data.workers;
    o.prefetch = config.data.prefetch;
    o.batch_size = config.train.batch_size * env.world_size;
    o.shard = env.rank;
    o.shards = env.world_size;
    return o;
  }

  // The first line of the log.
  std::string banner(int64_t global_batch) const {
    std::ostringstream out;
    out << "training " << config.model.name << ": " << train.examples.size() << " examples, ";
    if (ctc()) {
      out << "CTC over " << tokenizer->units().size() << " tokens";
      if (joint()) {
        out << " and the attention decoder (ctc_weight " << config.train.ctc_weight
            << ", reverse_weight " << config.train.reverse_weight << ")";
      }
    } else {
      out << train.classes.size() << " classes";
    }
    out << ", " << total_steps << " steps of " << config.train.accumulation << " x " << global_batch
        << (env.enabled() ? " (" + std::to_string(env.world_size) + " ranks x " +
                                std::to_string(config.train.batch_size) + ")"
                          : std::string())
        << (step > 0 ? ", resumed at step " + std::to_string(step) : "") << ", output "
        << output.string() << "\n";
    return out.str();
  }

  // The batch's input on the model's device, with the attention chunks of dynamic chunk
  // training drawn from `rng`.
  ModelInput model_input(const Batch& batch, std::mt19937_64& rng) const {
    ModelInput input{batch.inputs.to(device), {}};
    if (batch.lengths.defined()) input.lengths = batch.lengths.to(device);
    const auto& t = config.train;
    if (t.dynamic_chunk > 0) {
      // Encoder frames of the longest utterance: features over input frames per encoder frame.
      const auto& family = model_family(config.model.family);
      const double rate = family.frame_ms(config.model) / config.model.frame_shift_ms();
      const auto frames =
          static_cast<int64_t>(static_cast<double>(batch.inputs.size(1)) / std::max(rate, 1.0));
      input.attention_chunks = draw_attention_chunks(
          {t.dynamic_chunk, t.full_context_prob, t.dynamic_left_chunks}, frames, rng);
    }
    return input;
  }

  // The loss of one batch: soft-target cross-entropy of the mixed batch (a classifier), or the
  // CTC loss of its transcripts, weighted with the attention decoders' (train/
  // attention_training.h) when train.ctc_weight < 1.
  torch::Tensor batch_loss(Batch& batch, const Mixup* mixup, std::mt19937_64& rng) {
    if (ctc()) {
      torch::Tensor log_probs, lengths, encoded;
      for (const auto& [name, value] : model.forward(model_input(batch, rng))) {
        if (name == "logits") log_probs = value;
        if (name == "lengths") lengths = value;
        if (name == "encoded") encoded = value;
      }
      auto loss = ctc_batch_loss(log_probs, lengths, batch, train, tokenizer->units().blank_id());
      if (!joint()) return loss;
      const auto& t = config.train;
      const auto attention =
          attention_batch_loss(decoder(), encoded, lengths, batch.targets, batch.target_lengths,
                               {t.label_smoothing, t.reverse_weight});
      return t.ctc_weight * loss + (1.0 - t.ctc_weight) * attention;
    }
    const auto mixed = (*mixup)(batch.inputs, batch.labels, rng);
    batch.inputs = mixed.inputs;
    const auto logits = model.classify(model_input(batch, rng));
    return -(mixed.targets.to(logits.device()) * torch::log_softmax(logits.to(torch::kFloat), -1))
                .sum(-1)
                .mean();
  }

  // Forward and backward of one micro-batch of the step (gradients summed over the step's
  // micro-batches, synchronised across ranks at its last one): its loss divided by the number of
  // micro-batches. `diagnosis`: where the forward's attention statistics go (nullptr: not
  // recorded). Returns the loss, averaged over the ranks.
  double learn_from(Batch batch, const Mixup* mixup, std::mt19937_64& rng, bool last_micro_batch,
                    nlohmann::json* diagnosis) {
    torch::Tensor loss;
    {
      AutocastScope scope(config.train.precision == torch::kBFloat16 && device.is_cuda());
      std::unique_ptr<AttentionRecorder> recorder;
      if (diagnosis) recorder = std::make_unique<AttentionRecorder>();
      loss = batch_loss(batch, mixup, rng);
      if (recorder) {
        const auto statistics = attention_statistics(recorder->records());
        (*diagnosis)["attention"] = to_json(statistics);
        (*diagnosis)["attention_text"] = to_text(statistics);
      }
    }
    const double value = loss.item<double>();
    if (!std::isfinite(value)) {
      throw Error("step " + std::to_string(step) + ": the loss is " + std::to_string(value) +
                  " (lower optimizer.lr, set train.clip_grad_norm, or check the data)");
    }
    if (parallel) parallel->set_sync(last_micro_batch);
    (loss / static_cast<double>(config.train.accumulation)).backward();
    return parallel ? parallel->mean(value) : value;
  }

  // The global norm of the step's gradients, before clipping them to train.clip_grad_norm.
  double clip_gradients() {
    if (config.train.clip_grad_norm > 0.0) {
      return torch::nn::utils::clip_grad_norm_(model.module->parameters(),
                                               config.train.clip_grad_norm);
    }
    std::vector<torch::Tensor> grads;
    for (const auto& p : model.module->parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    return torch::stack(torch::_foreach_norm(grads)).norm().item<double>();
  }

  // One optimiser step: the step's micro-batches forward and backward (their losses and examples
  // added to `window`), diagnostics when due, clipping, the update, the weight average. Returns
  // the gradient norm before clipping and the learning rate the update used.
  std::pair<double, double> train_step(TrainingBatches& batches, const Mixup* mixup,
                                       MetricsWindow& window, RunLog* diagnostics,
                                       ProgressReport& progress) {
    const auto& t = config.train;
    // The step's generator (mixing) depends on the seed and the step alone.
    std::mt19937_64 rng(
        splitmix64(static_cast<uint64_t>(t.seed) ^ splitmix64(static_cast<uint64_t>(step))));
    const bool diagnose = t.diagnostics_every > 0 && step % t.diagnostics_every == 0;
    nlohmann::json diagnosis;
    optimizer->zero_grad();
    for (int64_t a = 0; a < t.accumulation; ++a) {
      auto batch = batches(step * t.accumulation + a);
      const int64_t examples = batch.indices.size(0) * env.world_size;
      window.add(learn_from(std::move(batch), mixup, rng, a + 1 == t.accumulation,
                            diagnose && a == 0 ? &diagnosis : nullptr),
                 examples);
    }
    if (parallel) parallel->finish_gradients();
    if (diagnose && diagnostics) diagnose_step(std::move(diagnosis), *diagnostics, progress);
    const double grad_norm = clip_gradients();
    const double factor = schedule.factor(step);
    optimizer->step(factor);
    ++step;
    if (average) average->update();
    return {grad_norm, config.optimizer.lr * factor};
  }

  // Whether an epoch ended during the last step's micro-batches.
  bool epoch_ended() const {
    const int64_t a = config.train.accumulation;
    return (step * a) / batches_per_epoch != ((step - 1) * a) / batches_per_epoch;
  }

  // The step's attention statistics (recorded during its first forward) with its gradient norms:
  // a line of diagnostics.jsonl and a summary in the log.
  void diagnose_step(nlohmann::json diagnosis, RunLog& jsonl, ProgressReport& progress) {
    const auto norms = gradient_norms(model.module->named_parameters());
    diagnosis["step"] = step;
    diagnosis["gradients"] = to_json(norms);
    progress.message("diagnostics at step " + std::to_string(step) + ":\n" +
                     diagnosis.value("attention_text", std::string()) + to_text(norms) + "\n");
    diagnosis.erase("attention_text");
    jsonl.append(diagnosis.dump());
  }

  // The validation columns of `row` (rank 0; the others leave them NaN).
  void validate(TrainMetrics& row, ProgressReport& progress) {
    if (!has_val || !main_rank()) return;
    if (ctc()) {
      const auto r = evaluate_ctc(final_model(), val, *tokenizer, search, config.train.batch_size,
                                  config.data.workers);
      row.val_loss = r.loss;
      row.val_wer = r.wer();
      row.val_cer = r.cer();
      progress.transcription_evaluation(row.step, r.loss, r.wer(), r.cer(), r.examples);
      return;
    }
    const auto r =
        evaluate(final_model(), val, config.train.batch_size, config.data.workers, device);
    row.val_loss = r.loss;
    row.val_top1 = r.top1;
    row.val_top5 = r.top5;
    progress.evaluation(row.step, r.loss, r.top1, r.top5, r.examples);
  }

  // model.safetensors: the weights alone, for `attnzoo eval`, `classify` and `encode --weights`.
  void write_weights(const std::string& path) {
    io::TensorDict weights;
    for (const auto& item : state_dict(*final_model().module)) {
      weights.insert(item.key(), item.value().to(torch::kCPU));
    }
    nlohmann::json class_names = train.classes;
    io::save_safetensors(path, weights,
                         {{"model", config.model.name},
                          {"format", "attnzoo"},
                          {"step", std::to_string(step)},
                          {"weights", ema ? "ema" : "last"},
                          {"loss", to_string(config.train.loss)},
                          {"classes", class_names.dump()}});
  }
};

Trainer::Trainer(TrainConfig config, TrainerOptions options) : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.config = std::move(config);
  s.options = std::move(options);
  const auto& c = s.config;
  if (c.train.threads > 0) torch::set_num_threads(static_cast<int>(c.train.threads));
  s.device = c.train.device;
  if (s.device.is_cuda() && !torch::cuda::is_available()) {
    throw Error(c.source + ": train.device " + s.device.str() +
                ": no CUDA device is available to this process");
  }
  if (c.train.loss == TrainLoss::kCtc) {
    s.tokenizer = model_tokenizer(c.model);
    s.search = ctc_search_settings(c.model, s.tokenizer->units());
    // The decoders predict <sos/eos> as the vocabulary's last id (WeNet's convention).
    const auto vocab = model_family(c.model.family).ctc_vocab(c.model);
    if (s.joint() && s.tokenizer->units().sos_eos_id() != vocab - 1) {
      throw Error(c.source + ": train.ctc_weight < 1 trains the attention decoder, which needs " +
                  "the token table's <sos/eos> as its last id (" + std::to_string(vocab - 1) +
                  "); " + c.model.source + "'s table has it at " +
                  std::to_string(s.tokenizer->units().sos_eos_id()));
    }
  }
  const decoding::Tokenizer* tokenizer = s.tokenizer ? &*s.tokenizer : nullptr;
  s.train = load_dataset(c.data, "train", tokenizer);
  if (!c.data.val.empty()) {
    s.val = load_dataset(c.data, "val", tokenizer);
    s.has_val = true;
    if (s.val.classes != s.train.classes) {
      throw Error(c.data.val + ": its classes differ from " + c.data.train +
                  "'s; list them in data.classes");
    }
  }
  const int64_t classes = model_classes(c.model);
  if (!s.ctc() && classes != static_cast<int64_t>(s.train.classes.size())) {
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
    for (const auto& note :
         load_weights(s.model, c.init_weights, c.init_format, c.init_key, c.init_new).notes) {
      if (s.env.rank == 0) std::cerr << c.init_weights << ": " << note << "\n";
    }
  }
  s.model.module->to(s.device);
  s.model.module->train();
  s.optimizer = std::make_unique<AdamW>(s.model.module->named_parameters(), c.optimizer);
  if (c.train.ema_decay > 0.0) {
    // Built before the generator is reseeded below, so that dropout draws the same with and
    // without the average.
    s.ema = build_model(c.model);
    s.ema->module->to(s.device);
    s.ema->module->eval();
    s.average = std::make_unique<WeightAverage>(
        *s.model.module, *s.ema->module,
        WeightAverageOptions{c.train.ema_decay, c.train.ema_warmup});
  }
  // The generator after initialisation: dropout and drop-path draw from it.
  torch::manual_seed(splitmix64(static_cast<uint64_t>(c.train.seed) ^ 0xd50f7ULL));
  if (!s.options.resume.empty()) {
    s.step = restore_training_checkpoint(s.options.resume, s.parts(), c.model.name, s.total_steps);
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
  save_training_checkpoint(
      path, s.parts(),
      {s.config.model.name, s.step, s.total_steps, s.config.source, s.train.classes});
}

std::vector<TrainMetrics> Trainer::run() {
  auto& s = *state_;
  const auto& c = s.config;
  const auto& t = c.train;
  fs::create_directories(s.output);
  const auto csv_path = s.output / "metrics.csv", checkpoint = s.output / "checkpoint.safetensors";
  std::optional<MetricsWriter> csv;   // rank 0 writes the run's files
  std::optional<RunLog> diagnostics;  // every diagnostics_every steps
  if (s.main_rank()) {
    io::remove_abandoned_temporaries(s.output.string());
    csv.emplace(csv_path.string(), s.step);
    if (t.diagnostics_every > 0) {
      diagnostics.emplace((s.output / "diagnostics.jsonl").string(), s.step, "",
                          diagnostics_line_step);
    }
  }
  const auto lo = s.loader_options();
  TrainingBatches batches(s.train, example_loader(c.model, &c.augment), lo, s.batches_per_epoch);
  std::optional<Mixup> mixup;
  if (!s.ctc()) mixup.emplace(mixup_options(c, static_cast<int64_t>(s.train.classes.size())));
  const auto examples_per_epoch = static_cast<double>(s.batches_per_epoch * lo.batch_size);
  const int64_t last_step =
      s.options.stop_at_step > 0 ? std::min(s.options.stop_at_step, s.total_steps) : s.total_steps;
  ProgressReport progress(s.log(), s.options.progress_bar, s.step, s.total_steps);
  s.log() << s.banner(lo.batch_size);
  std::vector<TrainMetrics> history;
  MetricsWindow window;
  while (s.step < last_step) {
    const auto [grad_norm, lr] = s.train_step(batches, mixup ? &*mixup : nullptr, window,
                                              diagnostics ? &*diagnostics : nullptr, progress);
    const bool epoch_end = s.epoch_ended();
    const bool log_row = s.step % t.log_every == 0 || s.step == s.total_steps;
    const bool eval_row = s.has_val && (t.eval_every > 0 ? s.step % t.eval_every == 0 : epoch_end);
    const double throughput = window.examples_per_second();
    progress.step(s.step, window.mean_loss(), lr, throughput);
    if (log_row || eval_row) {
      TrainMetrics row;
      row.step = s.step;
      row.epoch = static_cast<double>(s.step * t.accumulation * lo.batch_size) / examples_per_epoch;
      row.loss = window.mean_loss();
      row.lr = lr;
      row.grad_norm = grad_norm;
      row.examples_per_second = throughput;
      progress.row(row);
      if (eval_row) s.validate(row, progress);
      if (csv) csv->write(row);
      history.push_back(row);
      if (eval_row && s.options.on_metrics) s.options.on_metrics(history);
      window = MetricsWindow();
    }
    const bool checkpoint_now =
        s.step == last_step ||
        (t.checkpoint_every > 0 ? s.step % t.checkpoint_every == 0 : epoch_end);
    if (checkpoint_now && s.main_rank()) save_checkpoint(checkpoint.string());
  }
  progress.finish();
  if (s.step < s.total_steps) {
    s.log() << "stopped at step " << s.step << " of " << s.total_steps << "; resume from "
            << checkpoint.string() << "\n";
    return history;
  }
  if (!s.main_rank()) return history;
  s.write_weights((s.output / "model.safetensors").string());
  s.log() << "done: " << s.step << " steps; " << (s.output / "model.safetensors").string() << ", "
          << checkpoint.string() << ", " << csv_path.string() << "\n";
  if (s.options.on_metrics) s.options.on_metrics(history);
  return history;
}

}  // namespace attnzoo
