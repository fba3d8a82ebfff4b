// ESPnet experiment folders run as they are (configs/espnet_source.cpp), against ESPnet's own
// Speech2Text on the same folders and WAV files (make_espnet_folder.py, a CTest fixture): two
// random-weight conformers written by ESPnet's training code, one of characters with its stats
// and an inline token list, one of BPE pieces with a decoder (not loaded) and ESPnet's default
// frontend sizes. The features, the normalised features, the encoder's output and the CTC
// log-probabilities agree with ESPnet's; the recognizer gives ESPnet's tokens and text, and the
// CTC log-probability of ESPnet's hypothesis under our log-probabilities is ESPnet's score
// (Speech2Text's CTC-only score is that exact probability; a frame-synchronous beam's own score is
// a lower bound of it, so the beam's score is compared to it only as a bound).
#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace attnzoo {
namespace test_espnet_folder {

using testing::error_of;
using ::testing::HasSubstr;
using testing::max_abs_diff;

const std::string kDir = std::string(ATTNZOO_API_REFERENCE_DIR) + "/espnet";

const nlohmann::json& reference() {
  static const nlohmann::json json = [] {
    std::ifstream in(kDir + "/espnet_reference.json");
    return nlohmann::json::parse(in);
  }();
  return json;
}

const io::TensorDict& tensors() {
  static const auto loaded = io::load_safetensors(kDir + "/espnet_reference.safetensors").tensors;
  return loaded;
}

std::string folder(const std::string& model) { return kDir + "/recipe/exp/" + model; }
std::string wav(const std::string& name) { return kDir + "/waves/" + name + ".wav"; }

// The text as ESPnet's char tokenizer leaves it may start or end with a space; attnzoo trims.
std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(' ') - first + 1);
}

// log P(ids | log_probs) summed over every CTC alignment.
double ctc_log_probability(const torch::Tensor& log_probs, const std::vector<int64_t>& ids) {
  if (ids.empty()) return log_probs.select(1, 0).sum().item<double>();
  const auto targets = torch::tensor(ids, torch::kLong).unsqueeze(0);
  const auto loss = torch::ctc_loss(
      log_probs.to(torch::kDouble).unsqueeze(1), targets, std::vector<int64_t>{log_probs.size(0)},
      std::vector<int64_t>{static_cast<int64_t>(ids.size())}, 0, at::Reduction::Sum);
  return -loss.item<double>();
}

TEST(EspnetFolder, FeaturesEncoderAndCtcAreEspnets) {
  ASSERT_EQ(reference()["models"].size(), 2u);
  for (const auto& [model, expected] : reference()["models"].items()) {
    SCOPED_TRACE(model);
    const SpeechEncoder encoder(folder(model));
    for (const auto& [name, result] : expected["results"].items()) {
      SCOPED_TRACE(name);
      const auto prefix = model + "/" + name + "/";
      const auto features = encoder.features(wav(name)).features;
      const auto& feats = tensors()[prefix + "feats"];
      ASSERT_EQ(features.sizes(), feats.sizes());
      // ESPnet's frontend runs in float32: a bin far below its frame's loudest holds mostly the
      // STFT's float32 rounding, whose log moves by up to a few 1e-3 (pure tones leave most bins
      // so). Within e^8 of the frame's loudest bin the two agree to 1e-3; tests/preprocess
      // (StftLogMel) holds ours to the float64 computation within 1e-5.
      const auto difference = (features - feats).abs();
      const auto strong = feats > std::get<0>(feats.max(1, true)) - 8.0;
      EXPECT_LE(difference.masked_select(strong).max().item<double>(), 1e-3);
      EXPECT_LE(difference.max().item<double>(), 5e-2);
      const auto encoded = encoder.encode(wav(name));
      ASSERT_TRUE(encoded.ok()) << encoded.error;
      const auto& encoder_out = tensors()[prefix + "encoder_out"];
      ASSERT_EQ(encoded.encoded.sizes(), encoder_out.sizes());
      EXPECT_EQ(encoded.encoded.size(0), expected["results"][name]["frames"].get<int64_t>());
      EXPECT_LE(max_abs_diff(encoded.encoded, encoder_out), 1e-3);
      const auto& log_probs = tensors()[prefix + "ctc_log_probs"];
      // Compared where ESPnet's are above -30 (the rest are e^-30 of nothing either way). The
      // fixture's CTC head is scaled up 20 times, and the encoder's differences with it.
      const auto likely = log_probs > -30.0;
      EXPECT_LE(
          max_abs_diff(encoded.log_probs.masked_select(likely), log_probs.masked_select(likely)),
          1e-2);
      const auto ids = result["token_ids"].get<std::vector<int64_t>>();
      EXPECT_NEAR(ctc_log_probability(encoded.log_probs, ids), result["score"].get<double>(), 1e-2);
    }
  }
}

// Speech2Text's CTC-only search is label-synchronous (a beam of prefixes per output length, each
// scored with its exact prefix probability, stopped by end detection); attnzoo's is
// frame-synchronous (decoding/ctc_prefix_beam_search.h). Both look for the most probable token
// sequence. Where they agree the tokens and the text are ESPnet's; where they do not, attnzoo's
// answer is the more probable one under the same log-probabilities, never the less.
TEST(EspnetFolder, RecognizerFindsEspnetsAnswerOrAMoreProbableOne) {
  int64_t results = 0, equal = 0, tokens_seen = 0;
  for (const auto& [model, expected] : reference()["models"].items()) {
    SCOPED_TRACE(model);
    const SpeechRecognizer recognizer(folder(model));
    const SpeechEncoder encoder(folder(model));
    for (const auto& [name, result] : expected["results"].items()) {
      SCOPED_TRACE(name);
      const auto transcript = recognizer.transcribe(wav(name));
      ASSERT_TRUE(transcript.ok()) << transcript.error;
      const auto& best = transcript.best();
      std::vector<int64_t> ids;
      for (const auto& token : best.tokens) ids.push_back(token.id);
      const auto theirs = result["token_ids"].get<std::vector<int64_t>>();
      const auto log_probs = encoder.encode(wav(name)).log_probs;
      const double ours_exact = ctc_log_probability(log_probs, ids);
      const double theirs_exact = ctc_log_probability(log_probs, theirs);
      std::printf("%s %s: %s (%.4f) | ESPnet %s (%.4f)\n", model.c_str(), name.c_str(),
                  best.text.c_str(), ours_exact, result["text"].get<std::string>().c_str(),
                  theirs_exact);
      EXPECT_GE(ours_exact, theirs_exact - 1e-3);
      // A beam's own score counts the alignments it kept: at most the exact probability.
      EXPECT_LE(best.score, ours_exact + 1e-3);
      ++results;
      tokens_seen += static_cast<int64_t>(theirs.size());
      if (ids == theirs) {
        ++equal;
        EXPECT_EQ(best.text, trimmed(result["text"].get<std::string>()));
      }
    }
  }
  std::printf("ESPnet's tokens in %ld of %ld results\n", long(equal), long(results));
  EXPECT_GE(2 * equal, results);
  EXPECT_GE(tokens_seen, 8) << "the fixtures' hypotheses are too short to tell much";
}

// espnet_model_zoo's zip, as ESPnet's pack wrote it: unpacked once into the cache
// ($XDG_CACHE_HOME/attnzoo/espnet/), then the same model as the folder.
TEST(EspnetFolder, ZooArchiveRunsAsItsFolder) {
  testing::Scratch scratch;
  ::setenv("XDG_CACHE_HOME", scratch.path("cache").c_str(), 1);
  const auto archive = kDir + "/asr_train_char.zip";
  EXPECT_TRUE(is_model_source(archive));
  const SpeechRecognizer zipped(archive);
  const SpeechRecognizer folder_model(folder("asr_train_char"));
  for (const auto& [name, result] : reference()["models"]["asr_train_char"]["results"].items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(zipped.transcribe(wav(name)).best().text,
              folder_model.transcribe(wav(name)).best().text);
  }
  const auto described = describe_model_source(archive);
  EXPECT_THAT(described, HasSubstr(scratch.path("cache") + "/attnzoo/espnet/asr_train_char-"));
  EXPECT_THAT(described, HasSubstr("asr_stats_char/train/feats_stats.npz"));
  // Unpacked once: the second reading finds the folder.
  EXPECT_EQ(describe_model_source(archive), described);
  // An entry climbing out of the folder is refused, and nothing is written outside it.
  EXPECT_THAT(error_of<Error>([&] { resolve_model_config(kDir + "/hostile_slip.zip", {}); }),
              HasSubstr("entry '../outside.txt' would be written outside the archive's folder"));
  EXPECT_FALSE(std::filesystem::exists(scratch.path("cache") + "/attnzoo/espnet/outside.txt"));
  ::unsetenv("XDG_CACHE_HOME");
}

TEST(EspnetFolder, DescribesWhatRuns) {
  const auto chars = describe_model_source(folder("asr_train_char"));
  for (const char* line :
       {"family: conformer", "position: rel_pos", "norm_eps: 1.0e-12", "global_cmvn: true",
        "kind: stft_log_mel", "n_fft: 512", "frame_length_ms: 25.0", "frame_shift_ms: 10.0",
        "- <space>", "text: characters", "format: espnet", "beam_size: 20"}) {
    EXPECT_THAT(chars, HasSubstr(line));
  }
  // The stats file is the recipe's path, found from the experiment's folder.
  EXPECT_THAT(chars, HasSubstr("exp/asr_stats_char/train/feats_stats.npz"));
  EXPECT_THAT(chars, HasSubstr("asr_train_char/valid.acc.ave.pth"));
  const auto bpe = describe_model_source(folder("asr_train_bpe"));
  EXPECT_THAT(bpe, HasSubstr("text: sentencepiece"));
  EXPECT_THAT(bpe, HasSubstr("bpe.model"));
  EXPECT_THAT(bpe, HasSubstr("frame_shift_ms: 8.0"));
}

// A copy of the char model's folder (config.yaml edited: `from` replaced by `to`) beside the
// original, so that the recipe's relative paths still resolve.
std::string edited_folder(const std::string& name, const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  const auto dir = kDir + "/recipe/exp/edited_" + name;
  fs::create_directories(dir);
  fs::copy_file(folder("asr_train_char") + "/valid.acc.ave.pth", dir + "/valid.acc.ave.pth",
                fs::copy_options::overwrite_existing);
  EXPECT_TRUE(testing::copy_edited(folder("asr_train_char") + "/config.yaml", dir + "/config.yaml",
                                   from, to))
      << from;
  return dir;
}

TEST(EspnetFolder, WhatItCannotHonourIsRefusedNamingFileKeyAndValue) {
  const auto check = [&](const std::string& name, const std::string& from, const std::string& to,
                         const std::string& expected) {
    const auto dir = edited_folder(name, from, to);
    const auto message = error_of<Error>([&] { resolve_model_config(dir, {}); });
    EXPECT_THAT(message, HasSubstr(dir + "/config.yaml")) << name;
    EXPECT_THAT(message, HasSubstr(expected)) << name;
    std::filesystem::remove_all(dir);
  };
  check("latest", "rel_pos_type: latest", "rel_pos_type: legacy",
        "encoder_conf.rel_pos_type: 'legacy' (ESPnet's default) is not supported");
  check("activation", "activation_type: swish", "activation_type: relu",
        "encoder_conf.activation_type: 'relu' is not supported");
  check("window", "n_fft: 512", "n_fft: 512\n    window: hamming",
        "frontend_conf.window: 'hamming' is not supported");
  check("encoder", "encoder: conformer", "encoder: e_branchformer",
        "encoder: 'e_branchformer' is not supported");
  check("normalize", "normalize: global_mvn", "normalize: utterance_mvn",
        "normalize: 'utterance_mvn' is not supported");
}

}  // namespace test_espnet_folder
}  // namespace attnzoo
