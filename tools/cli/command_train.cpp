// `attnzoo train` and `attnzoo eval`: the training loop of train/trainer.h from a training YAML
// (configs/train_config.h), with a progress bar on a terminal and plain lines otherwise, and
// `--plot` redrawing the loss and accuracy (or error rate) curves (PNG) from metrics.csv after each
// evaluation; and the accuracy, loss and confusion matrix of a model's weights on a labelled
// dataset, or a CTC model's word and character error rates on transcribed audio.
#include "tools/cli/commands.h"
#include "tools/cli/plot.h"

#include <attnzoo/api/ctc_search.h>
#include <attnzoo/api/inference_dtype.h>
#include <attnzoo/api/model_tokenizer.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/train_config.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/io/weights_file.h>
#include <attnzoo/train/ctc_training.h>
#include <attnzoo/train/trainer.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

namespace attnzoo::cli {
namespace {

namespace fs = std::filesystem;

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume;
  std::string plot;
  std::string output;
};

// Loss (train and validation) and the validation's accuracy (top-1 and top-5) or, for a CTC
// model, error rates (WER and CER) against the step, read back from metrics.csv so that a resumed
// run's figure holds the whole run. `joint`: CTC/attention training, whose training loss is the
// joint one and whose validation loss is the CTC head's.
void plot_metrics(const fs::path& csv_path, const std::string& png, const std::string& title,
                  bool joint) {
  std::ifstream in(csv_path);
  std::string line;
  std::getline(in, line);  // header
  PlotSeries train{
      joint ? "train loss (CTC + attention)" : "train loss", {}, {}, plot_color(0), false, false};
  PlotSeries val{joint ? "val CTC loss" : "val loss", {}, {}, plot_color(1), false, true};
  PlotSeries top1{"val top-1 %", {}, {}, plot_color(2), false, true};
  PlotSeries top5{"val top-5 %", {}, {}, plot_color(3), true, true};
  PlotSeries wer{"val WER %", {}, {}, plot_color(2), false, true};
  PlotSeries cer{"val CER %", {}, {}, plot_color(3), true, true};
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    cells.resize(11);
    const auto number = [&](size_t i) {
      return cells[i].empty() ? std::nan("") : std::stod(cells[i]);
    };
    const double step = number(0);
    train.x.push_back(step);
    train.y.push_back(number(2));
    const auto add = [step](PlotSeries& series, double value) {
      if (std::isnan(value)) return;
      series.x.push_back(step);
      series.y.push_back(value);
    };
    add(val, number(6));
    add(top1, 100.0 * number(7));
    add(top5, 100.0 * number(8));
    add(wer, 100.0 * number(9));
    add(cer, 100.0 * number(10));
  }
  const std::string loss_name = wer.x.empty() ? "cross-entropy" : joint ? "loss" : "CTC loss";
  PlotPanel loss{title + ": loss", "step", loss_name, {train, val}, false, false, false};
  PlotPanel accuracy{title + ": accuracy", "step", "%", {top1, top5}, false, false, false};
  PlotPanel errors{title + ": error rate", "step", "%", {wer, cer}, false, false, false};
  // With at most 5 classes top-5 is always 100%: not worth a line.
  if (std::all_of(top5.y.begin(), top5.y.end(), [](double v) { return v >= 100.0 - 1e-9; })) {
    accuracy.series.pop_back();
  }
  std::vector<PlotPanel> panels = {loss};
  if (!top1.x.empty()) panels.push_back(accuracy);
  if (!wer.x.empty()) panels.push_back(errors);
  write_log_log_plot(panels, png);
}

int run_train(const TrainOptions& o) {
  auto overrides = o.overrides;
  if (!o.output.empty()) overrides.push_back("train.output=" + o.output);
  auto config = load_train_config(o.config, overrides);
  TrainerOptions options;
  options.resume = o.resume;
  options.progress_bar = isatty(fileno(stderr)) != 0;
  const std::string title = config.model.name;
  const bool joint = config.train.ctc_weight < 1.0;  // refused without a decoder and CTC
  if (!o.plot.empty()) {
    // Redrawn after each evaluation, from the run's metrics.csv.
    const auto csv = fs::path(config.train.output) / "metrics.csv";
    options.on_metrics = [csv, png = o.plot, title, joint](const std::vector<TrainMetrics>&) {
      plot_metrics(csv, png, title, joint);
    };
  }
  Trainer trainer(std::move(config), options);
  const auto history = trainer.run();
  if (!o.plot.empty()) {
    plot_metrics(fs::path(trainer.output_dir()) / "metrics.csv", o.plot, title, joint);
    std::cerr << "plot: " << o.plot << "\n";
  }
  return history.empty() ? 1 : 0;
}

struct EvalOptions {
  std::string model;
  std::string weights;
  std::string format;
  std::string key;
  std::vector<std::string> overrides;
  std::string data;
  int64_t batch_size = 64;
  int64_t workers = 2;
  std::string device = "cpu";
  std::string dtype;  // fp32, bf16, fp16 or auto; empty: the config's inference.dtype
  bool json = false;
};

// The model on --device in --dtype (else the config's inference.dtype), as the task APIs load it.
void place_for_eval(ZooModel& model, const EvalOptions& o) {
  const torch::Device device(o.device);
  const auto dtype = o.dtype.empty() ? resolve_inference_dtype(model.config.inference.dtype, device)
                                     : parse_inference_dtype("--dtype", o.dtype, device);
  model.module->to(device, dtype);
}

// A CTC model on a transcript list: its search's word and character error rates and CTC loss,
// and with --json each utterance's reference and hypothesis.
int run_eval_ctc(ZooModel& model, const std::string& format, const EvalOptions& o) {
  const auto tokenizer = model_tokenizer(model.config);
  const auto dataset = transcript_list_dataset(o.data, tokenizer);
  place_for_eval(model, o);
  const bool bar = isatty(fileno(stderr)) != 0;
  const auto search = ctc_search_settings(model.config, tokenizer.units());
  const auto r = evaluate_ctc(model, dataset, tokenizer, search, o.batch_size, o.workers,
                              [&](int64_t done, int64_t total) {
                                if (bar) std::cerr << "\r" << done << "/" << total << std::flush;
                              });
  if (bar) std::cerr << "\n";
  const auto counts = [](const decoding::EditCounts& c) {
    return nlohmann::json{{"errors", c.errors()},
                          {"substitutions", c.substitutions},
                          {"deletions", c.deletions},
                          {"insertions", c.insertions},
                          {"reference", c.reference_length()}};
  };
  if (o.json) {
    auto utterances = nlohmann::json::array();
    for (const auto& u : r.utterances) {
      utterances.push_back({{"audio", u.audio},
                            {"reference", u.reference},
                            {"hypothesis", u.hypothesis},
                            {"word_errors", u.words.errors()},
                            {"words", u.words.reference_length()}});
    }
    std::cout << nlohmann::json{{"model", model.config.name},
                                {"weights", o.weights},
                                {"format", format},
                                {"data", o.data},
                                {"examples", r.examples},
                                {"search", to_string(search.search)},
                                {"wer", r.wer()},
                                {"cer", r.cer()},
                                {"loss", r.loss},
                                {"word_counts", counts(r.words)},
                                {"character_counts", counts(r.characters)},
                                {"utterances", utterances}}
                     .dump()
              << "\n";
    return 0;
  }
  std::cout << model.config.name << " (" << o.weights << ", " << format << ") on " << o.data << ": "
            << r.examples << " utterances, " << to_string(search.search) << " search\n"
            << std::fixed << std::setprecision(2) << "WER " << 100.0 * r.wer() << "% ("
            << r.words.errors() << " of " << r.words.reference_length()
            << " words: " << r.words.substitutions << " substituted, " << r.words.deletions
            << " deleted, " << r.words.insertions << " inserted)  CER " << 100.0 * r.cer()
            << "%  loss " << std::setprecision(4) << r.loss << std::defaultfloat << "\n";
  return 0;
}

// A weights file's metadata: a safetensors file's (a training run's classes and loss); none for
// PyTorch checkpoints and indexes.
std::map<std::string, std::string> weights_metadata(const std::string& file) {
  if (io::is_weights_index(file) || io::is_torch_checkpoint(io::FileSource(file))) return {};
  return io::load_safetensors(file).metadata;
}

int run_eval(EvalOptions o) {
  auto model = build_model(resolve_model_config(o.model, o.overrides));
  if (o.weights.empty()) o.weights = model.config.checkpoint_file;
  if (o.weights.empty()) {
    throw Error("eval: give --weights (" + model.config.source +
                " names no weights of its own, and random weights are not worth evaluating)");
  }
  const auto loaded = load_weights(model, o.weights, o.format, o.key);
  const std::string& format = loaded.layout;
  for (const auto& note : loaded.notes) std::cerr << o.weights << ": " << note << "\n";
  const auto meta = weights_metadata(o.weights);
  const auto loss = meta.find("loss");
  if ((loss != meta.end() && loss->second == "ctc") ||
      (model.family().num_classes(model.config) == 0 &&
       model.family().ctc_vocab(model.config) > 0)) {
    return run_eval_ctc(model, format, o);
  }
  // The class order: the training run's (in the weights' metadata), else the model's labels file,
  // else the data's sorted names.
  std::vector<std::string> classes;
  if (auto it = meta.find("classes"); it != meta.end()) {
    classes = nlohmann::json::parse(it->second).get<std::vector<std::string>>();
  } else if (model.config.labels.source == LabelsConfig::Source::kFile) {
    std::ifstream in(model.config.labels.file);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) classes.push_back(line);
    }
  }
  std::error_code error;
  const bool folder = fs::is_directory(o.data, error);
  if (!folder && !fs::is_regular_file(o.data, error)) {
    throw Error("--data " + o.data + ": no such folder or list file");
  }
  const auto dataset =
      folder ? image_folder_dataset(o.data, classes) : list_dataset(o.data, classes);
  if (folder && model.family().input_kind() != InputKind::kImages) {
    throw Error("--data " + o.data + ": an image folder, for a " + model.config.family +
                " model, which takes " + input_kind_name(model.family().input_kind()));
  }
  const torch::Device device(o.device);
  place_for_eval(model, o);
  const bool bar = isatty(fileno(stderr)) != 0;
  const auto result =
      evaluate(model, dataset, o.batch_size, o.workers, device, [&](int64_t done, int64_t total) {
        if (bar) std::cerr << "\r" << done << "/" << total << std::flush;
      });
  if (bar) std::cerr << "\n";
  const auto& c = result.confusion;
  const int64_t n = static_cast<int64_t>(result.classes.size());
  if (o.json) {
    nlohmann::json j = {{"model", model.config.name},
                        {"weights", o.weights},
                        {"format", format},
                        {"data", o.data},
                        {"examples", result.examples},
                        {"top1", result.top1},
                        {"top5", result.top5},
                        {"loss", result.loss},
                        {"classes", result.classes}};
    std::vector<std::vector<int64_t>> matrix;
    for (int64_t i = 0; i < n; ++i) {
      matrix.emplace_back();
      for (int64_t k = 0; k < n; ++k) matrix.back().push_back(c[i][k].item<int64_t>());
    }
    j["confusion"] = matrix;
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << model.config.name << " (" << o.weights << ", " << format << ") on " << o.data << ": "
            << result.examples << " examples\n"
            << std::fixed << std::setprecision(2) << "top-1 " << 100.0 * result.top1 << "%  top-5 "
            << 100.0 * result.top5 << "%  loss " << std::setprecision(4) << result.loss
            << std::defaultfloat << "\n"
            << "confusion matrix (rows: true class, columns: predicted)\n";
  size_t width = 5;
  for (const auto& name : result.classes) width = std::max(width, name.size());
  std::cout << std::setw(static_cast<int>(width)) << "";
  for (int64_t k = 0; k < n; ++k) std::cout << std::setw(6) << k;
  std::cout << "\n";
  for (int64_t i = 0; i < n; ++i) {
    std::cout << std::setw(static_cast<int>(width)) << result.classes[static_cast<size_t>(i)];
    for (int64_t k = 0; k < n; ++k) std::cout << std::setw(6) << c[i][k].item<int64_t>();
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* sub = app.add_subcommand("train", "Train a model from a training YAML");
  sub->add_option("--config", o->config, "the training YAML (configs/train/...)")->required();
  sub->add_option("--set", o->overrides, "Override a config value, key.path=value; repeatable")
      ->allow_extra_args(false);
  sub->add_option("--resume", o->resume, "continue from this checkpoint.safetensors");
  sub->add_option("--output", o->output, "the run folder (default: the config's train.output)");
  sub->add_option("--plot", o->plot, "write the loss and accuracy curves to this PNG");
  return {sub, [o] { return run_train(*o); }};
}

Command add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  auto* sub = app.add_subcommand(
      "eval",
      "Accuracy (top-1, top-5), loss and confusion matrix of weights on labelled data; for a CTC "
      "model, word and character error rates on transcribed audio");
  add_model_options(sub, o->model, o->weights, o->format, o->key, o->overrides,
                    all_checkpoint_formats());
  sub->add_option("--data", o->data,
                  "an image folder (one subfolder per class), a list of 'PATH LABEL' lines, or "
                  "for a CTC model a list of 'PATH<TAB>TRANSCRIPT' lines")
      ->required();
  sub->add_option("--batch-size", o->batch_size, "examples per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  sub->add_option("--workers", o->workers, "data-loading threads")
      ->check(CLI::Range(int64_t{0}, int64_t{256}))
      ->capture_default_str();
  sub->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  sub->add_option("--dtype", o->dtype,
                  "fp32, bf16, fp16, or auto: bf16 on a CPU with AVX512-BF16 or AMX, else fp32 "
                  "(default: the config's inference.dtype, fp32 unless it says otherwise)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "auto"}));
  sub->add_flag("--json", o->json,
                "one JSON object: accuracy, loss, confusion matrix; for a CTC model wer, cer, "
                "loss, the edit counts and each utterance's reference and hypothesis");
  return {sub, [o] { return run_eval(*o); }};
}

}  // namespace attnzoo::cli
