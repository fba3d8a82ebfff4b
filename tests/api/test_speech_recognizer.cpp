// attnzoo::SpeechRecognizer: a micro streaming Conformer with a CTC head (random weights, seed 0)
// and a words table written here. One file, a batch and decode() of the encoder's output agree,
// and equal decoding/'s search run by hand on the log-probabilities; greedy search and n-best
// through overrides; live audio grows its stable part and ends where the offline decode under the
// same chunk mask ends, and with a stable margin shows text earlier; bad tables, models and files
// are named. And a WeNet-layout checkpoint (tests/api/make_wenet_ctc_checkpoint.py) with its units
// file, as the README's example.
#include <attnzoo/api/ctc_search.h>
#include <attnzoo/api/frontend_options.h>
#include <attnzoo/api/speech_recognizer.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/decoding/ctc_decoder.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/preprocess/audio/error.h>
#include "common/test_util.h"
#include "transcript_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace attnzoo {
namespace test_speech_recognizer {

using testing::begins_with;
using testing::ids_of;
using testing::write_wav16;

using testing::error_of;
using testing::fresh_dir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The CTC head's outputs: <blank>, <unk>, nine words, <sos/eos>.
constexpr int64_t kVocab = 12;
constexpr double kFramePeriod = 0.04;  // 10 ms features, x4 subsampling

const char* const kModel =
    R"(# A micro streaming Conformer with a CTC head (tests/api/test_speech_recognizer.cpp).
name: conformer_micro_ctc
family: conformer
architecture:
  input_dim: 20
  encoder_dim: 16
  num_layers: 1
  num_heads: 4
  ffn_dim: 32
  depthwise_conv_kernel_size: 5
  conv_norm: layer_norm
  causal_conv: true
  subsampling: conv2d4
  position: rel_pos_wenet
  vocab_size: 12
features:
  kind: fbank
  num_mel_bins: 20
)";
const char* const kDecoding = R"(decoding:
  units: tables/units.txt
  text: words
  beam_size: 8
  token_top_k: 7
)";

// A WeNet table of words, "TOKEN ID" per line (ids not in line order, as the format allows).
std::string words_table(const std::vector<std::string>& words) {
  std::string out = "<blank> 0\n<unk> 1\n<sos/eos> " + std::to_string(words.size() + 2) + "\n";
  for (size_t i = words.size(); i-- > 0;) out += words[i] + " " + std::to_string(i + 2) + "\n";
  return out;
}
// With seed 0's weights and the audio below, this size and depth give varied tokens (greedy
// search too, whose best path is a single repeated token for many others).
const std::vector<std::string> kWords = {"one", "two",   "three", "four", "five",
                                         "six", "seven", "eight", "nine"};

void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The model YAML (with `decoding` when asked) and its units in `dir`; returns the YAML's path.
std::string write_model(const std::string& dir, bool decoding = true,
                        const std::string& name = "model.yaml") {
  write_text(dir + "/tables/units.txt", words_table(kWords));
  const std::string path = dir + "/" + name;
  write_text(path, std::string(kModel) + (decoding ? kDecoding : ""));
  return path;
}

// Speech-like synthetic audio: 120 ms segments of near silence, a tone, noise and two tones,
// in turn, at frequencies that move from segment to segment; quantised to 16 bits as a WAV file
// holds it.
torch::Tensor utterance(double seconds, int64_t rate, int64_t seed) {
  torch::manual_seed(seed);
  const auto n = static_cast<int64_t>(std::lround(seconds * static_cast<double>(rate)));
  const auto t = torch::arange(n, torch::kDouble) / static_cast<double>(rate);
  auto x = torch::zeros({n}, torch::kDouble);
  const auto segment = static_cast<int64_t>(0.12 * static_cast<double>(rate));
  for (int64_t k = 0, i = 0; i < n; ++k, i += segment) {
    const int64_t len = std::min(segment, n - i);
    const auto tt = t.narrow(0, i, len);
    const double f = 300.0 + static_cast<double>((170 * k) % 1500);
    torch::Tensor y;
    switch ((k + seed) % 4) {
      case 0:
        y = 0.003 * torch::randn({len}, torch::kDouble);
        break;
      case 1:
        y = 0.4 * torch::sin(2.0 * M_PI * f * tt);
        break;
      case 2:
        y = 0.2 * torch::randn({len}, torch::kDouble);
        break;
      default:
        y = 0.25 * torch::sin(2.0 * M_PI * f * tt) + 0.25 * torch::sin(2.0 * M_PI * 2.7 * f * tt);
    }
    x.narrow(0, i, len).copy_(y);
  }
  return ((x * 32768.0).round().clamp(-32768, 32767) / 32768.0).to(torch::kFloat);
}

// The same hypotheses: tokens, text, alignments; scores and confidences within `tolerance`.
void expect_same(const Transcript& got, const Transcript& want, double tolerance) {
  ASSERT_TRUE(got.ok()) << got.error;
  ASSERT_TRUE(want.ok()) << want.error;
  ASSERT_EQ(got.hypotheses.size(), want.hypotheses.size());
  for (size_t i = 0; i < got.hypotheses.size(); ++i) {
    SCOPED_TRACE("hypothesis " + std::to_string(i));
    const auto& g = got.hypotheses[i];
    const auto& w = want.hypotheses[i];
    EXPECT_EQ(ids_of(g), ids_of(w));
    EXPECT_EQ(g.text, w.text);
    EXPECT_NEAR(g.score, w.score, tolerance);
    EXPECT_NEAR(g.confidence, w.confidence, tolerance);
    if (g.tokens.size() != w.tokens.size()) continue;
    for (size_t k = 0; k < g.tokens.size(); ++k) {
      EXPECT_EQ(g.tokens[k].start_frame, w.tokens[k].start_frame) << "token " << k;
      EXPECT_EQ(g.tokens[k].end_frame, w.tokens[k].end_frame) << "token " << k;
    }
  }
}

decoding::CtcLogProbs view_of(const torch::Tensor& contiguous_float) {
  return {contiguous_float.data_ptr<float>(), contiguous_float.size(0), contiguous_float.size(1)};
}

// `h` is `ref` (decoding/'s own result on the same log-probs) less the tokens that make no text
// (<sos/eos>, which a CTC head may emit), with its text; each token's times and confidence follow
// from its frames and the log-probs themselves.
void expect_hypothesis_of(const TranscriptHypothesis& h, const decoding::CtcHypothesis& ref,
                          const torch::Tensor& log_probs, const SpeechRecognizer& recognizer) {
  const auto& tokenizer = recognizer.tokenizer();
  const auto& units = tokenizer.units();
  std::vector<size_t> kept;  // the indices in ref of the tokens listed
  std::vector<int64_t> kept_ids;
  for (size_t k = 0; k < ref.tokens.size(); ++k) {
    if (ref.tokens[k] == units.sos_eos_id() || ref.tokens[k] == units.blank_id()) continue;
    kept.push_back(k);
    kept_ids.push_back(ref.tokens[k]);
  }
  EXPECT_EQ(ids_of(h), kept_ids);
  EXPECT_NEAR(h.score, ref.score, 1e-5);
  // The confidence is the mean of the listed tokens' (ref's own when none is left out).
  double listed = 0.0;
  for (const size_t k : kept) listed += ref.timings[k].confidence;
  EXPECT_NEAR(h.confidence,
              kept.size() == ref.tokens.size() || kept.empty()
                  ? ref.confidence
                  : listed / static_cast<double>(kept.size()),
              1e-6);
  EXPECT_EQ(h.text, tokenizer.decode(ref.tokens));
  EXPECT_EQ(h.text, tokenizer.decode(ids_of(h)));
  ASSERT_EQ(h.tokens.size(), kept.size());
  double confidence_sum = 0.0;
  for (size_t k = 0; k < h.tokens.size(); ++k) {
    SCOPED_TRACE("token " + std::to_string(k));
    const auto& token = h.tokens[k];
    const auto& timing = ref.timings[kept[k]];
    EXPECT_EQ(token.text, tokenizer.token_text(token.id));
    if (tokenizer.join() == decoding::TextJoin::kWords) {
      EXPECT_EQ(token.text, units.token(token.id));  // a word: the table's own token
    }
    EXPECT_EQ(token.start_frame, timing.start_frame);
    EXPECT_EQ(token.end_frame, timing.end_frame);
    EXPECT_NEAR(token.start_seconds, timing.start_seconds, 1e-12);
    EXPECT_NEAR(token.end_seconds, timing.end_seconds, 1e-12);
    EXPECT_NEAR(token.confidence, timing.confidence, 1e-6);
    // From first principles: the frame period, and the token's peak posterior over its frames.
    EXPECT_LE(token.start_frame, token.end_frame);
    if (k > 0) {
      EXPECT_GT(token.start_frame, h.tokens[k - 1].end_frame);
    }
    EXPECT_NEAR(token.start_seconds, static_cast<double>(token.start_frame) * kFramePeriod, 1e-9);
    EXPECT_NEAR(token.end_seconds, static_cast<double>(token.end_frame + 1) * kFramePeriod, 1e-9);
    const auto peak =
        log_probs.narrow(0, token.start_frame, token.end_frame - token.start_frame + 1)
            .select(1, token.id)
            .exp()
            .max()
            .item<double>();
    EXPECT_NEAR(token.confidence, peak, 1e-5);
    confidence_sum += token.confidence;
  }
  // "The mean of its tokens' confidences" (when no token was left out).
  if (!h.tokens.empty() && kept.size() == ref.tokens.size()) {
    EXPECT_NEAR(h.confidence, confidence_sum / static_cast<double>(h.tokens.size()), 1e-6);
  }
}

// The recognizer's prefix beam search, as its config says, run by hand.
std::vector<decoding::CtcHypothesis> beam_search_by_hand(const SpeechRecognizer& recognizer,
                                                         const torch::Tensor& log_probs) {
  auto options = recognizer.config().decoding.beam;
  options.blank_id = 0;
  options.frame_period_seconds = kFramePeriod;
  const auto lp = log_probs.to(torch::kFloat).contiguous();
  return decoding::ctc_prefix_beam_search(view_of(lp), options);
}

// a. One file, a padded batch of files of different lengths, and decode() of the encoder's
// output give the same hypotheses, which are decoding/'s prefix beam search on the log-probs.
TEST(SpeechRecognizer, FileBatchAndDecodeAgreeWithTheSearchByHand) {
  const auto dir = fresh_dir("recognizer_files");
  const auto yaml = write_model(dir);
  const SpeechRecognizer recognizer(yaml);
  // The config's decoding section, its table relative to the YAML.
  EXPECT_EQ(recognizer.config().decoding.units,
            std::filesystem::path(dir + "/tables/units.txt").lexically_normal().string());
  EXPECT_EQ(recognizer.config().decoding.beam.beam_size, 8);
  EXPECT_EQ(recognizer.tokenizer().units().size(), kVocab);
  EXPECT_EQ(recognizer.tokenizer().join(), decoding::TextJoin::kWords);
  EXPECT_DOUBLE_EQ(recognizer.encoder().frame_period_ms(), 1000.0 * kFramePeriod);

  std::vector<std::string> paths;
  const double lengths[] = {1.7, 0.6, 1.25};
  for (size_t i = 0; i < 3; ++i) {
    paths.push_back(dir + "/speech" + std::to_string(i) + ".wav");
    write_wav16(paths.back(), utterance(lengths[i], 16000, static_cast<int64_t>(i) + 1), 16000);
  }
  const auto batch = recognizer.transcribe(paths);  // one forward pass, padded to 1.7 s
  ASSERT_EQ(batch.size(), paths.size());
  size_t tokens_seen = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    SCOPED_TRACE(paths[i]);
    const auto one = recognizer.transcribe(paths[i]);
    ASSERT_TRUE(one.ok()) << one.error;
    EXPECT_EQ(one.audio, paths[i]);
    EXPECT_NEAR(one.seconds, lengths[i], 1e-3);
    ASSERT_FALSE(one.hypotheses.empty());
    EXPECT_EQ(one.hypotheses.size(), 1u);  // nbest 1
    EXPECT_EQ(&one.best(), &one.hypotheses.front());
    EXPECT_GE(one.decode_ms, 0.0);
    EXPECT_GT(one.encode_ms, 0.0);
    expect_same(batch[i], one, 1e-5);
    EXPECT_EQ(batch[i].audio, paths[i]);
    const auto encoded = recognizer.encoder().encode(paths[i]);
    expect_same(recognizer.decode(encoded), one, 1e-5);
    // decoding/ by hand on the encoder's log-probabilities, with the config's options.
    const auto by_hand = beam_search_by_hand(recognizer, encoded.log_probs);
    ASSERT_EQ(by_hand.size(), 1u);
    expect_hypothesis_of(one.best(), by_hand[0], encoded.log_probs, recognizer);
    tokens_seen += one.best().tokens.size();
    // A waveform in memory: the same.
    expect_same(recognizer.transcribe_waveform(
                    utterance(lengths[i], 16000, static_cast<int64_t>(i) + 1), 16000, "memory"),
                one, 1e-5);
  }
  // Random weights give arbitrary text, but text: the checks above had tokens to check.
  EXPECT_GE(tokens_seen, 6u);
  // Batched at 2 per pass: the same again.
  SpeechRecognizerOptions two;
  two.encoder.batch_size = 2;
  const auto pairs = SpeechRecognizer(yaml, two).transcribe(paths);
  for (size_t i = 0; i < paths.size(); ++i) expect_same(pairs[i], batch[i], 1e-5);
}

// b. Greedy search and n-best through overrides.
TEST(SpeechRecognizer, GreedyAndNbestOverrides) {
  const auto dir = fresh_dir("recognizer_search");
  const auto yaml = write_model(dir);
  const auto path = dir + "/speech.wav";
  write_wav16(path, utterance(1.7, 16000, 1), 16000);
  const auto encoded = SpeechEncoder(yaml).encode(path);
  const auto lp = encoded.log_probs.to(torch::kFloat).contiguous();

  SpeechRecognizerOptions greedy_options;
  greedy_options.encoder.overrides = {"decoding.search=greedy"};
  const SpeechRecognizer greedy(yaml, greedy_options);
  EXPECT_EQ(greedy.config().decoding.search, decoding::CtcSearch::kGreedy);
  const auto g = greedy.transcribe(path);
  ASSERT_EQ(g.hypotheses.size(), 1u);
  const auto best_path = decoding::ctc_greedy_decode(view_of(lp), {0, kFramePeriod});
  ASSERT_GE(best_path.tokens.size(), 2u);
  expect_hypothesis_of(g.best(), best_path, lp, greedy);
  // Not what the beam finds, so the override is seen.
  EXPECT_NE(ids_of(g.best()), ids_of(SpeechRecognizer(yaml).transcribe(path).best()));
  // The best path's score is the sum of its frames' maxima.
  EXPECT_NEAR(g.best().score, std::get<0>(lp.max(1)).sum().item<double>(), 1e-3);

  SpeechRecognizerOptions nbest_options;
  nbest_options.encoder.overrides = {"decoding.nbest=3"};
  const SpeechRecognizer nbest(yaml, nbest_options);
  const auto n = nbest.transcribe(path);
  ASSERT_GE(n.hypotheses.size(), 2u);
  ASSERT_LE(n.hypotheses.size(), 3u);
  const auto by_hand = beam_search_by_hand(nbest, lp);
  ASSERT_EQ(by_hand.size(), n.hypotheses.size());
  for (size_t i = 0; i < n.hypotheses.size(); ++i) {
    SCOPED_TRACE("hypothesis " + std::to_string(i));
    expect_hypothesis_of(n.hypotheses[i], by_hand[i], lp, nbest);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(ids_of(n.hypotheses[i]), ids_of(n.hypotheses[j]));
    if (i > 0) {
      EXPECT_LE(n.hypotheses[i].score, n.hypotheses[i - 1].score);
    }
  }
  // The best of three is the one-best.
  auto first = n;
  first.hypotheses.resize(1);
  expect_same(first, SpeechRecognizer(yaml).transcribe(path), 1e-5);
}

// c. Live audio in blocks of awkward sizes: the stable part only grows and begins the best; the
// end equals the offline decode under the same chunk mask, at 16 kHz and resampled from 8 kHz.
TEST(SpeechRecognizer, LiveAudioGrowsItsStablePartAndEndsAtTheOfflineResult) {
  const auto dir = fresh_dir("recognizer_live");
  const auto yaml = write_model(dir);
  const SpeechRecognizer recognizer(yaml);  // full context offline (no streaming section)
  SpeechRecognizerOptions chunked;
  chunked.encoder.overrides = {"streaming.chunk_size=4"};
  const SpeechRecognizer offline4(yaml, chunked);
  const auto path = dir + "/speech.wav";
  const auto signal = utterance(1.7, 16000, 1);
  write_wav16(path, signal, 16000);
  // The chunk mask changes the log-probs, so the comparison below means something.
  EXPECT_GT(
      (recognizer.encoder().encode(path).log_probs - offline4.encoder().encode(path).log_probs)
          .abs()
          .max()
          .item<double>(),
      1e-3);

  auto live = recognizer.stream(16000, 4, "live");
  EXPECT_EQ(live.chunk_size(), 4);
  std::vector<int64_t> stable;
  size_t stable_growths = 0, stable_behind = 0;
  int64_t at = 0;
  // 37 ms, 250 ms, one sample, nothing, 146.6 ms, 10 ms, 437.5 ms, then 69.4 ms at a time.
  std::vector<int64_t> blocks = {592, 4000, 1, 0, 2345, 160, 7000};
  for (int64_t sum = 14098; sum < signal.size(0); sum += 1111) {
    blocks.push_back(std::min<int64_t>(1111, signal.size(0) - sum));
  }
  for (const int64_t n : blocks) {
    SCOPED_TRACE("after " + std::to_string(at + n) + " samples");
    const auto partial = live.push(signal.narrow(0, at, n));
    at += n;
    EXPECT_NEAR(partial.seconds, static_cast<double>(at) / 16000.0, 1e-9);
    const auto now = ids_of(partial.stable);
    EXPECT_TRUE(begins_with(now, stable)) << "the stable part shrank or changed";
    EXPECT_TRUE(begins_with(ids_of(partial.best), now)) << "the best does not begin with it";
    EXPECT_EQ(partial.stable.text, recognizer.tokenizer().decode(now));
    EXPECT_EQ(partial.best.text, recognizer.tokenizer().decode(ids_of(partial.best)));
    stable_growths += now.size() > stable.size();
    stable_behind += now.size() < partial.best.tokens.size();
    stable = now;
  }
  EXPECT_EQ(at, signal.size(0));
  EXPECT_GE(stable_growths, 2u);  // it did grow, before the end
  EXPECT_GE(stable_behind, 1u);   // and is not just the best
  const auto final_result = live.finish();
  EXPECT_EQ(final_result.audio, "live");
  EXPECT_NEAR(final_result.seconds, 1.7, 1e-9);
  EXPECT_TRUE(begins_with(ids_of(final_result.best()), stable));
  expect_same(final_result, offline4.transcribe(path), 1e-4);
  EXPECT_GT(std::abs(final_result.best().score - recognizer.transcribe(path).best().score), 1e-3);
  EXPECT_THAT(error_of([&] { live.push(signal.narrow(0, 0, 100)); }),
              HasSubstr("SpeechRecognizer::Stream(live): push after finish()"));
  EXPECT_THAT(error_of([&] { live.finish(); }),
              HasSubstr("SpeechRecognizer::Stream(live): finish() called twice"));

  // 8 kHz, resampled as it arrives: equals the file read and resampled.
  const auto path8k = dir + "/speech8k.wav";
  const auto signal8k = utterance(1.3, 8000, 2);
  write_wav16(path8k, signal8k, 8000);
  auto live8k = recognizer.stream(8000, 4, "live8k");
  for (int64_t i = 0; i < signal8k.size(0); i += 1234) {
    live8k.push(signal8k.narrow(0, i, std::min<int64_t>(1234, signal8k.size(0) - i)));
  }
  const auto final8k = live8k.finish();
  EXPECT_NEAR(final8k.seconds, 1.3, 1e-9);
  EXPECT_GE(final8k.best().tokens.size(), 2u);
  expect_same(final8k, offline4.transcribe(path8k), 1e-4);
  EXPECT_THAT(error_of([&] { live8k.finish(); }),
              HasSubstr("SpeechRecognizer::Stream(live8k): finish() called twice"));
}

// d. Token tables and models that cannot be decoded, each error naming what is wrong where.
// d. decoding.stable_margin: fed the same blocks as a stream that waits for the whole beam, the
// stable part still only grows and begins the best, is never shorter, and is longer after some
// block; the final result begins with it. The margin 0 stream is the search without commits, so
// its final result is the offline one (test c); this one's need not be.
TEST(SpeechRecognizer, StableMarginShowsTextEarlier) {
  const auto dir = fresh_dir("recognizer_margin");
  const auto yaml = write_model(dir);
  const SpeechRecognizer all_agree(yaml);
  SpeechRecognizerOptions with_margin;
  with_margin.encoder.overrides = {"decoding.stable_margin=1"};
  const SpeechRecognizer margin(yaml, with_margin);
  const auto signal = utterance(2.3, 16000, 3);
  auto a = all_agree.stream(16000, 4, "all");
  auto m = margin.stream(16000, 4, "margin");
  std::vector<int64_t> stable;
  size_t ahead = 0;
  for (int64_t at = 0; at < signal.size(0); at += 1600) {
    SCOPED_TRACE("after " + std::to_string(at) + " samples");
    const auto block = signal.narrow(0, at, std::min<int64_t>(1600, signal.size(0) - at));
    const auto pa = a.push(block);
    const auto pm = m.push(block);
    const auto now = ids_of(pm.stable);
    EXPECT_TRUE(begins_with(now, stable)) << "the stable part shrank or changed";
    EXPECT_TRUE(begins_with(ids_of(pm.best), now)) << "the best does not begin with it";
    EXPECT_TRUE(begins_with(now, ids_of(pa.stable))) << "shorter than the whole beam's";
    ahead += now.size() > pa.stable.tokens.size();
    stable = now;
  }
  EXPECT_GE(ahead, 1u);
  EXPECT_TRUE(begins_with(ids_of(m.finish().best()), stable));
  EXPECT_THAT(error_of([&] {
                SpeechRecognizerOptions bad;
                bad.encoder.overrides = {"decoding.stable_margin=-1"};
                SpeechRecognizer(yaml, bad);
              }),
              HasSubstr("decoding.stable_margin"));
}

TEST(SpeechRecognizer, BadUnitsAndModelsAreNamed) {
  const auto dir = fresh_dir("recognizer_units");
  const auto yaml = write_model(dir);
  const auto table = [&](const std::string& name, const std::string& text) {
    write_text(dir + "/" + name, text);
    return dir + "/" + name;
  };
  const auto units_error = [&](const std::string& units) {
    SpeechRecognizerOptions options;
    options.units = units;
    try {
      SpeechRecognizer recognizer(yaml, options);
    } catch (const decoding::UnitsError& e) {
      return e;
    }
    ADD_FAILURE() << "no UnitsError for " << units;
    return decoding::UnitsError("", "", 0);
  };
  const std::string all_but_blank =
      "<unk> 1\na 2\nb 3\nc 4\nd 5\ne 6\nf 7\ng 8\nh 9\ni 10\n<sos/eos> 11\n";
  {
    const auto path = table("duplicate.txt", "<blank> 0\n<unk> 1\na 2\nb 2\n" + all_but_blank);
    const auto e = units_error(path);
    EXPECT_THAT(e.what(), StartsWith(path + ":4: "));
    EXPECT_THAT(e.what(), HasSubstr("duplicate id 2"));
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.line(), 4);
  }
  {
    const auto path = table("past.txt",
                            "<blank> 0\n<unk> 1\na 2\nb 3\nc 4\nd 5\ne 6\nf 7\ng 12\nh 9\n"
                            "i 10\n<sos/eos> 11\n");
    const auto e = units_error(path);
    EXPECT_THAT(e.what(), StartsWith(path + ":9: "));
    EXPECT_THAT(e.what(), HasSubstr("id 12 of 'g' is past the table's size (12"));
  }
  {
    const auto path = table("small.txt", "<blank> 0\n<unk> 1\na 2\nb 3\nc 4\nd 5\n<sos/eos> 6\n");
    const auto e = units_error(path);
    EXPECT_THAT(e.what(), StartsWith(path + ": "));
    EXPECT_THAT(e.what(), HasSubstr("7 tokens, but the CTC head has 12 outputs"));
    EXPECT_EQ(e.line(), 0);
  }
  {
    const auto path = table("no_blank.txt", "z 0\n" + all_but_blank);
    const auto e = units_error(path);
    EXPECT_THAT(e.what(), StartsWith(path + ": "));
    EXPECT_THAT(e.what(), HasSubstr("no <blank> token"));
  }
  {
    SpeechRecognizerOptions missing;
    missing.units = dir + "/missing_units.txt";
    EXPECT_THAT(error_of([&] { SpeechRecognizer(yaml, missing); }),
                HasSubstr(dir + "/missing_units.txt"));
  }
  // options.units replaces the config's table; the config's text joining and search stay.
  {
    SpeechRecognizerOptions other;
    other.units = table("spanish.txt", words_table({"uno", "dos", "tres", "cuatro", "cinco", "seis",
                                                    "siete", "ocho", "nueve"}));
    const SpeechRecognizer spanish(yaml, other);
    EXPECT_EQ(spanish.tokenizer().units().source(), other.units);
    const auto path = dir + "/speech.wav";
    write_wav16(path, utterance(1.0, 16000, 2), 16000);
    const auto a = SpeechRecognizer(yaml).transcribe(path).best();
    const auto b = spanish.transcribe(path).best();
    EXPECT_EQ(ids_of(a), ids_of(b));
    EXPECT_NEAR(a.score, b.score, 1e-6);
    EXPECT_EQ(b.text, spanish.tokenizer().decode(ids_of(b)));
    ASSERT_FALSE(b.tokens.empty());
    EXPECT_EQ(b.tokens[0].text, spanish.tokenizer().units().token(b.tokens[0].id));
    EXPECT_NE(b.tokens[0].text, a.tokens[0].text);
  }
  // No CTC head: the config is named.
  {
    const std::string classifier =
        std::string(ATTNZOO_API_TEST_DATA_DIR) + "/conformer_micro_classifier.yaml";
    SpeechRecognizerOptions with_units;
    with_units.units = dir + "/tables/units.txt";
    const auto e = error_of([&] { SpeechRecognizer(classifier, with_units); });
    EXPECT_THAT(e, HasSubstr(classifier));
    EXPECT_THAT(e, HasSubstr("CTC or transducer head"));
    const auto bare = write_model(dir, /*decoding=*/false, "bare.yaml");
    SpeechRecognizerOptions no_head;
    no_head.encoder.overrides = {"architecture.vocab_size=0"};
    const auto e2 = error_of([&] { SpeechRecognizer(bare, no_head); });
    EXPECT_THAT(e2, HasSubstr(bare));
    EXPECT_THAT(e2, HasSubstr("has no CTC or transducer head (architecture.vocab_size is 0)"));
    // A CTC head but no table: say where to give one.
    const auto e3 = error_of([&] { SpeechRecognizer{bare}; });
    EXPECT_THAT(e3, HasSubstr(bare));
    EXPECT_THAT(e3, HasSubstr("add decoding.units"));
    EXPECT_THAT(e3, HasSubstr("--units"));
  }
}

// e. A bad file among good ones: its entry has the error, the others are transcribed.
TEST(SpeechRecognizer, BadFilesAmongGoodOnes) {
  const auto dir = fresh_dir("recognizer_bad_files");
  const auto yaml = write_model(dir);
  const SpeechRecognizer recognizer(yaml);
  const std::vector<std::string> paths = {dir + "/a.wav", dir + "/missing.wav", dir + "/text.wav",
                                          dir + "/b.wav", dir + "/short.wav"};
  write_wav16(paths[0], utterance(1.2, 16000, 1), 16000);
  write_text(paths[2], "not audio at all");
  write_wav16(paths[3], utterance(0.8, 16000, 3), 16000);
  write_wav16(paths[4], utterance(0.05, 16000, 4), 16000);
  const auto results = recognizer.transcribe(paths);
  ASSERT_EQ(results.size(), paths.size());
  for (const size_t i : {size_t{0}, size_t{3}}) {
    SCOPED_TRACE(paths[i]);
    expect_same(results[i], recognizer.transcribe(paths[i]), 1e-5);
  }
  for (const size_t i : {size_t{1}, size_t{2}, size_t{4}}) {
    SCOPED_TRACE(paths[i]);
    EXPECT_FALSE(results[i].ok());
    EXPECT_EQ(results[i].audio, paths[i]);
    EXPECT_THAT(results[i].error, HasSubstr(paths[i]));
    EXPECT_TRUE(results[i].hypotheses.empty());
    EXPECT_THAT(error_of([&] { results[i].best(); }), HasSubstr("has no result"));
    // One file alone: an AudioError naming it.
    EXPECT_THAT(error_of<AudioError>([&] { recognizer.transcribe(paths[i]); }),
                HasSubstr(paths[i]));
  }
  EXPECT_THAT(results[4].error, HasSubstr("too short"));
}

// One recognizer used from four threads at once (what a server does): each thread transcribes
// files and streams the signals, starting at another one, and gets what one thread alone got.
// Under TSan (tools/sanitize.sh thread) it also shows the shared state is only read.
TEST(SpeechRecognizer, FourThreadsShareOneRecognizer) {
  const auto dir = fresh_dir("recognizer_threads");
  const SpeechRecognizer recognizer(write_model(dir));
  std::vector<torch::Tensor> signals;
  for (int i = 0; i < 4; ++i) signals.push_back(utterance(0.8 + 0.3 * i, 16000, 10 + i));
  std::vector<std::string> offline, live;
  for (const auto& x : signals) {
    offline.push_back(recognizer.transcribe_waveform(x, 16000).best().text);
    auto s = recognizer.stream(16000, 4);
    s.push(x);
    live.push_back(s.finish().best().text);
  }
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2; ++round) {
        for (int k = 0; k < 4; ++k) {
          const int i = (t + k) % 4;
          auto s = recognizer.stream(16000, 4);
          s.push(signals[i]);
          if (recognizer.transcribe_waveform(signals[i], 16000).best().text != offline[i] ||
              s.finish().best().text != live[i]) {
            failures[t] = "thread " + std::to_string(t) + ": signal " + std::to_string(i);
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
}

// The README's example: a WeNet checkpoint (random, WeNet's tensor names, global CMVN, an
// attention decoder beside) and its units file.
TEST(SpeechRecognizerWenet, TranscribesAWenetCheckpointWithItsUnits) {
  const std::string yaml =
      std::string(ATTNZOO_API_TEST_DATA_DIR) + "/conformer_micro_wenet_ctc.yaml";
  const std::string weights =
      std::string(ATTNZOO_API_REFERENCE_DIR) + "/wenet_ctc_micro.safetensors";
  const auto dir = fresh_dir("recognizer_wenet");
  // A WeNet character table (lang_char.txt): "▁" is the space.
  const auto units = dir + "/lang_char.txt";
  write_text(units,
             "<blank> 0\n<unk> 1\n\xE2\x96\x81 2\nA 3\nB 4\nC 5\nD 6\nE 7\nF 8\n<sos/eos> 9\n");
  const auto path = dir + "/speech.wav";
  const auto signal = utterance(1.7, 16000, 1);
  write_wav16(path, signal, 16000);

  SpeechRecognizerOptions options;
  options.encoder.weights = weights;
  options.units = units;
  const SpeechRecognizer recognizer(yaml, options);
  EXPECT_THAT(recognizer.encoder().weights_description(), HasSubstr("wenet_ctc_micro.safetensors"));
  EXPECT_THAT(recognizer.encoder().weights_description(), HasSubstr("wenet"));
  EXPECT_EQ(recognizer.tokenizer().join(), decoding::TextJoin::kCharacters);  // the default
  const auto transcript = recognizer.transcribe(path);
  ASSERT_TRUE(transcript.ok()) << transcript.error;
  const auto& best = transcript.best();
  EXPECT_GE(best.tokens.size(), 3u);
  EXPECT_EQ(best.text, recognizer.tokenizer().decode(ids_of(best)));

  // The recognizer's log-probs are SpeechEncoder's with the same weights ...
  SpeechEncoderOptions encoder_options;
  encoder_options.weights = weights;
  const auto encoded = SpeechEncoder(yaml, encoder_options).encode(path);
  ASSERT_TRUE(encoded.ok()) << encoded.error;
  const auto own = recognizer.encoder().encode(path);
  ASSERT_EQ(own.log_probs.sizes(), encoded.log_probs.sizes());
  EXPECT_LE((own.log_probs - encoded.log_probs).abs().max().item<double>(), 1e-6);
  // ... which are the checkpoint's ctc.ctc_lo on the encoder's output ...
  const auto checkpoint = io::load_safetensors(weights).tensors;
  const auto head = torch::log_softmax(
      torch::nn::functional::linear(encoded.encoded, checkpoint["ctc.ctc_lo.weight"],
                                    checkpoint["ctc.ctc_lo.bias"]),
      -1);
  EXPECT_LE((head - encoded.log_probs).abs().max().item<double>(), 1e-5);
  EXPECT_LE((recognizer.encoder().ctc_log_probs(encoded.encoded) - encoded.log_probs)
                .abs()
                .max()
                .item<double>(),
            1e-6);
  // ... and the model built, loaded and run by hand (the features, global CMVN, chunk mask 4).
  auto config = resolve_model_config(yaml);
  auto model = build_model(config);
  EXPECT_EQ(load_weights(model, weights).layout, "wenet");
  model.module->eval();
  {
    torch::InferenceMode inference;
    const FeatureExtractor fbank(audio_feature_options(config.features));
    auto* encoder = model.module->as<ConformerEncoderImpl>();
    ASSERT_NE(encoder, nullptr);
    const auto by_hand = std::get<0>(encoder->forward(fbank(signal).unsqueeze(0), torch::Tensor(),
                                                      config.streaming.chunk_size,
                                                      config.streaming.num_left_chunks))[0];
    ASSERT_EQ(by_hand.sizes(), encoded.encoded.sizes());
    EXPECT_LE((by_hand - encoded.encoded).abs().max().item<double>(), 1e-4);
    EXPECT_LE((encoder->ctc_log_probs(by_hand) - encoded.log_probs).abs().max().item<double>(),
              1e-4);
  }
  // The checkpoint was loaded: random weights give other log-probs.
  EXPECT_GT(
      (SpeechEncoder(yaml).encode(path).log_probs - encoded.log_probs).abs().max().item<double>(),
      0.1);
  // The transcript is decoding/'s search on those log-probs.
  auto beam = decoding::PrefixBeamSearchOptions{};
  beam.frame_period_seconds = kFramePeriod;
  const auto lp = encoded.log_probs.contiguous();
  const auto expected = decoding::ctc_prefix_beam_search(view_of(lp), beam);
  expect_hypothesis_of(best, expected[0], lp, recognizer);
  // Live, with the config's chunk (4): the offline result, under the same mask.
  auto live = recognizer.stream(16000);
  EXPECT_EQ(live.chunk_size(), 4);
  for (int64_t i = 0; i < signal.size(0); i += 1600) {
    live.push(signal.narrow(0, i, std::min<int64_t>(1600, signal.size(0) - i)));
  }
  expect_same(live.finish(), transcript, 1e-4);
}

// n-best lists distinct hypotheses ("fewer when fewer distinct ones survive the beam"), also when
// the head emits <sos/eos>, which the transcript leaves out (this checkpoint's head does).
TEST(SpeechRecognizerWenet, NbestHypothesesAreDistinct) {
  const std::string yaml =
      std::string(ATTNZOO_API_TEST_DATA_DIR) + "/conformer_micro_wenet_ctc.yaml";
  const auto dir = fresh_dir("recognizer_wenet_nbest");
  const auto units = dir + "/lang_char.txt";
  write_text(units,
             "<blank> 0\n<unk> 1\n\xE2\x96\x81 2\nA 3\nB 4\nC 5\nD 6\nE 7\nF 8\n<sos/eos> 9\n");
  SpeechRecognizerOptions options;
  options.encoder.weights = std::string(ATTNZOO_API_REFERENCE_DIR) + "/wenet_ctc_micro.safetensors";
  options.units = units;
  options.encoder.overrides = {"decoding.beam_size=8", "decoding.nbest=8"};
  const SpeechRecognizer recognizer(yaml, options);
  const auto samples = utterance(1.7, 16000, 1);
  const auto t = recognizer.transcribe_waveform(samples, 16000);
  ASSERT_GE(t.hypotheses.size(), 2u);
  for (size_t i = 0; i < t.hypotheses.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      EXPECT_NE(ids_of(t.hypotheses[i]), ids_of(t.hypotheses[j]))
          << "hypotheses " << j << " and " << i << ": '" << t.hypotheses[i].text << "'";
    }
  }
  // Each is the beam's hypotheses that differ only by <sos/eos>, merged: the log of the sum of
  // their probabilities; best first.
  const auto& table = recognizer.tokenizer().units();
  const auto log_probs =
      recognizer.encoder().encode_waveform(samples, 16000).log_probs.contiguous();
  const auto raw = decoding::ctc_prefix_beam_search(
      view_of(log_probs), ctc_search_settings(recognizer.config(), table).beam);
  int merged = 0;
  for (const auto& h : t.hypotheses) {
    double sum = 0.0;
    int parts = 0;
    for (const auto& r : raw) {
      std::vector<int64_t> visible;
      for (const auto id : r.tokens) {
        if (id != table.sos_eos_id()) visible.push_back(id);
      }
      if (visible != ids_of(h)) continue;
      sum += std::exp(r.score);
      ++parts;
    }
    ASSERT_GE(parts, 1) << h.text;
    merged += parts > 1;
    EXPECT_NEAR(h.score, std::log(sum), 1e-9) << h.text;
  }
  EXPECT_GE(merged, 1);  // the fixture's head emits <sos/eos>: some were merged
  for (size_t i = 1; i < t.hypotheses.size(); ++i) {
    EXPECT_GE(t.hypotheses[i - 1].score, t.hypotheses[i].score);
  }
}

}  // namespace test_speech_recognizer
}  // namespace attnzoo
