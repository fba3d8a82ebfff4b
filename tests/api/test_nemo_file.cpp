// NeMo's .nemo files run as they are (configs/nemo_source.cpp), against NeMo itself on the same
// files and WAV files (make_nemo_models.py, a CTest fixture): two random-weight models built and
// saved by NeMo's own classes, a FastConformer CTC BPE model (dw_striding x8, xscaling, untied
// position biases, BatchNorm, per-feature normalisation, a SentencePiece tokenizer in the
// archive) and a character CTC model with the other choices (striding x4, no xscaling, tied
// biases, LayerNorm, normalisation over all features). The features, the encoder's output and
// the CTC log-probabilities agree with NeMo's preprocessor, encoder and decoder, and the
// recognizer's greedy tokens and text are those of NeMo's transcribe().
#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/weights_file.h>
#include "common/reference_files.h"
#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace attnzoo {
namespace test_nemo_file {

using testing::error_of;
using ::testing::HasSubstr;
using testing::max_abs_diff;

const std::string kDir = std::string(ATTNZOO_API_REFERENCE_DIR) + "/nemo";
const testing::ReferenceFiles kFiles(kDir, "api.make_nemo_models");

const nlohmann::json& reference() { return kFiles.manifest(); }
const io::TensorDict& tensors() { return kFiles.tensors("nemo_reference.safetensors"); }

std::string nemo(const std::string& model) { return kDir + "/" + model + ".nemo"; }
std::string wav(const std::string& name) { return kDir + "/waves/" + name + ".wav"; }

TEST(NemoFile, FeaturesEncoderAndCtcAreNemos) {
  ASSERT_EQ(reference()["models"].size(), 2u);
  for (const auto& [model, expected] : reference()["models"].items()) {
    SCOPED_TRACE(model);
    const SpeechEncoder encoder(nemo(model));
    for (const auto& [name, result] : expected["waves"].items()) {
      SCOPED_TRACE(name);
      const auto prefix = model + "/" + name + "/";
      const auto features = encoder.features(wav(name)).features;
      const auto& theirs = tensors()[prefix + "features"];
      ASSERT_EQ(features.sizes(), theirs.sizes());
      const double feature_error = max_abs_diff(features, theirs);
      const auto encoded = encoder.encode(wav(name));
      ASSERT_TRUE(encoded.ok()) << encoded.error;
      const auto& encoder_out = tensors()[prefix + "encoded"];
      ASSERT_EQ(encoded.encoded.sizes(), encoder_out.sizes());
      EXPECT_EQ(encoded.encoded.size(0), result["frames"].get<int64_t>());
      const double encoder_error = max_abs_diff(encoded.encoded, encoder_out);
      const auto& log_probs = tensors()[prefix + "log_probs"];
      ASSERT_EQ(encoded.log_probs.sizes(), log_probs.sizes());
      // Where NeMo's are above -30 (the rest are e^-30 of nothing either way).
      const auto likely = log_probs > -30.0;
      const double log_prob_error =
          max_abs_diff(encoded.log_probs.masked_select(likely), log_probs.masked_select(likely));
      std::printf("%s %s: features %.2e, encoder %.2e, log-probabilities %.2e\n", model.c_str(),
                  name.c_str(), feature_error, encoder_error, log_prob_error);
      EXPECT_LE(feature_error, 1e-4);
      EXPECT_LE(encoder_error, 1e-4);
      EXPECT_LE(log_prob_error, 1e-4);
    }
  }
}

TEST(NemoFile, RecognizerGivesNemosGreedyTokensAndText) {
  int64_t tokens_seen = 0;
  for (const auto& [model, expected] : reference()["models"].items()) {
    SCOPED_TRACE(model);
    const SpeechRecognizer recognizer(nemo(model));
    for (const auto& [name, result] : expected["waves"].items()) {
      SCOPED_TRACE(name);
      const auto transcript = recognizer.transcribe(wav(name));
      ASSERT_TRUE(transcript.ok()) << transcript.error;
      const auto& best = transcript.best();
      std::vector<int64_t> ids;
      for (const auto& token : best.tokens) ids.push_back(token.id);
      EXPECT_EQ(ids, result["token_ids"].get<std::vector<int64_t>>());
      EXPECT_EQ(best.text, result["text"].get<std::string>());
      tokens_seen += static_cast<int64_t>(ids.size());
    }
  }
  EXPECT_GE(tokens_seen, 100) << "the fixtures' hypotheses are too short to tell much";
}

// The same model unpacked into a folder, and a gzipped .nemo (NeMo before 1.7), run as the
// archive does.
TEST(NemoFile, UnpackedFolderAndGzippedFileRunAsTheArchive) {
  EXPECT_TRUE(is_model_source(kDir + "/ctc_bpe_unpacked"));
  EXPECT_TRUE(is_model_source(kDir + "/ctc_char_gz.nemo"));
  for (const auto& [copy, model] :
       {std::pair{kDir + "/ctc_bpe_unpacked", std::string("ctc_bpe")},
        std::pair{kDir + "/ctc_char_gz.nemo", std::string("ctc_char")}}) {
    SCOPED_TRACE(copy);
    const SpeechRecognizer recognizer(copy);
    for (const auto& [name, result] : reference()["models"][model]["waves"].items()) {
      EXPECT_EQ(recognizer.transcribe(wav(name)).best().text, result["text"].get<std::string>());
    }
  }
}

TEST(NemoFile, DescribesWhatRuns) {
  const auto bpe = describe_model_source(nemo("ctc_bpe"));
  for (const char* line :
       {"family: conformer", "subsampling: dw_striding8", "subsampling_channels: 32",
        "position: rel_pos", "xscaling: true", "final_norm: false", "vocab_size: 33",
        "kind: nemo_mel", "frame_length_ms: 25.0", "n_fft: 512", "normalize: per_feature",
        "text: sentencepiece", "_tokenizer.model", "<blank>]", "search: greedy", "format: nemo",
        "ctc_bpe.nemo#model_weights.ckpt", "EncDecCTCModelBPE"}) {
    EXPECT_THAT(bpe, HasSubstr(line));
  }
  const auto chars = describe_model_source(nemo("ctc_char"));
  for (const char* line : {"subsampling: striding4", "xscaling: false", "conv_norm: layer_norm",
                           "normalize: all_features", "text: characters", "▁", "EncDecCTCModel"}) {
    EXPECT_THAT(chars, HasSubstr(line));
  }
  // The weights read in place from the archive, through the checkpoint reader.
  const auto weights = io::load_weights_file(nemo("ctc_bpe"));
  EXPECT_EQ(weights.format, "torch.save zip in a tar");
  EXPECT_TRUE(weights.tensors.contains("encoder.pre_encode.out.weight"));
  EXPECT_EQ(io::load_weights_file(kDir + "/ctc_char_gz.nemo").format,
            "torch.save zip in a gzipped tar");
}

// A copy of the unpacked BPE model with model_config.yaml edited (`from` replaced by `to`).
std::string edited(const std::string& label, const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  const auto source = kDir + "/ctc_bpe_unpacked";
  const auto dir = kDir + "/edited_" + label;
  fs::remove_all(dir);
  fs::copy(source, dir);
  EXPECT_TRUE(
      testing::copy_edited(source + "/model_config.yaml", dir + "/model_config.yaml", from, to))
      << from;
  return dir;
}

std::string load_error(const std::string& dir) {
  return error_of<Error>([&] { resolve_model_config(dir, {}); });
}

TEST(NemoFile, RefusesWhatItDoesNotRunNamingTheKey) {
  const struct {
    const char* label;
    std::string from, to, message;
  } cases[] = {
      {"rnnt", "target: nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE",
       "target: nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel",
       "target: 'nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel' is not a model "
       "attnzoo runs"},
      {"tts", "target: nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE",
       "target: nemo.collections.tts.models.FastPitchModel", "FastPitchModel' is not a model"},
      {"local_attention", "self_attention_model: rel_pos",
       "self_attention_model: rel_pos_local_attn",
       "encoder.self_attention_model: 'rel_pos_local_attn' is not supported"},
      {"limited_context", "att_context_size:\n  - -1\n  - -1", "att_context_size:\n  - 70\n  - 13",
       "encoder.att_context_size: limited attention"},
      {"chunked", "att_context_style: regular", "att_context_style: chunked_limited",
       "encoder.att_context_style: 'chunked_limited' is not supported"},
      {"vggnet", "subsampling: dw_striding", "subsampling: vggnet",
       "encoder.subsampling: 'vggnet' with subsampling_factor 8 is not supported"},
      {"unknown_key", "xscaling: true", "xscaling: true\n  quantum_heads: 3",
       "encoder.quantum_heads: is an option attnzoo does not implement"},
      {"group_norm", "conv_norm_type: batch_norm", "conv_norm_type: group_norm4",
       "encoder.conv_norm_type: 'group_norm4' is not supported"},
      {"wpe", "type: bpe", "type: wpe", "tokenizer.type: 'wpe' is not supported"},
      {"resolver", "sample_rate: 16000\ntrain_ds", "sample_rate: ${oc.env:RATE}\ntrain_ds",
       "oc.env"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const auto dir = edited(c.label, c.from, c.to);
    const auto message = load_error(dir);
    EXPECT_THAT(message, HasSubstr(c.message));
    EXPECT_THAT(message, HasSubstr("model_config.yaml"));
  }
  // A tar without model_config.yaml is not a NeMo model; a missing entry is named.
  EXPECT_FALSE(is_model_source(kDir + "/waves/speech.wav"));
  EXPECT_THAT(error_of<Error>([&] { io::load_weights_file(nemo("ctc_bpe") + "#missing.ckpt"); }),
              HasSubstr("without 'missing.ckpt'"));
}

}  // namespace test_nemo_file
}  // namespace attnzoo
