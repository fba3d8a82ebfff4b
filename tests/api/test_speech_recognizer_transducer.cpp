// SpeechRecognizer with a transducer head (decoding.head: transducer) on a micro streaming
// Conformer of random weights, greedy and beam search: a live stream, fed blocks of any size,
// carries the prediction network's state (the beam's hypotheses, and a TDT duration past a
// chunk's end) from chunk to chunk, its stable part only grows, and it ends at the offline
// result of the same chunked encoder, token for token and frame for frame. Against NeMo's own
// transducers: tests/api/test_nemo_file.cpp.
#include <attnzoo/api/speech_recognizer.h>
#include "common/confident_transducer.h"
#include "common/test_util.h"
#include "transcript_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace attnzoo {
namespace test_speech_recognizer_transducer {

using testing::begins_with;
using testing::fresh_dir;
using testing::ids_of;
using testing::write_wav16;

std::string model_yaml(const std::string& durations) {
  return R"(name: conformer_micro_transducer
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
  vocab_size: 8
  ctc_head: false
  transducer:
    pred_hidden: 12
    pred_layers: 2
    joint_hidden: 10
)" + durations +
         R"(features:
  kind: fbank
  num_mel_bins: 20
decoding:
  tokens: [<unk>, a, b, c, d, e, f, <blank>]
  max_symbols: 3
)";
}

TEST(SpeechRecognizerTransducer, LiveStreamCarriesThePredictionStateAndEndsAtTheOfflineResult) {
  for (const std::string durations : {"", "    durations: [0, 1, 2]\n"})
    for (const bool beam : {false, true}) {
      SCOPED_TRACE(std::string(durations.empty() ? "rnn-t" : "tdt") + (beam ? " beam" : " greedy"));
      const auto dir = fresh_dir("recognizer_transducer");
      const auto yaml = dir + "/model.yaml";
      std::ofstream(yaml) << model_yaml(durations);
      const std::vector<std::string> search =
          beam ? std::vector<std::string>{"decoding.transducer_search=beam", "decoding.beam_size=3",
                                          "decoding.nbest=3"}
               : std::vector<std::string>{};
      SpeechRecognizerOptions options;
      options.encoder.overrides = search;
      options.encoder.overrides.push_back("streaming.chunk_size=4");
      torch::manual_seed(0);
      const SpeechRecognizer offline(yaml, options);
      EXPECT_EQ(offline.config().decoding.head, decoding::DecodingHead::kTransducer);
      torch::manual_seed(0);
      SpeechRecognizerOptions live_options;
      live_options.encoder.overrides = search;
      const SpeechRecognizer live_model(yaml, live_options);
      const auto path = dir + "/speech.wav";
      torch::manual_seed(3);
      // As the WAV file holds it (16 bit), so that live and offline see the same samples.
      const auto signal =
          (0.3 * torch::randn({27200}, torch::kDouble) * 32768.0).round().clamp(-32768, 32767) /
          32768.0;
      write_wav16(path, signal, 16000);
      if (beam) {
        // Random weights keep emitting on a frame, where the beam has no natural end: the same
        // confident joint in both (common/confident_transducer.h), each token's evidence a random
        // direction of the frames (centred, unit variance), as sure of itself as a trained one.
        const auto encoded = offline.encoder().encode(path);
        ASSERT_TRUE(encoded.ok()) << encoded.error;
        const auto frames = encoded.encoded;
        const auto centred = frames - frames.mean(0);
        torch::manual_seed(7);
        auto evidence = torch::randn({7, 16});
        evidence = evidence / centred.matmul(evidence.t()).std(0).unsqueeze(1);
        const auto bias = -evidence.matmul(frames.mean(0));
        for (const auto* recognizer : {&offline, &live_model}) {
          auto* transducer = recognizer->encoder().transducer();
          ASSERT_NE(transducer, nullptr);
          torch::manual_seed(8);
          testing::make_confident(*transducer, evidence, 10.0, bias);
        }
      } else if (!durations.empty()) {
        // Random TDT weights end every frame on a blank: the same push towards tokens in both.
        for (const auto* recognizer : {&offline, &live_model}) {
          torch::NoGradGuard no_grad;
          auto* transducer = recognizer->encoder().transducer();
          ASSERT_NE(transducer, nullptr);
          transducer->out->bias[transducer->blank_id()] -= 3.0;
        }
      }
      const auto want = offline.transcribe(path);
      ASSERT_GE(want.best().tokens.size(), 4u) << "too few tokens to tell much";

      auto live = live_model.stream(16000, 4, "live");
      std::vector<int64_t> stable;
      int64_t at = 0;
      for (const int64_t n : {592, 4000, 1, 0, 2345, 160, 7000, 1111, 1111, 1111, 1111, 8658}) {
        const auto partial = live.push(signal.narrow(0, at, n));
        at += n;
        const auto now = ids_of(partial.stable);
        EXPECT_TRUE(begins_with(now, stable)) << "the stable part shrank or changed";
        if (beam) {
          EXPECT_TRUE(begins_with(ids_of(partial.best), now));
        } else {
          EXPECT_EQ(ids_of(partial.best), now) << "greedy search: everything found is stable";
        }
        stable = now;
      }
      ASSERT_EQ(at, signal.size(0));
      const auto got = live.finish();
      ASSERT_EQ(got.hypotheses.size(), want.hypotheses.size());
      EXPECT_EQ(got.hypotheses.size(), beam ? 3u : 1u);
      for (size_t h = 1; h < got.hypotheses.size(); ++h) {
        EXPECT_EQ(ids_of(got.hypotheses[h]), ids_of(want.hypotheses[h])) << "hypothesis " << h;
      }
      const auto& g = got.best();
      const auto& w = want.best();
      EXPECT_EQ(ids_of(g), ids_of(w));
      EXPECT_EQ(g.text, w.text);
      // The chunked encoder's frames agree within rounding; the score sums a float32
      // log-probability per token.
      EXPECT_NEAR(g.score, w.score, 1e-5 * static_cast<double>(g.tokens.size()));
      ASSERT_EQ(g.tokens.size(), w.tokens.size());
      for (size_t k = 0; k < g.tokens.size(); ++k) {
        EXPECT_EQ(g.tokens[k].start_frame, w.tokens[k].start_frame) << "token " << k;
        EXPECT_EQ(g.tokens[k].end_frame, w.tokens[k].end_frame) << "token " << k;
      }
    }
}

}  // namespace test_speech_recognizer_transducer
}  // namespace attnzoo
