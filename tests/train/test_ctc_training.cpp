// Training with train.loss ctc (train/ctc_training.h) on synthetic "tone sequences": utterances of
// one to three tones of three pitches between silences, transcribed "high low mid" with a table
// of word units. A small streaming Conformer learns them (the loss falls, validation WER ends
// low), a run with dynamic chunks and SpecAugment resumed at step k equals the uninterrupted run,
// the CTC loss of a batch equals a float64 forward (alpha) recursion written here, the dynamic
// chunk draws have the distribution they claim, transcript lists read as documented, and
// evaluate_ctc agrees with its parts and with the run's metrics.csv.
#include "common/test_util.h"
#include "trainer_test_util.h"

#include <attnzoo/api/ctc_search.h>
#include <attnzoo/api/frontend_options.h>
#include <attnzoo/api/model_tokenizer.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/configs/train_config.h>
#include <attnzoo/decoding/tokenizer.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/models/conformer.h>
#include <attnzoo/preprocess/audio/features.h>
#include <attnzoo/preprocess/audio/read.h>
#include <attnzoo/train/attention_training.h>
#include <attnzoo/train/ctc_training.h>
#include <attnzoo/train/data.h>
#include <attnzoo/train/trainer.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace attnzoo {
namespace test_ctc_training {

using testing::error_of;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The table of word units: <blank>, <unk>, the three pitches, <sos/eos> (the CTC head's 6).
constexpr const char* kUnits = "<blank> 0\n<unk> 1\nhigh 2\nlow 3\nmid 4\n<sos/eos> 5\n";

// Utterances of 1 to 3 tones (high 2400 Hz, low 300 Hz, mid 900 Hz, +-5%; 0.15 to 0.25 s each,
// random amplitude) between silences of 0.1 to 0.2 s, with a little noise; repeated pitches
// happen (a CTC alignment must put a blank between them). Writes root/NNN.wav and root/list.txt
// ("NNN.wav<TAB>high low"); returns the list's path.
std::string write_tone_sequences(const std::string& root, int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 0.01);
  const char* names[] = {"high", "low", "mid"};
  const double hz[] = {2400.0, 300.0, 900.0};
  fs::create_directories(root);
  std::ofstream list(root + "/list.txt");
  list << "# tone sequences: PATH<TAB>TRANSCRIPT\n";
  for (int k = 0; k < count; ++k) {
    std::vector<float> x;
    const auto silence = [&] {
      const auto n = static_cast<int>(16000 * (0.1 + 0.1 * u(rng)));
      for (int t = 0; t < n; ++t) x.push_back(static_cast<float>(noise(rng)));
    };
    std::string transcript;
    const int tones = 1 + k % 3;
    silence();
    for (int i = 0; i < tones; ++i) {
      const int c = static_cast<int>(rng() % 3);
      const auto n = static_cast<int>(16000 * (0.15 + 0.1 * u(rng)));
      const double f = hz[c] * (0.95 + 0.1 * u(rng)), amplitude = 0.2 + 0.3 * u(rng);
      for (int t = 0; t < n; ++t) {
        x.push_back(
            static_cast<float>(amplitude * std::sin(2.0 * M_PI * f * t / 16000.0) + noise(rng)));
      }
      silence();
      transcript += (i ? " " : "") + std::string(names[c]);
    }
    char file[32];
    std::snprintf(file, sizeof(file), "%03d.wav", k);
    testing::write_wav16(root + "/" + file, x, 16000);
    list << file << "\t" << transcript << "\n";
  }
  return root + "/list.txt";
}

// The data (train and val), the units and the model YAML, made once per test binary: a Conformer
// of width 16 with a causal convolution (so that it can stream) and a CTC head over the units,
// validated with a prefix beam search.
const std::string& tones_root() {
  static const std::string root = [] {
    const auto dir = testing::fresh_dir("ctc_tones");
    write_tone_sequences(dir + "/train", 36, 11);
    write_tone_sequences(dir + "/val", 12, 12);
    std::ofstream(dir + "/units.txt") << kUnits;
    std::ofstream(dir + "/model.yaml") << "name: conformer_ctc_micro\n"
                                          "family: conformer\n"
                                          "architecture:\n"
                                          "  input_dim: 20\n"
                                          "  encoder_dim: 16\n"
                                          "  num_layers: 2\n"
                                          "  num_heads: 2\n"
                                          "  ffn_dim: 32\n"
                                          "  depthwise_conv_kernel_size: 5\n"
                                          "  causal_conv: true\n"
                                          "  subsampling: conv2d4\n"
                                          "  position: rel_pos_wenet\n"
                                          "  dropout: 0.1\n"
                                          "  vocab_size: 6\n"
                                          "features: {kind: fbank, num_mel_bins: 20}\n"
                                          "decoding: {units: units.txt, text: words, "
                                          "search: prefix_beam, beam_size: 4}\n";
    // The same with U2++'s bitransformer decoder, validated by attention rescoring.
    std::ifstream ctc_model(dir + "/model.yaml");
    std::string yaml((std::istreambuf_iterator<char>(ctc_model)), {});
    const auto replace = [&](const std::string& from, const std::string& to) {
      yaml.replace(yaml.find(from), from.size(), to);
    };
    replace("  vocab_size: 6\n",
            "  vocab_size: 6\n"
            "  decoder: {kind: bitransformer, num_heads: 2, ffn_dim: 32, num_blocks: 1,\n"
            "            right_blocks: 1}\n");
    replace("beam_size: 4}",
            "beam_size: 4, mode: attention_rescoring, ctc_weight: 0.5,\n"
            "           reverse_weight: 0.3}");
    std::ofstream(dir + "/model_u2pp.yaml") << yaml;
    return dir;
  }();
  return root;
}

TrainConfig ctc_config(const std::string& output, const std::vector<std::string>& extra = {}) {
  const auto path = tones_root() + "/train.yaml";
  std::ofstream(path) << "model: model.yaml\n"
                      << "data: {kind: audio_list, train: train/list.txt, val: val/list.txt, "
                         "workers: 1}\n"
                      << "optimizer: {lr: 1.0e-2, weight_decay: 0.01}\n"
                      << "schedule: {warmup_steps: 10, min_lr_ratio: 0.1}\n"
                      << "train: {loss: ctc, epochs: 30, batch_size: 6, clip_grad_norm: 5.0, "
                         "log_every: 30, seed: 5, threads: 1}\n";
  auto overrides = extra;
  overrides.push_back("train.output=" + output);
  return load_train_config(path, overrides);
}

// A CTC training run: its folder, config, history and log.
struct CtcRun {
  std::string dir;
  TrainConfig config;
  std::vector<TrainMetrics> history;
  std::string log;
};

CtcRun train_ctc(const std::string& name, const std::vector<std::string>& extra) {
  CtcRun r;
  r.dir = testing::fresh_dir(name);
  std::ostringstream log;
  TrainerOptions options;
  options.log = &log;
  Trainer trainer(ctc_config(r.dir, extra), options);
  r.config = trainer.config();
  r.history = trainer.run();
  r.log = log.str();
  return r;
}

const std::vector<std::string> kSpecAugment = {"augment.spec_augment=true", "augment.freq_masks=1",
                                               "augment.freq_width=3", "augment.time_masks=1",
                                               "augment.time_width=5"};

TEST(CtcTraining, SmallConformerLearnsToneSequences) {
  const auto run = train_ctc("ctc_learn", kSpecAugment);
  const auto& h = run.history;
  for (const auto& row : h) {
    std::printf("step %3lld loss %.4f val loss %.4f WER %.3f CER %.3f\n",
                static_cast<long long>(row.step), row.loss, row.val_loss, row.val_wer, row.val_cer);
  }
  // 30 epochs x 6 steps, a row with an evaluation at the end of each epoch.
  ASSERT_EQ(h.size(), 30u);
  EXPECT_EQ(h.back().step, 180);
  EXPECT_LT(h.back().loss, 0.25 * h.front().loss);
  EXPECT_LT(h.back().val_loss, 0.25 * h.front().val_loss);
  // The validation error moves by a few of its 24 words from epoch to epoch this late: the best
  // of the last five epochs at most 3 words wrong, the last at most 6.
  double best_wer = 1.0;
  for (size_t i = h.size() - 5; i < h.size(); ++i) best_wer = std::min(best_wer, h[i].val_wer);
  EXPECT_LE(best_wer, 0.125);
  EXPECT_LE(h.back().val_wer, 0.25);
  EXPECT_LE(h.back().val_cer, 0.25);
  EXPECT_GE(h.front().val_wer, 0.5);  // it did have to learn
  // A classifier's columns stay empty.
  EXPECT_TRUE(std::isnan(h.back().val_top1) && std::isnan(h.back().val_top5));
  EXPECT_THAT(run.log, HasSubstr("training conformer_ctc_micro: 36 examples, CTC over 6 tokens, "
                                 "180 steps of 1 x 6"));
  EXPECT_THAT(run.log, HasSubstr("step 180: val CTC loss "));
  EXPECT_THAT(run.log, HasSubstr("% (12 utterances)"));
  const auto shipped = io::load_safetensors(run.dir + "/model.safetensors");
  EXPECT_EQ(shipped.metadata.at("loss"), "ctc");
}

// Joint CTC/attention training (train.ctc_weight < 1, WeNet's U2++ loss) of the tone model with a
// bitransformer decoder, validated by attention rescoring: the loss falls, the validation WER
// ends as low as CTC training's, and both decoders have learned the transcripts: on the
// validation set their teacher-forced loss is a fraction of an untrained decoder's. (Without
// SpecAugment: with it, the joint run leaves its first plateau later than these 180 steps allow.)
TEST(CtcTraining, JointCtcAttentionTrainsBothDecoders) {
  const auto run =
      train_ctc("ctc_joint", {"model=model_u2pp.yaml", "train.ctc_weight=0.5", "train.epochs=45",
                              "train.reverse_weight=0.3", "train.label_smoothing=0.1"});
  const auto& h = run.history;
  for (const auto& row : h) {
    std::printf("step %3lld loss %.4f val loss %.4f WER %.3f\n", static_cast<long long>(row.step),
                row.loss, row.val_loss, row.val_wer);
  }
  ASSERT_EQ(h.size(), 45u);
  EXPECT_LT(h.back().loss, 0.25 * h.front().loss);
  double best_wer = 1.0;
  for (size_t i = h.size() - 5; i < h.size(); ++i) best_wer = std::min(best_wer, h[i].val_wer);
  EXPECT_LE(best_wer, 0.125);
  EXPECT_GE(h.front().val_wer, 0.5);
  EXPECT_THAT(run.log, HasSubstr("CTC over 6 tokens and the attention decoder (ctc_weight 0.5, "
                                 "reverse_weight 0.3), 270 steps"));

  const auto tokenizer = model_tokenizer(run.config.model);
  const auto val = transcript_list_dataset(tones_root() + "/val/list.txt", tokenizer);
  // The decoders' loss on the validation set, eval mode, without smoothing.
  const auto decoder_loss = [&](ZooModel& model, double reverse_weight) {
    torch::NoGradGuard no_grad;
    model.module->eval();
    auto& conformer = *model.module->as<ConformerEncoderImpl>();
    EpochLoader loader(val, example_loader(model.config, nullptr),
                       evaluation_loader_options(12, 0, true), 0);
    auto batch = loader.next();
    torch::Tensor encoded, lengths;
    for (const auto& [name, value] : model.forward({batch->inputs, batch->lengths})) {
      if (name == "encoded") encoded = value;
      if (name == "lengths") lengths = value;
    }
    return attention_batch_loss(*conformer.decoder, encoded, lengths, batch->targets,
                                batch->target_lengths, {0.0, reverse_weight})
        .item<double>();
  };
  // The left-to-right decoder's loss alone (reverse_weight 0), and the right-to-left one's: from
  // the mean of both (reverse_weight 0.5), less half the left one's, times 2.
  const auto losses = [&](ZooModel& model) {
    const double left = decoder_loss(model, 0.0), both = decoder_loss(model, 0.5);
    return std::make_pair(left, 2.0 * both - left);
  };
  auto trained = build_model(run.config.model);
  load_state_dict(*trained.module, io::load_safetensors(run.dir + "/model.safetensors").tensors);
  auto untrained = build_model(run.config.model);
  const auto [left_after, right_after] = losses(trained);
  const auto [left_before, right_before] = losses(untrained);
  std::printf(
      "decoders' validation loss (nats an utterance): left %.3f untrained, %.3f trained; "
      "right %.3f untrained, %.3f trained\n",
      left_before, left_after, right_before, right_after);
  EXPECT_LT(left_after, 0.5 * left_before);
  EXPECT_LT(right_after, 0.5 * right_before);
}

// init_new: a CTC run's weights start a model with a decoder added (the file lacks decoder.*):
// the encoder and the CTC head are the run's, the decoder keeps the model's initialization.
// Without init_new the strict loader names the decoder's tensors; a prefix that begins no name
// is refused.
TEST(CtcTraining, InitNewAddsADecoderToATrainedCtcModel) {
  const auto ctc = train_ctc("ctc_for_init", {"train.epochs=1"});
  const auto weights = ctc.dir + "/model.safetensors";
  auto trained = io::load_safetensors(weights).tensors;
  const std::vector<std::string> u2pp = {"model=model_u2pp.yaml", "init_weights=" + weights};
  auto with_new = u2pp;
  with_new.push_back("init_new=[decoder.]");
  Trainer trainer(ctc_config(testing::fresh_dir("ctc_init_new"), with_new));
  torch::manual_seed(trainer.config().train.seed);  // the Trainer's seed, before it built its model
  auto fresh = build_model(trainer.config().model);
  auto initial = state_dict(*fresh.module);
  int64_t encoder = 0, decoder = 0;
  for (const auto& item : state_dict(*trainer.model().module)) {
    if (item.key().rfind("decoder.", 0) == 0) {
      ++decoder;
      EXPECT_FALSE(trained.contains(item.key())) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), initial[item.key()])) << item.key();
    } else {
      ++encoder;
      ASSERT_TRUE(trained.contains(item.key())) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), trained[item.key()])) << item.key();
    }
  }
  EXPECT_GT(encoder, 10);
  EXPECT_GT(decoder, 10);
  EXPECT_THAT(error_of<CheckpointError>(
                  [&] { Trainer t(ctc_config(testing::fresh_dir("ctc_init_strict"), u2pp)); }),
              HasSubstr("decoder.left.embed.weight"));
  auto typo = u2pp;
  typo.push_back("init_new=[decodr.]");
  EXPECT_THAT(
      error_of<Error>([&] { Trainer t(ctc_config(testing::fresh_dir("ctc_init_typo"), typo)); }),
      HasSubstr("the new prefix 'decodr.' begins no parameter or buffer name of "
                "conformer_ctc_micro"));
}

// The validation list with some transcripts made wrong, so that a model that hears the tones
// right makes every kind of error on it: a word appended (a deletion), the last word dropped (an
// insertion), the first word changed (a substitution), a transcript emptied (an insertion against
// an empty reference). Returns the transcripts as written.
std::vector<std::string> write_wrong_transcripts(const std::string& from, const std::string& to) {
  std::ifstream in(from);
  std::ofstream out(to);
  std::vector<std::string> transcripts;
  int k = 0;
  for (std::string line; std::getline(in, line);) {
    if (line[0] == '#') continue;
    const auto tab = line.find('\t');
    auto text = line.substr(tab + 1);
    if (k == 1) text += " high";
    if (k == 2) text = text.substr(0, text.rfind(' '));
    if (k == 4) text = (text.rfind("low", 0) == 0 ? "mid" : "low") + text.substr(text.find(' '));
    if (k == 6) text = "";
    out << line.substr(0, tab) << "\t" << text << "\n";
    transcripts.push_back(text);
    ++k;
  }
  return transcripts;
}

// evaluate_ctc on a trained model and the mis-transcribed validation list: the corpus counts are
// the sums of the utterances', each utterance's counts are its reference against its hypothesis,
// the references are the list's transcripts, the result does not depend on the batch size
// (padding does not leak), the loss is the mean of ctc_batch_loss over single utterances, and
// metrics.csv's last row is what a fresh evaluation of model.safetensors gives.
TEST(CtcTraining, EvaluationAgreesWithItsParts) {
  const auto wrong = tones_root() + "/val/wrong.txt";
  const auto transcripts = write_wrong_transcripts(tones_root() + "/val/list.txt", wrong);
  auto extra = kSpecAugment;
  extra.push_back("data.val=" + wrong);
  const auto run = train_ctc("ctc_eval", extra);
  auto model = build_model(run.config.model);
  load_state_dict(*model.module, io::load_safetensors(run.dir + "/model.safetensors").tensors);
  const auto tokenizer = model_tokenizer(model.config);
  const auto search = ctc_search_settings(model.config, tokenizer.units());
  const auto val = transcript_list_dataset(wrong, tokenizer);
  const auto r = evaluate_ctc(model, val, tokenizer, search, 5, 0);
  ASSERT_EQ(r.examples, 12);
  ASSERT_EQ(r.utterances.size(), 12u);
  decoding::EditCounts characters;
  int64_t errors = 0, reference = 0;
  for (size_t i = 0; i < 12; ++i) {
    const auto& u = r.utterances[i];
    std::printf("%-16s | %s\n", u.reference.c_str(), u.hypothesis.c_str());
    EXPECT_EQ(u.audio, val.examples[i].path);
    EXPECT_EQ(u.reference, transcripts[i]);
    const auto w = decoding::word_errors(u.reference, u.hypothesis);
    EXPECT_EQ(u.words.errors(), w.errors()) << i;
    EXPECT_EQ(u.words.substitutions, w.substitutions) << i;
    EXPECT_EQ(u.words.reference_length(), w.reference_length()) << i;
    EXPECT_EQ(u.characters.errors(),
              decoding::character_errors(u.reference, u.hypothesis).errors());
    characters += u.characters;
    errors += u.words.errors();
    reference += static_cast<int64_t>(decoding::words_of(u.reference).size());
  }
  EXPECT_EQ(reference, 23);  // 24 words, one appended, two dropped
  EXPECT_EQ(r.words.errors(), errors);
  EXPECT_EQ(r.words.reference_length(), reference);
  EXPECT_DOUBLE_EQ(r.wer(), static_cast<double>(errors) / static_cast<double>(reference));
  EXPECT_DOUBLE_EQ(r.cer(), characters.rate());
  // The wrong transcripts are heard as the tones: each kind of error is there.
  std::printf("WER %.4f: %lld substituted, %lld deleted, %lld inserted\n", r.wer(),
              static_cast<long long>(r.words.substitutions),
              static_cast<long long>(r.words.deletions),
              static_cast<long long>(r.words.insertions));
  EXPECT_GE(r.words.substitutions, 1);
  EXPECT_GE(r.words.deletions, 1);
  EXPECT_GE(r.words.insertions, 2);
  EXPECT_EQ(r.utterances[6].words.reference_length(), 0);
  EXPECT_GE(r.utterances[6].words.insertions, 1);

  // Batches of 1 (no padding) and 12: the same hypotheses and loss.
  const auto alone = evaluate_ctc(model, val, tokenizer, search, 1, 0);
  const auto whole = evaluate_ctc(model, val, tokenizer, search, 12, 2);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(alone.utterances[i].hypothesis, r.utterances[i].hypothesis) << i;
    EXPECT_EQ(whole.utterances[i].hypothesis, r.utterances[i].hypothesis) << i;
  }
  EXPECT_NEAR(alone.loss, r.loss, 1e-4);
  EXPECT_NEAR(whole.loss, r.loss, 1e-4);
  // The loss: the mean over utterances of ctc_batch_loss on each one alone.
  double loss_sum = 0.0;
  {
    torch::NoGradGuard no_grad;
    model.module->eval();
    EpochLoader loader(val, example_loader(model.config, nullptr),
                       evaluation_loader_options(1, 0, true), 0);
    while (auto batch = loader.next()) {
      torch::Tensor log_probs, lengths;
      for (const auto& [name, value] : model.forward({batch->inputs, batch->lengths})) {
        if (name == "logits") log_probs = value;
        if (name == "lengths") lengths = value;
      }
      loss_sum += ctc_batch_loss(log_probs, lengths, *batch, val, 0).item<double>();
    }
  }
  EXPECT_NEAR(r.loss, loss_sum / 12.0, 1e-4);

  // metrics.csv's last row: the validation of model.safetensors.
  const auto rows = testing::read_csv(run.dir + "/metrics.csv");
  ASSERT_EQ(rows.size(), 31u);
  ASSERT_EQ(rows[0].size(), 11u);
  EXPECT_EQ(rows[0][9], "val_wer");
  EXPECT_EQ(rows[0][10], "val_cer");
  const auto& last = rows.back();
  ASSERT_EQ(last.size(), 11u);
  EXPECT_EQ(last[0], "180");
  EXPECT_EQ(last[7], "");
  EXPECT_EQ(last[8], "");
  EXPECT_NEAR(std::stod(last[6]), r.loss, 1e-6);
  EXPECT_NEAR(std::stod(last[9]), r.wer(), 1e-6);
  EXPECT_NEAR(std::stod(last[10]), r.cer(), 1e-6);
  EXPECT_NEAR(run.history.back().val_loss, r.loss, 1e-6);
  EXPECT_NEAR(run.history.back().val_wer, r.wer(), 1e-12);
}

// Stopped at step 10 (inside epoch 2) and resumed: the same losses and the same final weights as
// one run, with dynamic chunks (with random left chunks), SpecAugment and dropout all drawing
// random numbers.
TEST(CtcTraining, ResumeWithDynamicChunksEqualsTheUninterruptedRun) {
  const std::vector<std::string> extra = {"train.epochs=3",
                                          "train.log_every=1",
                                          "train.checkpoint_every=4",
                                          "train.dynamic_chunk=4",
                                          "train.full_context_prob=0.3",
                                          "train.dynamic_left_chunks=true",
                                          "augment.spec_augment=true",
                                          "augment.freq_masks=1",
                                          "augment.freq_width=3",
                                          "augment.time_masks=1",
                                          "augment.time_width=5"};
  std::ostringstream log;
  TrainerOptions options;
  options.log = &log;
  const auto a_dir = testing::fresh_dir("ctc_resume_a"), b_dir = testing::fresh_dir("ctc_resume_b");
  auto more_workers = extra;
  more_workers.push_back("data.workers=2");
  const auto run =
      testing::expect_resume_equals_whole_run(ctc_config(a_dir, extra), ctc_config(b_dir, extra),
                                              ctc_config(b_dir, more_workers), 10, options);
  const auto& full = run.whole;
  ASSERT_EQ(full.size(), 18u);
  EXPECT_EQ(run.head.size(), 10u);
  ASSERT_EQ(run.tail.size(), 8u);
  EXPECT_NEAR(run.tail.back().val_loss, full.back().val_loss, 1e-6);
  EXPECT_EQ(run.tail.back().val_wer, full.back().val_wer);

  // The chunks matter: without dynamic chunks the same seed trains differently.
  auto plain = extra;
  plain.push_back("train.dynamic_chunk=0");
  auto six = options;
  six.stop_at_step = 6;
  const auto c_dir = testing::fresh_dir("ctc_resume_plain");
  const auto without = Trainer(ctc_config(c_dir, plain), six).run();
  ASSERT_EQ(without.size(), 6u);
  double loss_diff = 0.0;
  for (size_t i = 0; i < without.size(); ++i) {
    loss_diff = std::max(loss_diff, std::abs(without[i].loss - full[i].loss));
  }
  EXPECT_GT(loss_diff, 1e-4);
}

// -log P(target | log_probs[0 .. frames)) by the CTC forward recursion over the target with
// blanks interleaved (Graves et al. 2006), in float64.
double ctc_negative_log_likelihood(const torch::Tensor& log_probs, int64_t frames,
                                   const std::vector<int64_t>& target, int64_t blank) {
  const auto lp = log_probs.to(torch::kDouble).contiguous();
  const auto at = [&](int64_t t, int64_t v) { return lp[t][v].item<double>(); };
  std::vector<int64_t> extended = {blank};
  for (const auto token : target) {
    extended.push_back(token);
    extended.push_back(blank);
  }
  const auto s_count = static_cast<int64_t>(extended.size());
  const double none = -std::numeric_limits<double>::infinity();
  const auto add = [none](double a, double b) {
    if (a == none) return b;
    if (b == none) return a;
    const double m = std::max(a, b);
    return m + std::log(std::exp(a - m) + std::exp(b - m));
  };
  std::vector<double> alpha(static_cast<size_t>(s_count), none);
  alpha[0] = at(0, blank);
  if (s_count > 1) alpha[1] = at(0, extended[1]);
  for (int64_t t = 1; t < frames; ++t) {
    std::vector<double> next(static_cast<size_t>(s_count), none);
    for (int64_t s = 0; s < s_count; ++s) {
      const auto i = static_cast<size_t>(s);
      double a = alpha[i];
      if (s >= 1) a = add(a, alpha[i - 1]);
      if (s >= 2 && extended[i] != blank && extended[i] != extended[i - 2]) {
        a = add(a, alpha[i - 2]);
      }
      next[i] = a == none ? none : a + at(t, extended[i]);
    }
    alpha = std::move(next);
  }
  const auto last = static_cast<size_t>(s_count - 1);
  return -(s_count > 1 ? add(alpha[last], alpha[last - 1]) : alpha[last]);
}

// A batch of the given examples' tokens in `order` (indices into the dataset), as the loader
// makes it (targets zero-padded).
Batch batch_of(const LabelledDataset& dataset, const std::vector<int64_t>& order) {
  Batch b;
  const auto n = static_cast<int64_t>(order.size());
  int64_t longest = 0;
  for (const auto i : order) {
    longest = std::max<int64_t>(longest, dataset.examples[static_cast<size_t>(i)].tokens.size());
  }
  b.targets = torch::zeros({n, longest}, torch::kLong);
  b.target_lengths = torch::zeros({n}, torch::kLong);
  for (int64_t k = 0; k < n; ++k) {
    const auto& tokens = dataset.examples[static_cast<size_t>(order[k])].tokens;
    for (size_t j = 0; j < tokens.size(); ++j) {
      b.targets[k][static_cast<int64_t>(j)] = tokens[j];
    }
    b.target_lengths[k] = static_cast<int64_t>(tokens.size());
  }
  b.indices = torch::tensor(order, torch::kLong);
  b.labels = torch::zeros({n}, torch::kLong);
  return b;
}

TEST(CtcTraining, BatchLossEqualsTheForwardRecursion) {
  LabelledDataset d;
  d.source = "list.txt";
  d.transcribed = true;
  d.examples = {{"a.wav", 0, {2, 2, 3}},     // a repeat: needs 4 frames
                {"b.wav", 0, {}},            // silence
                {"c.wav", 0, {1, 4, 1, 3}},  // a token again, not adjacent
                {"d.wav", 0, {3, 3, 3}},     // needs 5 frames: given exactly 5
                {"e.wav", 0, {4}}};
  const std::vector<int64_t> order = {2, 0, 4, 3, 1};
  const auto batch = batch_of(d, order);
  const std::vector<int64_t> frames = {9, 12, 3, 5, 7};
  torch::manual_seed(3);
  // Peaked, so that alignments differ a lot in probability; the padding frames hold junk that
  // must not count.
  auto log_probs = torch::log_softmax(3.0 * torch::randn({5, 12, 5}), -1);
  for (int64_t k = 0; k < 5; ++k) {
    log_probs[k]
        .narrow(0, frames[static_cast<size_t>(k)], 12 - frames[static_cast<size_t>(k)])
        .fill_(5.0);
  }
  log_probs.requires_grad_(true);
  const auto lengths = torch::tensor(frames, torch::kLong);
  const auto loss = ctc_batch_loss(log_probs, lengths, batch, d, 0);
  double expected = 0.0;
  for (int64_t k = 0; k < 5; ++k) {
    const auto& tokens = d.examples[static_cast<size_t>(order[static_cast<size_t>(k)])].tokens;
    const double nll = ctc_negative_log_likelihood(log_probs[k].detach(),
                                                   frames[static_cast<size_t>(k)], tokens, 0);
    EXPECT_TRUE(std::isfinite(nll)) << k;
    expected += nll / 5.0;
  }
  std::printf("CTC loss %.6f, the recursion's %.6f\n", loss.item<double>(), expected);
  EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * std::abs(expected));
  // Differentiable, and only through the valid frames.
  loss.backward();
  const auto grad = log_probs.grad();
  EXPECT_GT(grad.abs().sum().item<double>(), 0.0);
  for (int64_t k = 0; k < 5; ++k) {
    const auto f = frames[static_cast<size_t>(k)];
    EXPECT_EQ(grad[k].narrow(0, f, 12 - f).abs().sum().item<double>(), 0.0) << k;
  }
  // Another blank id: the same recursion with blank 4 (the targets' 4s become 0s).
  auto other = d;
  for (auto& e : other.examples) {
    std::replace(e.tokens.begin(), e.tokens.end(), int64_t{4}, int64_t{0});
  }
  const auto loss4 = ctc_batch_loss(log_probs.detach(), lengths, batch_of(other, order), other, 4);
  double expected4 = 0.0;
  for (int64_t k = 0; k < 5; ++k) {
    const auto& tokens = other.examples[static_cast<size_t>(order[static_cast<size_t>(k)])].tokens;
    expected4 += ctc_negative_log_likelihood(log_probs[k].detach(), frames[static_cast<size_t>(k)],
                                             tokens, 4) /
                 5.0;
  }
  EXPECT_NEAR(loss4.item<double>(), expected4, 1e-5 * std::abs(expected4));

  // One frame short for d.wav (3 3 3 needs 5): a DatasetError naming the file, not an infinity.
  const std::vector<int64_t> short_frames = {9, 12, 3, 4, 7};
  const auto message = error_of<DatasetError>([&] {
    ctc_batch_loss(log_probs.detach(), torch::tensor(short_frames, torch::kLong), batch, d, 0);
  });
  EXPECT_THAT(message, HasSubstr("d.wav: 4 encoder frames cannot hold its transcript of 3 tokens"));
  EXPECT_THAT(message, HasSubstr("needs 5"));
  // a.wav (2 2 3) in 3 frames: its repeat needs a fourth.
  const std::vector<int64_t> short_a = {9, 3, 3, 5, 7};
  EXPECT_THAT(error_of<DatasetError>([&] {
                ctc_batch_loss(log_probs.detach(), torch::tensor(short_a, torch::kLong), batch, d,
                               0);
              }),
              HasSubstr("a.wav: 3 encoder frames"));
  // A batch without targets (a classifier's dataset).
  Batch unlabelled = batch;
  unlabelled.targets = torch::Tensor();
  EXPECT_THAT(error_of([&] { ctc_batch_loss(log_probs.detach(), lengths, unlabelled, d, 0); }),
              HasSubstr("list.txt"));
}

// In a run: an utterance whose transcript cannot fit its encoder frames stops the run with a
// DatasetError naming its file (not a loss of infinity, or NaN weights).
TEST(CtcTraining, ARunNamesAnUtteranceTooShortForItsTranscript) {
  fs::create_directories(tones_root() + "/short");
  std::string many;
  for (int i = 0; i < 40; ++i) many += i % 2 ? " low" : " high";
  std::ofstream(tones_root() + "/short/list.txt") << "../train/000.wav\thigh\n"
                                                  << "../train/001.wav\tlow\n"
                                                  << "../train/002.wav\t" << many << "\n"
                                                  << "../train/003.wav\tmid\n";
  const auto out = testing::fresh_dir("ctc_short");
  std::ostringstream log;
  TrainerOptions options;
  options.log = &log;
  Trainer trainer(ctc_config(out, {"data.train=short/list.txt", "train.batch_size=4",
                                   "train.steps=1", "data.workers=0"}),
                  options);
  const auto message = error_of<DatasetError>([&] { trainer.run(); });
  EXPECT_THAT(message, HasSubstr(tones_root() + "/train/002.wav: "));
  EXPECT_THAT(message, HasSubstr("cannot hold its transcript of 40 tokens"));
}

TEST(CtcTraining, DynamicChunkDraws) {
  const int draws = 20000;
  DynamicChunkOptions o;
  o.max_chunk = 8;
  o.full_context_prob = 0.3;
  o.random_left_chunks = true;
  const int64_t frames = 50;
  std::mt19937_64 rng(7);
  int full = 0;
  std::map<int64_t, int> sizes;
  std::set<int64_t> max_left_reached;
  std::vector<StreamingConfig> first;
  for (int i = 0; i < draws; ++i) {
    const auto c = draw_attention_chunks(o, frames, rng);
    if (i < 100) first.push_back(c);
    if (c.chunk_size == 0) {
      ++full;
      continue;
    }
    ++sizes[c.chunk_size];
    const int64_t most = (frames - 1) / c.chunk_size;
    ASSERT_GE(c.num_left_chunks, 0) << c.chunk_size;
    ASSERT_LE(c.num_left_chunks, most) << c.chunk_size;
    if (c.num_left_chunks == most) max_left_reached.insert(c.chunk_size);
  }
  EXPECT_NEAR(static_cast<double>(full) / draws, 0.3, 0.015);
  ASSERT_EQ(sizes.size(), 8u);
  EXPECT_EQ(sizes.begin()->first, 1);
  EXPECT_EQ(sizes.rbegin()->first, 8);
  for (const auto& [size, count] : sizes) {
    EXPECT_NEAR(count, (draws - full) / 8.0, 0.1 * (draws - full) / 8.0) << size;
  }
  EXPECT_EQ(max_left_reached.size(), 8u);  // every chunk size's largest left count is drawn

  // The same seed draws the same chunks.
  std::mt19937_64 again(7);
  for (const auto& c : first) {
    const auto d = draw_attention_chunks(o, frames, again);
    EXPECT_EQ(d.chunk_size, c.chunk_size);
    EXPECT_EQ(d.num_left_chunks, c.num_left_chunks);
  }
  // Without random left chunks: all of the history.
  o.random_left_chunks = false;
  for (int i = 0; i < 200; ++i) {
    const auto c = draw_attention_chunks(o, frames, rng);
    if (c.chunk_size > 0) {
      EXPECT_EQ(c.num_left_chunks, -1);
    }
  }
  // A single frame: no left chunk to choose but 0.
  o.random_left_chunks = true;
  o.full_context_prob = 0.0;
  for (int i = 0; i < 200; ++i) {
    const auto c = draw_attention_chunks(o, 1, rng);
    EXPECT_GT(c.chunk_size, 0);
    EXPECT_EQ(c.num_left_chunks, 0);
  }
  // max_chunk 0: never a chunk, whatever the probability; probability 1: never either.
  o.max_chunk = 0;
  for (int i = 0; i < 200; ++i) EXPECT_EQ(draw_attention_chunks(o, frames, rng).chunk_size, 0);
  o.max_chunk = 8;
  o.full_context_prob = 1.0;
  for (int i = 0; i < 200; ++i) EXPECT_EQ(draw_attention_chunks(o, frames, rng).chunk_size, 0);
}

TEST(CtcTraining, TranscriptLists) {
  const auto dir = testing::fresh_dir("ctc_lists");
  const decoding::Tokenizer with_unk(decoding::Units::parse_wenet(kUnits, "units.txt"),
                                     decoding::TextJoin::kWords);
  const decoding::Tokenizer without_unk(
      decoding::Units::parse_wenet("<blank> 0\nhigh 1\nlow 2\nmid 3\n", "units.txt"),
      decoding::TextJoin::kWords);
  std::ofstream(dir + "/list.txt") << "# a comment\n"
                                   << "sub/a.wav\thigh low\n"
                                   << "\n"
                                   << "   \n"
                                   << "/abs/b.wav\t  mid   mid \n"
                                   << "c.wav\t\n"
                                   << "  sub dir/d e.wav \tlow\n"
                                   << "f.wav\thigh mid\r\n";  // a line ending of Windows
  const auto d = transcript_list_dataset(dir + "/list.txt", without_unk);
  EXPECT_TRUE(d.transcribed);
  EXPECT_TRUE(d.classes.empty());
  EXPECT_EQ(d.source, dir + "/list.txt");
  ASSERT_EQ(d.examples.size(), 5u);
  EXPECT_EQ(d.examples[0].path, dir + "/sub/a.wav");
  EXPECT_EQ(d.examples[0].tokens, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(d.examples[1].path, "/abs/b.wav");
  EXPECT_EQ(d.examples[1].tokens, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(d.examples[2].path, dir + "/c.wav");
  EXPECT_TRUE(d.examples[2].tokens.empty());  // an empty transcript: silence
  EXPECT_EQ(d.examples[3].path, dir + "/sub dir/d e.wav");
  EXPECT_EQ(d.examples[3].tokens, (std::vector<int64_t>{2}));
  EXPECT_EQ(d.examples[4].path, dir + "/f.wav");
  EXPECT_EQ(d.examples[4].tokens, (std::vector<int64_t>{1, 3}));
  for (const auto& e : d.examples) EXPECT_EQ(e.label, 0);

  // A line without a tab (a "PATH LABEL" list given to CTC training).
  std::ofstream(dir + "/spaces.txt") << "# x\na.wav\thigh\nb.wav high low\n";
  EXPECT_THAT(
      error_of<DatasetError>([&] { transcript_list_dataset(dir + "/spaces.txt", with_unk); }),
      HasSubstr("spaces.txt:3: expected 'PATH<TAB>TRANSCRIPT'"));
  // A word the table lacks: an error naming the line and the word without <unk>, <unk> with it.
  std::ofstream(dir + "/loud.txt") << "a.wav\thigh\n\nb.wav\thigh loud low\n";
  const auto unknown =
      error_of<DatasetError>([&] { transcript_list_dataset(dir + "/loud.txt", without_unk); });
  EXPECT_THAT(unknown, HasSubstr("loud.txt:3"));
  EXPECT_THAT(unknown, HasSubstr("loud"));
  const auto mapped = transcript_list_dataset(dir + "/loud.txt", with_unk);
  ASSERT_EQ(mapped.examples.size(), 2u);
  EXPECT_EQ(mapped.examples[1].tokens, (std::vector<int64_t>{2, 1, 3}));
  // No examples, no file.
  std::ofstream(dir + "/empty.txt") << "# nothing\n\n";
  EXPECT_THAT(
      error_of<DatasetError>([&] { transcript_list_dataset(dir + "/empty.txt", with_unk); }),
      HasSubstr("empty.txt: no examples"));
  EXPECT_THAT(
      error_of<DatasetError>([&] { transcript_list_dataset(dir + "/missing.txt", with_unk); }),
      HasSubstr("missing.txt"));

  // The loader's batches carry the tokens: targets zero-padded to the longest, their lengths.
  EpochLoader loader(
      d,
      [](const LabelledExample& e, std::mt19937_64&) {
        return torch::ones({static_cast<int64_t>(e.path.size()), 2});
      },
      evaluation_loader_options(4, 0, true), 0);
  const auto batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(testing::values(batch->target_lengths), (std::vector<int64_t>{2, 2, 0, 1}));
  ASSERT_EQ(batch->targets.sizes(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(testing::values(batch->targets.flatten()),
            (std::vector<int64_t>{1, 2, 3, 3, 0, 0, 2, 0}));
  const auto rest = loader.next();  // the last, partial batch
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(testing::values(rest->target_lengths), (std::vector<int64_t>{2}));
  EXPECT_EQ(testing::values(rest->targets.flatten()), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(loader.next().has_value());
}

// augment.speed_perturb: each draw plays the utterance at one of the factors, as sox's `speed`
// does (the samples taken as recorded at rate x factor, resampled to the model's rate): the
// features are waveform_features of the samples at that rate, exactly; both factors are drawn;
// a tone at 1000 Hz played at 1.25 peaks where 1250 Hz does.
TEST(CtcTraining, SpeedPerturbationPlaysTheUtteranceAtADrawnSpeed) {
  const auto dir = testing::fresh_dir("speed_perturb");
  std::vector<float> tone(16000);
  for (size_t t = 0; t < tone.size(); ++t) {
    tone[t] =
        static_cast<float>(0.3 * std::sin(2.0 * M_PI * 1000.0 * static_cast<double>(t) / 16000.0));
  }
  testing::write_wav16(dir + "/tone.wav", tone, 16000);
  auto config = ctc_config(dir + "/run", {"augment.speed_perturb=[0.8, 1.25]"});
  EXPECT_EQ(config.augment.speed_perturb, (std::vector<double>{0.8, 1.25}));
  const auto load = example_loader(config.model, &config.augment);
  const FeatureExtractor extractor(audio_feature_options(config.model.features));
  const auto samples = read_audio(dir + "/tone.wav").samples;  // as 16-bit PCM stored it
  const auto slow = waveform_features(samples, 12800, extractor);
  const auto fast = waveform_features(samples, 20000, extractor);
  ASSERT_NE(slow.size(0), fast.size(0));
  std::set<int64_t> lengths;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    std::mt19937_64 rng(seed);
    const auto x = load(LabelledExample(dir + "/tone.wav", 0), rng);
    lengths.insert(x.size(0));
    const auto& want = x.size(0) == slow.size(0) ? slow : fast;
    ASSERT_EQ(x.sizes(), want.sizes()) << "seed " << seed;
    EXPECT_TRUE(torch::equal(x, want)) << "seed " << seed;
  }
  EXPECT_EQ(lengths, (std::set<int64_t>{slow.size(0), fast.size(0)}));
  // About 100 / 1.25 frames per second at 1.25, 100 / 0.8 at 0.8.
  EXPECT_NEAR(static_cast<double>(fast.size(0)), 80.0, 3.0);
  EXPECT_NEAR(static_cast<double>(slow.size(0)), 125.0, 3.0);
  std::vector<float> higher(16000);
  for (size_t t = 0; t < higher.size(); ++t) {
    higher[t] =
        static_cast<float>(0.3 * std::sin(2.0 * M_PI * 1250.0 * static_cast<double>(t) / 16000.0));
  }
  const auto at_1250 = waveform_features(torch::tensor(higher), 16000, extractor);
  EXPECT_EQ(fast.mean(0).argmax().item<int64_t>(), at_1250.mean(0).argmax().item<int64_t>());
  EXPECT_NE(fast.mean(0).argmax().item<int64_t>(),
            waveform_features(samples, 16000, extractor).mean(0).argmax().item<int64_t>());
  // Factors outside [0.5, 2] and an empty list are refused by name.
  EXPECT_THAT(
      error_of<ConfigError>([&] { ctc_config(dir + "/run", {"augment.speed_perturb=[3]"}); }),
      HasSubstr("augment.speed_perturb[0]"));
  EXPECT_THAT(
      error_of<ConfigError>([&] { ctc_config(dir + "/run", {"augment.speed_perturb=[]"}); }),
      HasSubstr("a non-empty sequence of numbers"));
}

}  // namespace test_ctc_training
}  // namespace attnzoo
