// NeMo's .nemo files run as they are (configs/nemo_source.cpp), against NeMo itself on the same
// files and WAV files (make_nemo_models.py, a CTest fixture): eleven random-weight models built
// and saved by NeMo's own classes (CTC BPE, character and WordPiece models with NeMo's sets of
// encoder choices, local attention with and without global tokens, vggnet subsampling; RNN-T,
// TDT, and RNN-T/CTC and TDT/CTC hybrids; the cache-aware streaming hybrid). The features, the
// encoder's output and the CTC log-probabilities agree with NeMo's preprocessor, encoder and
// decoder; the parameter counts are NeMo's; the greedy CTC and transducer searches give NeMo's
// tokens, frames, durations, scores and text, the beam search NeMo's hypotheses in NeMo's order,
// and live streaming NeMo's cache-aware streaming chunk by chunk.
#include <attnzoo/api/speech_encoder.h>
#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/configs/model_source.h>
#include <attnzoo/configs/model_stats.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/inflated_files.h>
#include <attnzoo/io/weights_file.h>
#include <attnzoo/models/transducer_beam_search.h>
#include <attnzoo/preprocess/audio/read.h>
#include "common/reference_files.h"
#include "common/test_util.h"
#include "transcript_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace attnzoo {
namespace test_nemo_file {

using testing::error_of;
using ::testing::HasSubstr;
using testing::ids_of;
using testing::max_abs_diff;

const std::string kDir = std::string(ATTNZOO_API_REFERENCE_DIR) + "/nemo";
const testing::ReferenceFiles kFiles(kDir, "api.make_nemo_models");

const nlohmann::json& reference() { return kFiles.manifest(); }
const io::TensorDict& tensors() { return kFiles.tensors("nemo_reference.safetensors"); }

std::string nemo(const std::string& model) { return kDir + "/" + model + ".nemo"; }
std::string wav(const std::string& name) { return kDir + "/waves/" + name + ".wav"; }

TEST(NemoFile, FeaturesEncoderAndCtcAreNemos) {
  ASSERT_EQ(reference()["models"].size(), 11u);
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
      double log_prob_error = 0.0;
      if (result.contains("ctc")) {
        const auto& log_probs = tensors()[prefix + "log_probs"];
        ASSERT_EQ(encoded.log_probs.sizes(), log_probs.sizes());
        // Where NeMo's are above -30 (the rest are e^-30 of nothing either way).
        const auto likely = log_probs > -30.0;
        log_prob_error =
            max_abs_diff(encoded.log_probs.masked_select(likely), log_probs.masked_select(likely));
      } else {
        EXPECT_FALSE(encoded.log_probs.defined()) << "a transducer-only model has no CTC head";
      }
      std::printf("%s %s: features %.2e, encoder %.2e, log-probabilities %.2e\n", model.c_str(),
                  name.c_str(), feature_error, encoder_error, log_prob_error);
      EXPECT_LE(feature_error, 1e-4);
      EXPECT_LE(encoder_error, 1e-4);
      // The heads are scaled to follow the input (sensitive_head), which multiplies the encoder's
      // rounding: 8e-5 at most on an AVX2 EPYC, 1.1e-4 on an AVX-512 Xeon. A head may move a logit
      // by at most its gain times the encoder's difference, and a log-probability by twice that:
      // the bound where that is larger (vggnet_ctc_bpe's head has the largest gain, 1254).
      if (result.contains("ctc")) {
        const double gain = expected["ctc_head_gain"].get<double>();
        EXPECT_LE(log_prob_error, std::max(2e-4, 2.0 * gain * encoder_error));
      }
    }
  }
}

// What `attnzoo models` counts for each file, and what the model built from it holds, is what NeMo
// counts: every subsampling, attention and head choice of the fixtures, vggnet's pools and the
// global tokens' own projections included.
TEST(NemoFile, ParameterCountsAreNemos) {
  for (const auto& [model, expected] : reference()["models"].items()) {
    SCOPED_TRACE(model);
    const auto config = resolve_model_config(nemo(model), {});
    // ctc_char ties its position biases across the blocks (untie_biases: false): NeMo holds one
    // pair, each of attnzoo's two blocks a copy (2 · 64 values more).
    const int64_t copies = model == "ctc_char" ? 2 * 64 : 0;
    EXPECT_EQ(model_stats(config).parameters, expected["parameters"].get<int64_t>() + copies);
  }
}

// CTC heads (of the CTC models, and a hybrid's with decoding.head ctc): NeMo's greedy CTC.
TEST(NemoFile, CtcHeadsGiveNemosGreedyTokensAndText) {
  int64_t tokens_seen = 0;
  for (const auto& [model, expected] : reference()["models"].items()) {
    const auto& first = expected["waves"].begin().value();
    if (!first.contains("ctc")) continue;
    SCOPED_TRACE(model);
    SpeechRecognizerOptions options;
    options.encoder.overrides = {"decoding.head=ctc"};
    const SpeechRecognizer recognizer(nemo(model), options);
    for (const auto& [name, result] : expected["waves"].items()) {
      SCOPED_TRACE(name);
      const auto transcript = recognizer.transcribe(wav(name));
      ASSERT_TRUE(transcript.ok()) << transcript.error;
      const auto& best = transcript.best();
      EXPECT_EQ(ids_of(best), result["ctc"]["token_ids"].get<std::vector<int64_t>>());
      EXPECT_EQ(best.text, result["ctc"]["text"].get<std::string>());
      tokens_seen += static_cast<int64_t>(best.tokens.size());
    }
  }
  EXPECT_GE(tokens_seen, 150) << "the fixtures' hypotheses are too short to tell much";
}

// Transducers (RNN-T, TDT, a hybrid's default head): NeMo's greedy search token for token, with
// each token's frame, its TDT duration and NeMo's score; NeMo's batched greedy search, which its
// configs choose, gives the same tokens.
TEST(NemoFile, TransducersGiveNemosGreedyTokensFramesDurationsAndScores) {
  int64_t tokens_seen = 0, repeated_frames = 0, tdt_tokens = 0;
  for (const auto& [model, expected] : reference()["models"].items()) {
    const auto& first = expected["waves"].begin().value();
    if (!first.contains("transducer")) continue;
    SCOPED_TRACE(model);
    const SpeechRecognizer recognizer(nemo(model));
    EXPECT_EQ(recognizer.config().decoding.head, decoding::DecodingHead::kTransducer);
    for (const auto& [name, result] : expected["waves"].items()) {
      SCOPED_TRACE(name);
      const auto& theirs = result["transducer"];
      const auto transcript = recognizer.transcribe(wav(name));
      ASSERT_TRUE(transcript.ok()) << transcript.error;
      const auto& best = transcript.best();
      const auto ids = theirs["token_ids"].get<std::vector<int64_t>>();
      EXPECT_EQ(ids_of(best), ids);
      EXPECT_EQ(theirs["batched_token_ids"].get<std::vector<int64_t>>(), ids);
      EXPECT_EQ(best.text, theirs["text"].get<std::string>());
      EXPECT_EQ(best.text, theirs["batched_text"].get<std::string>());
      // A sum over the tokens of float32 values, each within a few 1e-6 of NeMo's (the encoder's
      // output agrees within 3e-6, and the joints are scaled up): 1e-4, and 8e-6 more per token
      // (at most 2e-6 per token on an AVX2 EPYC, 7.4e-6 on an AVX-512 Xeon).
      EXPECT_NEAR(best.score, theirs["score"].get<double>(),
                  1e-4 + 8e-6 * static_cast<double>(ids.size()));
      const auto frames = theirs["token_frames"].get<std::vector<int64_t>>();
      const auto durations = theirs.contains("token_durations")
                                 ? theirs["token_durations"].get<std::vector<int64_t>>()
                                 : std::vector<int64_t>();
      ASSERT_EQ(best.tokens.size(), frames.size());
      for (size_t i = 0; i < frames.size(); ++i) {
        EXPECT_EQ(best.tokens[i].start_frame, frames[i]) << "token " << i;
        if (!durations.empty()) {
          EXPECT_EQ(best.tokens[i].end_frame - best.tokens[i].start_frame + 1,
                    std::max<int64_t>(durations[i], 1))
              << "token " << i;
        }
        if (i > 0 && frames[i] == frames[i - 1]) ++repeated_frames;
      }
      tokens_seen += static_cast<int64_t>(ids.size());
      tdt_tokens += static_cast<int64_t>(durations.size());
    }
  }
  std::printf("%ld transducer tokens, %ld on the frame of the one before, %ld TDT tokens\n",
              long(tokens_seen), long(repeated_frames), long(tdt_tokens));
  EXPECT_GE(tokens_seen, 300);
  EXPECT_GE(repeated_frames, 50) << "several tokens per frame must be exercised";
  EXPECT_GE(tdt_tokens, 30);
}

// NeMo's `strategy: beam` (BeamRNNTInfer and BeamTDTInfer, search_type default) with beam_size 4
// and score_norm, on the RNN-T and TDT hybrids (whose joints make_nemo_models.py makes as
// confident as a trained one's: NeMo's search does not end a frame otherwise): every hypothesis
// NeMo keeps, in NeMo's order, with its tokens, their frames (NeMo's TDT timestamp is the frame
// plus the duration) and its score. Then through the recognizer: decoding.transducer_search beam
// gives NeMo's best hypothesis and text.
TEST(NemoFile, TransducerBeamKeepsNemosHypothesesInNemosOrder) {
  int64_t hypotheses_seen = 0, tokens_seen = 0, models = 0, tdt = 0;
  double score_error = 0.0;
  for (const auto& [model, expected] : reference()["models"].items()) {
    const auto& first = expected["waves"].begin().value();
    if (!first.contains("transducer") || !first["transducer"].contains("beam")) continue;
    SCOPED_TRACE(model);
    ++models;
    const SpeechEncoder encoder(nemo(model));
    auto* transducer = encoder.transducer();
    ASSERT_NE(transducer, nullptr);
    const bool is_tdt = !transducer->options.durations().empty();
    SpeechRecognizerOptions options;
    options.encoder.overrides = {"decoding.transducer_search=beam", "decoding.beam_size=4",
                                 "decoding.nbest=4"};
    const SpeechRecognizer recognizer(nemo(model), options);
    for (const auto& [name, result] : expected["waves"].items()) {
      SCOPED_TRACE(name);
      const auto& theirs = result["transducer"]["beam"];
      const auto encoded = encoder.encode(wav(name));
      ASSERT_TRUE(encoded.ok()) << encoded.error;
      TransducerBeamOptions beam;
      beam.beam_size = 4;
      TransducerBeamSearch search(*transducer, beam);
      {
        torch::InferenceMode inference;
        search.advance(encoded.encoded);
      }
      EXPECT_EQ(search.bounded_frames(), 0);
      const auto ours = search.hypotheses();
      ASSERT_EQ(ours.size(), theirs.size());
      for (size_t h = 0; h < ours.size(); ++h) {
        SCOPED_TRACE("hypothesis " + std::to_string(h));
        const auto ids = theirs[h]["token_ids"].get<std::vector<int64_t>>();
        const auto frames = theirs[h]["token_frames"].get<std::vector<int64_t>>();
        ASSERT_EQ(ours[h].tokens.size(), ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
          EXPECT_EQ(ours[h].tokens[i].id, ids[i]) << "token " << i;
          EXPECT_EQ(ours[h].tokens[i].frame + ours[h].tokens[i].duration, frames[i])
              << "token " << i;
        }
        EXPECT_NEAR(ours[h].score, theirs[h]["score"].get<double>(),
                    1e-4 + 2e-6 * static_cast<double>(ids.size()));
        score_error =
            std::max(score_error, std::abs(ours[h].score - theirs[h]["score"].get<double>()));
        tokens_seen += static_cast<int64_t>(ids.size());
      }
      hypotheses_seen += static_cast<int64_t>(ours.size());
      const auto transcript = recognizer.transcribe(wav(name));
      ASSERT_TRUE(transcript.ok()) << transcript.error;
      ASSERT_EQ(transcript.hypotheses.size(), std::min<size_t>(4, theirs.size()));
      EXPECT_EQ(ids_of(transcript.best()), theirs[0]["token_ids"].get<std::vector<int64_t>>());
      EXPECT_EQ(transcript.best().text, theirs[0]["text"].get<std::string>());
    }
    tdt += is_tdt;
  }
  std::printf("%ld beam hypotheses, %ld tokens, scores within %.2e\n", long(hypotheses_seen),
              long(tokens_seen), score_error);
  EXPECT_EQ(models, 2);
  EXPECT_EQ(tdt, 1);
  EXPECT_GE(hypotheses_seen, 30);
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
    const auto inflated = io::inflation_count();
    const SpeechRecognizer recognizer(copy);
    // A gzipped file is inflated once for the whole load (its detection, config and weights read
    // it one after another), and nothing of it is kept once loaded: a second load inflates again.
    const bool gzipped = copy.size() > 5 && copy.compare(copy.size() - 5, 5, ".nemo") == 0;
    EXPECT_EQ(io::inflation_count() - inflated, gzipped ? 1u : 0u);
    if (gzipped) {
      const SpeechRecognizer again(copy);
      EXPECT_EQ(io::inflation_count() - inflated, 2u);
    }
    for (const auto& [name, result] : reference()["models"][model]["waves"].items()) {
      EXPECT_EQ(recognizer.transcribe(wav(name)).best().text,
                result["ctc"]["text"].get<std::string>());
    }
  }
}

// A copy of an unpacked model (the CTC BPE model, or the TDT hybrid) with model_config.yaml
// edited (`from` replaced by `to`).
std::string edited(const std::string& label, const std::string& from, const std::string& to,
                   const std::string& model = "ctc_bpe") {
  namespace fs = std::filesystem;
  const auto source = kDir + "/" + model + "_unpacked";
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
  const auto rnnt = describe_model_source(nemo("rnnt_bpe"));
  for (const char* line :
       {"ctc_head: false", "transducer:", "pred_hidden: 48", "pred_layers: 1", "joint_hidden: 40",
        "activation: relu", "head: transducer", "max_symbols: 10", "EncDecRNNTBPEModel"}) {
    EXPECT_THAT(rnnt, HasSubstr(line));
  }
  const auto tdt = describe_model_source(nemo("tdt_bpe"));
  for (const char* line : {"durations: [0, 1, 2, 3, 4]", "bias: false", "xscaling: false"}) {
    EXPECT_THAT(tdt, HasSubstr(line));
  }
  EXPECT_THAT(rnnt, HasSubstr("bias: true"));
  const auto hybrid = describe_model_source(nemo("hybrid_bpe"));
  EXPECT_THAT(hybrid, HasSubstr("head: transducer"));
  EXPECT_THAT(hybrid, ::testing::Not(HasSubstr("ctc_head: false")));
  // A hybrid decodes with either head; a CTC-only model has no transducer to choose.
  EXPECT_EQ(resolve_model_config(nemo("hybrid_bpe"), {"decoding.head=ctc"}).decoding.head,
            decoding::DecodingHead::kCtc);
  EXPECT_THAT(
      error_of<Error>([&] { resolve_model_config(nemo("ctc_bpe"), {"decoding.head=transducer"}); }),
      HasSubstr("the model has no transducer head"));
  EXPECT_THAT(
      error_of<Error>([&] { resolve_model_config(nemo("rnnt_bpe"), {"decoding.head=ctc"}); }),
      HasSubstr("the model has no CTC head"));
  // NeMo's transducer strategies: greedy, or its beam search with decoding.beam's settings.
  const auto greedy = resolve_model_config(nemo("hybrid_tdt_bpe"), {}).decoding;
  EXPECT_EQ(greedy.transducer_search, decoding::TransducerSearch::kGreedy);
  const auto beam =
      resolve_model_config(edited("beam", "strategy: greedy_batch",
                                  "strategy: malsd_batch\n  beam:\n    beam_size: 3\n"
                                  "    return_best_hypothesis: false\n    score_norm: false",
                                  "hybrid_tdt_bpe"),
                           {})
          .decoding;
  EXPECT_EQ(beam.transducer_search, decoding::TransducerSearch::kBeam);
  EXPECT_EQ(beam.beam.beam_size, 3);
  EXPECT_EQ(beam.beam.nbest, 3);
  EXPECT_FALSE(beam.score_norm);
  EXPECT_THAT(load_error(edited("strategy", "strategy: greedy_batch", "strategy: wfst_batch",
                                "hybrid_tdt_bpe")),
              HasSubstr("decoding.strategy: 'wfst_batch' is not a transducer strategy"));
  // The weights read in place from the archive, through the checkpoint reader.
  const auto weights = io::load_weights_file(nemo("ctc_bpe"));
  EXPECT_EQ(weights.format, "torch.save zip in a tar");
  EXPECT_TRUE(weights.tensors.contains("encoder.pre_encode.out.weight"));
  EXPECT_EQ(io::load_weights_file(kDir + "/ctc_char_gz.nemo").format,
            "torch.save zip in a gzipped tar");
}

// NeMo's cache-aware streaming (CacheAwareStreamingAudioBuffer and conformer_stream_step): its
// chunks of att_context_size[1] + 1 encoder frames are ours, and frame for frame equal; its
// streaming greedy search, the hypothesis carried from chunk to chunk, gives the tokens of our
// live recognizer fed the audio in blocks of 100 ms.
TEST(NemoFile, CacheAwareStreamingIsNemosChunkByChunk) {
  const std::string model = "streaming_hybrid_bpe";
  const auto& expected = reference()["models"][model];
  const auto config = resolve_model_config(nemo(model), {});
  // att_context_size [[14, 6], [14, 1], [14, 0]]: the first, chunks of 7 with 2 chunks of history.
  EXPECT_EQ(config.streaming.chunk_size, 7);
  EXPECT_EQ(config.streaming.num_left_chunks, 2);
  SpeechEncoderOptions streamed_options;
  streamed_options.stream_chunk = config.streaming.chunk_size;
  const SpeechEncoder offline(nemo(model)), streamed(nemo(model), streamed_options);
  const SpeechRecognizer recognizer(nemo(model));
  int64_t chunks = 0, tokens = 0;
  double worst = 0.0;
  for (const auto& [name, result] : expected["waves"].items()) {
    SCOPED_TRACE(name);
    const auto& theirs = result["streaming"];
    EXPECT_EQ(theirs["chunk_size"].get<int64_t>(), config.streaming.chunk_size);
    const auto steps = theirs["encoded_steps"].get<std::vector<int64_t>>();
    const auto& nemo_streamed = tensors()[model + "/" + name + "/streamed"];
    const auto ours = streamed.encode(wav(name));
    ASSERT_TRUE(ours.ok()) << ours.error;
    ASSERT_EQ(ours.encoded.sizes(), nemo_streamed.sizes());
    int64_t start = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      SCOPED_TRACE(i);
      // Every step but the last gives one whole chunk: NeMo's chunks are ours.
      if (i + 1 < steps.size()) EXPECT_EQ(steps[i], config.streaming.chunk_size);
      const double error = max_abs_diff(ours.encoded.narrow(0, start, steps[i]),
                                        nemo_streamed.narrow(0, start, steps[i]));
      EXPECT_LE(error, 1e-4);
      worst = std::max(worst, error);
      start += steps[i];
      ++chunks;
    }
    EXPECT_EQ(start, ours.encoded.size(0));
    // NeMo's streaming is its offline forward under the chunk mask, and so is ours.
    EXPECT_LE(max_abs_diff(offline.encode(wav(name)).encoded, nemo_streamed), 1e-4);

    const auto audio = read_audio(wav(name));
    auto live = recognizer.stream(audio.info.sample_rate);
    const int64_t block = audio.info.sample_rate / 10;
    for (int64_t at = 0; at < audio.samples.size(0); at += block) {
      live.push(audio.samples.narrow(0, at, std::min(block, audio.samples.size(0) - at)));
    }
    const auto final = live.finish();
    ASSERT_TRUE(final.ok()) << final.error;
    const auto ids = theirs["token_ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(ids_of(final.best()), ids);
    EXPECT_EQ(final.best().text, theirs["text"].get<std::string>());
    tokens += static_cast<int64_t>(ids.size());
  }
  std::printf("%lld streamed chunks within %.2e of NeMo's, %lld streaming tokens\n",
              static_cast<long long>(chunks), worst, static_cast<long long>(tokens));
  EXPECT_GE(chunks, 12);
  EXPECT_GE(tokens, 30) << "the streaming hypotheses are too short to tell much";
  // The chunks must tile the left context: NeMo's cache would not line up with its own mask.
  EXPECT_THAT(load_error(edited("uneven_chunks", "  - - 14\n    - 6", "  - - 15\n    - 6", model)),
              HasSubstr("encoder.att_context_size: chunked_limited needs a left context divisible "
                        "by the chunk (right + 1 = 7), got 15"));
}

// A wpe model's WordPiece tokens: text cut into NeMo's ids, and tokens joined into NeMo's text (its
// ASR decoding's join, BERT's special tokens kept). The greedy transcripts are checked with the
// other CTC models'.
TEST(NemoFile, WordPieceTokensAreNemos) {
  const auto& expected = reference()["models"]["ctc_wpe"]["wordpiece"];
  const SpeechRecognizer recognizer(nemo("ctc_wpe"));
  EXPECT_EQ(recognizer.config().decoding.text, decoding::TextJoin::kWordPiece);
  const auto& tokenizer = recognizer.tokenizer();
  int64_t unknown = 0, continued = 0;
  for (const auto& item : expected["texts"]) {
    const auto text = item["text"].get<std::string>();
    SCOPED_TRACE(text);
    const auto ids = item["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenizer.encode(text), ids);
    for (const auto id : ids) {
      const auto& token = tokenizer.units().token(id);
      unknown += token == "[UNK]";
      continued += token.rfind("##", 0) == 0;
    }
  }
  EXPECT_GE(unknown, 2);
  EXPECT_GE(continued, 6);
  for (const auto& item : expected["joins"]) {
    const auto tokens = item["tokens"].get<std::vector<std::string>>();
    const auto text = item["text"].get<std::string>();
    SCOPED_TRACE(text);
    EXPECT_EQ(decoding::join_wordpiece_pieces(tokens), text);
    std::vector<int64_t> ids;
    for (const auto& token : tokens) ids.push_back(tokenizer.units().id(token));
    if (std::find(ids.begin(), ids.end(), -1) != ids.end()) continue;  // not all in the table
    EXPECT_EQ(tokenizer.decode(ids), text);
    // Each token's text as it follows another: the text, but for a first continuation's "##".
    std::string joined;
    for (const auto id : ids) joined += tokenizer.token_text(id);
    const bool leading_continuation = tokens.front().rfind("##", 0) == 0;
    EXPECT_EQ(leading_continuation ? "##" + joined : joined.substr(joined.front() == ' '), text);
  }
}

TEST(NemoFile, RefusesWhatItDoesNotRunNamingTheKey) {
  const struct {
    const char* label;
    std::string from, to, message;
  } cases[] = {
      {"multitask", "target: nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE",
       "target: nemo.collections.asr.models.aed_multitask_models.EncDecMultiTaskModel",
       "target: 'nemo.collections.asr.models.aed_multitask_models.EncDecMultiTaskModel' is not a "
       "model attnzoo runs"},
      {"rnnt_without_joint", "target: nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE",
       "target: nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel",
       "decoder._target_: 'nemo.collections.asr.modules.ConvASRDecoder' is not supported: attnzoo "
       "reads NeMo's RNNTDecoder"},
      {"tts", "target: nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE",
       "target: nemo.collections.tts.models.FastPitchModel", "FastPitchModel' is not a model"},
      {"local_attention", "self_attention_model: rel_pos",
       "self_attention_model: rel_pos_local_attn",
       "encoder.att_context_size: rel_pos_local_attn needs a window [w, w] with w > 0"},
      {"unknown_attention", "self_attention_model: rel_pos", "self_attention_model: abs_pos",
       "encoder.self_attention_model: 'abs_pos' is not supported (rel_pos, rel_pos_local_attn)"},
      {"bad_context", "att_context_size:\n  - -1\n  - -1", "att_context_size:\n  - 70\n  - -3",
       "encoder.att_context_size: must be [left, right], each -1 (unlimited) or a number"},
      {"chunked_with_rc", "att_context_style: regular",
       "att_context_style: chunked_limited_with_rc",
       "encoder.att_context_style: 'chunked_limited_with_rc' is not supported"},
      {"causal_vggnet",
       "subsampling: dw_striding\n  subsampling_factor: 8\n  subsampling_conv_channels: 32\n"
       "  causal_downsampling: false",
       "subsampling: vggnet\n  subsampling_factor: 8\n  subsampling_conv_channels: 32\n"
       "  causal_downsampling: true",
       "encoder.causal_downsampling: vggnet has no causal form"},
      {"vggnet16", "subsampling_factor: 8", "subsampling_factor: 16",
       "encoder.subsampling: 'dw_striding' with subsampling_factor 16 is not supported"},
      {"stacking", "subsampling: dw_striding", "subsampling: stacking",
       "encoder.subsampling: 'stacking' with subsampling_factor 8 is not supported"},
      {"unknown_key", "xscaling: true", "xscaling: true\n  quantum_heads: 3",
       "encoder.quantum_heads: is an option attnzoo does not implement"},
      {"group_norm", "conv_norm_type: batch_norm", "conv_norm_type: group_norm4",
       "encoder.conv_norm_type: 'group_norm4' is not supported"},
      {"tokenizer_type", "type: bpe", "type: agg", "tokenizer.type: 'agg' is not supported"},
      {"n_fft", "n_fft: 512", "n_fft: 256",
       "preprocessor.n_fft: 256 is shorter than the window of 400 samples"},
      {"resolver", "sample_rate: 16000\ntrain_ds", "sample_rate: ${oc.env:RATE}\ntrain_ds",
       "oc.env"},
      // The frontend's limits, checked where the NeMo key is known (the fuzzer found a hop of
      // 1.01 s written through to a config the reader then refused).
      {"long_hop", "window_stride: 0.01", "window_stride: 1.01",
       "preprocessor.window_stride: must be at most 1 s (1010.0 ms)"},
      {"hop_over_window", "window_stride: 0.01", "window_stride: 0.03",
       "preprocessor.window_stride: the hop (30.0 ms) is longer than the window "
       "(preprocessor.window_size, 25.0 ms)"},
      {"odd_hop", "window_stride: 0.01",
       "window_stride: 0.01\n  n_window_stride: 161\n  "
       "exact_pad: true",
       "preprocessor.exact_pad: needs an even hop"},
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
