// The served models of audio, called as the server calls them (prepare on the receiving thread,
// run on a batch): each request's answer equals the library's for the same audio alone (the
// shipped recognizer and keyword classifier, a micro encoder with random weights), a batch of
// requests of different lengths included; the errors of requests they cannot take; and live audio
// in WeNet's protocol (SpeechStream) against the library's own stream.
#include <attnzoo/api/transcript_json.h>
#include <attnzoo/preprocess/audio/read.h>
#include <attnzoo/serve/endpoints.h>
#include <attnzoo/serve/served_audio_classifier.h>
#include <attnzoo/serve/served_speech_encoder.h>
#include <attnzoo/serve/served_speech_recognizer.h>
#include <attnzoo/serve/speech_stream.h>

#include "common/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>

namespace attnzoo::serve {
namespace test_served_audio {

using nlohmann::json;
using testing::error_of;
using ::testing::HasSubstr;

const std::string kRepo = ATTNZOO_SOURCE_DIR;
const std::string kDigitsWav = kRepo + "/assets/samples/digits_417.wav";
const std::string kStopWav = kRepo + "/assets/samples/keyword_stop.wav";
// A streaming Conformer with a CTC head, 20 fbank bins at 16 kHz, chunks of 4 (random weights).
const std::string kMicro =
    std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/conformer_micro_stream.yaml";

std::shared_ptr<const SpeechRecognizer> digits_recognizer() {
  static auto recognizer = [] {
    SpeechRecognizerOptions options;
    options.encoder.weights = kRepo + "/assets/weights/conformer_digits_ctc.safetensors";
    return std::make_shared<const SpeechRecognizer>("conformer_digits_ctc", options);
  }();
  return recognizer;
}

Tensor audio_input(const std::vector<std::string>& files) {
  Tensor t;
  t.name = "audio";
  t.datatype = DataType::kBytes;
  t.shape = {static_cast<int64_t>(files.size()), 1};
  t.data = pack_bytes(files);
  return t;
}

Tensor waveform_input(const torch::Tensor& rows) {  // [N, samples] float
  const auto v = rows.contiguous();
  Tensor t;
  t.name = "waveform";
  t.datatype = DataType::kFp32;
  t.shape = v.sizes().vec();
  t.data.assign(reinterpret_cast<const char*>(v.data_ptr<float>()), v.numel() * sizeof(float));
  return t;
}

InferRequest request_of(Tensor input, std::vector<std::string> outputs = {}) {
  InferRequest request;
  request.inputs.push_back(std::move(input));
  for (auto& name : outputs) request.outputs.push_back({name, std::nullopt, 0});
  return request;
}

// Prepares every request, then runs them as one batch: each one's outcome.
std::vector<InferOutcome> run_batch(const ServedModel& model,
                                    const std::vector<InferRequest>& requests) {
  std::vector<InferOutcome> outcomes(requests.size());
  std::vector<std::shared_ptr<BatchJob>> jobs;
  for (size_t i = 0; i < requests.size(); ++i) {
    jobs.push_back(
        model.prepare(requests[i], [&outcomes, i](InferOutcome o) { outcomes[i] = std::move(o); }));
  }
  model.run(jobs);
  return outcomes;
}

const Tensor& output(const InferOutcome& outcome, const std::string& name) {
  for (const auto& o : outcome.outputs) {
    if (o.tensor.name == name) return o.tensor;
  }
  throw std::runtime_error("no output " + name);
}

torch::Tensor fp32_values(const Tensor& t) {
  auto values = torch::empty(t.shape, torch::kFloat);
  std::memcpy(values.data_ptr<float>(), t.data.data(), t.data.size());
  return values;
}

std::string prepare_error(const ServedModel& model, const InferRequest& request) {
  return error_of<ProtocolError>([&] { model.prepare(request, [](InferOutcome) {}); });
}

TEST(ServedSpeechRecognizer, TranscribesAsTheLibraryInOneBatch) {
  const auto recognizer = digits_recognizer();
  const ServedSpeechRecognizer served("digits", recognizer, {60.0, 16});
  EXPECT_STREQ(served.kind(), "speech_recognizer");
  EXPECT_STREQ(served.file_route(), "transcribe");
  ASSERT_EQ(served.inputs().size(), 2u);
  EXPECT_EQ(served.inputs()[0].name, "audio");
  EXPECT_EQ(served.inputs()[1].name, "waveform");
  EXPECT_EQ(served.outputs()[0].name, "text");
  EXPECT_EQ(served.outputs()[1].name, "transcript");
  EXPECT_EQ(served.why_no_stream(), "");

  const auto wav = read_audio(kDigitsWav).samples;
  const auto half = wav.narrow(0, 0, wav.size(0) / 2);
  const auto outcomes =
      run_batch(served, {request_of(audio_input({testing::read_file(kDigitsWav)})),
                         request_of(waveform_input(half.unsqueeze(0)), {"text"}),
                         request_of(waveform_input(torch::stack({wav, wav})), {"transcript"})});
  for (const auto& o : outcomes) ASSERT_TRUE(o.ok()) << o.error;
  const auto whole = recognizer->transcribe(kDigitsWav);
  EXPECT_EQ(whole.best().text, "four one seven");
  const auto first = output(outcomes[0], "text").byte_elements();
  EXPECT_EQ(std::string(first.at(0)), whole.best().text);
  auto served_json = json::parse(output(outcomes[0], "transcript").byte_elements().at(0));
  auto expected_json = json::parse(transcript_json(whole));
  EXPECT_EQ(served_json["audio"], "input 'audio'[0]");
  served_json.erase("audio");
  expected_json.erase("audio");
  EXPECT_EQ(served_json["text"], expected_json["text"]);
  ASSERT_EQ(served_json["tokens"].size(), expected_json["tokens"].size());
  for (size_t i = 0; i < served_json["tokens"].size(); ++i) {
    EXPECT_EQ(served_json["tokens"][i]["token"], expected_json["tokens"][i]["token"]);
    EXPECT_NEAR(served_json["tokens"][i]["start"].get<double>(),
                expected_json["tokens"][i]["start"].get<double>(), 1e-9);
    EXPECT_NEAR(served_json["tokens"][i]["confidence"].get<double>(),
                expected_json["tokens"][i]["confidence"].get<double>(), 1e-4);
  }
  const auto half_alone = recognizer->transcribe_waveform(half, 16000);
  EXPECT_EQ(std::string(output(outcomes[1], "text").byte_elements().at(0)), half_alone.best().text);
  EXPECT_EQ(outcomes[1].outputs.size(), 1u);
  const auto& two = output(outcomes[2], "transcript");
  EXPECT_EQ(two.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(json::parse(two.byte_elements().at(1))["text"], whole.best().text);

  // The file route.
  auto call = served.file_call(testing::read_file(kDigitsWav), "");
  const auto answered = run_batch(served, {call.request});
  ASSERT_TRUE(answered[0].ok()) << answered[0].error;
  const auto body = json::parse(call.answer(answered[0].outputs));
  EXPECT_EQ(body["model"], "digits");
  EXPECT_EQ(body["text"], "four one seven");
  EXPECT_FALSE(body.contains("audio"));
  EXPECT_THAT(error_of([&] { served.file_call("x", "top=3"); }),
              HasSubstr("unknown query parameter 'top': this route takes none"));
}

TEST(ServedSpeechEncoder, ABatchOfLengthsEqualsEachAlone) {
  const auto encoder = std::make_shared<const SpeechEncoder>(kMicro);
  const ServedSpeechEncoder served("micro", encoder, {3.0, 0});
  ASSERT_EQ(served.outputs().size(), 3u);
  EXPECT_EQ(served.outputs()[0].name, "encoded");
  EXPECT_EQ(served.outputs()[0].dims,
            (std::vector<int64_t>{
                -1, encoder->encode_waveform(torch::zeros({16000}), 16000).encoded.size(1)}));
  EXPECT_EQ(served.outputs()[1].name, "embedding");
  EXPECT_EQ(served.outputs()[2].name, "log_probs");
  EXPECT_EQ(served.why_no_stream(), "");  // the config's chunk_size
  torch::manual_seed(5);
  std::vector<torch::Tensor> signals;
  for (double seconds : {0.6, 1.4, 0.35, 1.0}) {
    signals.push_back(0.3 * torch::randn({static_cast<int64_t>(seconds * 16000)}));
  }
  std::vector<InferRequest> requests;
  for (size_t i = 0; i < 3; ++i)
    requests.push_back(request_of(waveform_input(signals[i].unsqueeze(0))));
  // Two utterances of one length in one request: embeddings only.
  requests.push_back(
      request_of(waveform_input(torch::stack({signals[3], signals[3] * 0.5})), {"embedding"}));
  const auto outcomes = run_batch(served, requests);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(outcomes[i].ok()) << outcomes[i].error;
    const auto alone = encoder->encode_waveform(signals[i], 16000);
    const auto encoded = fp32_values(output(outcomes[i], "encoded"));
    ASSERT_EQ(encoded.sizes(), alone.encoded.unsqueeze(0).sizes());
    EXPECT_LE((encoded[0] - alone.encoded).abs().max().item<double>(), 1e-5);
    EXPECT_LE((fp32_values(output(outcomes[i], "embedding"))[0] - alone.embedding)
                  .abs()
                  .max()
                  .item<double>(),
              1e-5);
    EXPECT_LE((fp32_values(output(outcomes[i], "log_probs"))[0] - alone.log_probs)
                  .abs()
                  .max()
                  .item<double>(),
              1e-4);
  }
  ASSERT_TRUE(outcomes[3].ok()) << outcomes[3].error;
  const auto pair = fp32_values(output(outcomes[3], "embedding"));
  ASSERT_EQ(pair.size(0), 2);
  EXPECT_LE((pair[1] - encoder->encode_waveform(signals[3] * 0.5, 16000).embedding)
                .abs()
                .max()
                .item<double>(),
            1e-5);

  // The file route: the embedding, and the frames on request.
  const std::string dir = ::testing::TempDir();
  testing::write_wav16(dir + "/served_encoder.wav", signals[1], 16000);
  auto call = served.file_call(testing::read_file(dir + "/served_encoder.wav"), "encoded=1");
  const auto answered = run_batch(served, {call.request});
  ASSERT_TRUE(answered[0].ok()) << answered[0].error;
  const auto body = json::parse(call.answer(answered[0].outputs));
  const auto alone = encoder->encode(dir + "/served_encoder.wav");
  EXPECT_EQ(body["frames"], alone.encoded.size(0));
  EXPECT_EQ(body["embedding"].size(), static_cast<size_t>(alone.embedding.size(0)));
  EXPECT_NEAR(body["embedding"][0].get<double>(), alone.embedding[0].item<double>(), 1e-5);
  EXPECT_EQ(body["encoded"].size(), static_cast<size_t>(alone.encoded.size(0)));
  EXPECT_DOUBLE_EQ(body["frame_ms"].get<double>(), 40.0);
  EXPECT_THAT(error_of([&] { served.file_call("x", "encoded=2"); }),
              HasSubstr("query 'encoded' must be an integer from 0 to 1, got '2'"));

  // Requests it cannot take.
  EXPECT_THAT(
      prepare_error(served, request_of(waveform_input(torch::zeros({2, 16000})), {"encoded"})),
      HasSubstr("output 'encoded' differs in length from one utterance to the next"));
  auto nan = torch::zeros({1, 16000});
  nan[0][100] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(prepare_error(served, request_of(waveform_input(nan))),
              HasSubstr("input 'waveform'[0]: NaN or infinite sample at sample 100 "));
  EXPECT_THAT(prepare_error(served, request_of(waveform_input(torch::zeros({1, 64000})))),
              HasSubstr("more than max_audio_seconds"));
  EXPECT_THAT(prepare_error(served, request_of(waveform_input(torch::zeros({1, 100})))),
              HasSubstr("input 'waveform'[0]: too short"));
  EXPECT_THAT(prepare_error(served, request_of(audio_input({"RIFF and then nothing"}))),
              HasSubstr("input 'audio'[0]"));
  auto wrong = waveform_input(torch::zeros({16000}));
  EXPECT_THAT(prepare_error(served, request_of(wrong)),
              HasSubstr("input 'waveform' must be FP32 [N, samples]"));
  auto both = request_of(audio_input({"x"}));
  both.inputs.push_back(waveform_input(torch::zeros({1, 16000})));
  EXPECT_THAT(prepare_error(served, both), HasSubstr("takes one input"));
  EXPECT_THAT(prepare_error(served, request_of(audio_input({"x"}), {"text"})), HasSubstr("text"));
}

TEST(ServedAudioClassifier, ClassifiesAsTheLibrary) {
  AudioClassifierOptions options;
  options.weights = kRepo + "/assets/weights/conformer_kws.safetensors";
  const auto classifier = std::make_shared<const AudioClassifier>("conformer_kws", options);
  const ServedAudioClassifier served("kws", classifier, {60.0, 0});
  EXPECT_STREQ(served.kind(), "audio_classifier");
  EXPECT_STREQ(served.file_route(), "classify");
  EXPECT_THAT(served.why_no_stream(), HasSubstr("does not stream"));
  const auto expected = classifier->classify(kStopWav, 3);
  auto request = request_of(audio_input({testing::read_file(kStopWav)}), {"probabilities"});
  request.outputs.push_back({"logits", std::nullopt, 3});  // the classification extension
  const auto outcomes = run_batch(served, {request});
  ASSERT_TRUE(outcomes[0].ok()) << outcomes[0].error;
  const auto probabilities = fp32_values(output(outcomes[0], "probabilities"))[0];
  EXPECT_NEAR(probabilities[expected[0].index].item<double>(), expected[0].probability, 1e-5);
  const auto top = output(outcomes[0], "logits").byte_elements();
  ASSERT_EQ(top.size(), 3u);
  EXPECT_THAT(std::string(top[0]),
              HasSubstr(":" + std::to_string(expected[0].index) + ":" + expected[0].label));
  auto call = served.file_call(testing::read_file(kStopWav), "top=2");
  const auto answered = run_batch(served, {call.request});
  const auto body = json::parse(call.answer(answered[0].outputs));
  ASSERT_EQ(body["predictions"].size(), 2u);
  EXPECT_EQ(body["predictions"][0]["label"], expected[0].label);
  EXPECT_EQ(body["predictions"][0]["label"], "stop");
  EXPECT_NEAR(body["predictions"][1]["prob"].get<double>(), expected[1].probability, 1e-5);
}

// The task of each model of a serve config: from its config, or as the entry says; a task the
// model cannot do is refused with the reason.
TEST(LoadEndpoints, ChoosesEachModelsTaskAndRefusesWhatItCannotDo) {
  const std::string vit = std::string(ATTNZOO_CONFIGS_TEST_DATA_DIR) + "/vit_micro_test.yaml";
  ServeConfig config;
  config.source = "serve.yaml";
  const auto entry = [](std::string name, std::string model,
                        std::optional<ServedTask> task = std::nullopt) {
    ServedModelConfig m;
    m.name = std::move(name);
    m.model = std::move(model);
    m.task = task;
    return m;
  };
  config.models = {entry("image", vit), entry("kws", "conformer_kws"), entry("micro", kMicro),
                   entry("digits", "conformer_digits_ctc"),
                   entry("digits_encoder", "conformer_digits_ctc", ServedTask::kEncode)};
  config.models[2].max_streams = 0;
  const auto endpoints = load_endpoints(config);
  ASSERT_EQ(endpoints.size(), 5u);
  EXPECT_STREQ(endpoints[0].model->kind(), "image_classifier");
  EXPECT_STREQ(endpoints[1].model->kind(), "audio_classifier");
  EXPECT_STREQ(endpoints[2].model->kind(), "speech_encoder");  // a CTC head, no token table
  EXPECT_EQ(endpoints[2].max_streams, 0);
  EXPECT_STREQ(endpoints[3].model->kind(), "speech_recognizer");  // decoding.units
  EXPECT_STREQ(endpoints[4].model->kind(), "speech_encoder");
  EXPECT_EQ(endpoints[3].max_streams, 16);
  // conformer_digits_ctc has no streaming.chunk_size of its own: it streams with stream_chunk.
  EXPECT_THAT(endpoints[3].model->why_no_stream(), HasSubstr("chunk"));

  const auto refusal = [&](ServedModelConfig m) {
    ServeConfig one = config;
    one.models = {std::move(m)};
    return error_of([&] { load_endpoints(one); });
  };
  EXPECT_THAT(
      refusal(entry("v", vit, ServedTask::kEncode)),
      HasSubstr("serve.yaml: model 'v' (" + vit + "): task 'encode' needs a model of audio"));
  EXPECT_THAT(refusal(entry("m", kMicro, ServedTask::kTranscribe)), HasSubstr("model 'm'"));
  EXPECT_THAT(refusal(entry("m", kMicro, ServedTask::kClassify)),
              HasSubstr("has no classification head"));
}

// Drives a SpeechStream as the WebSocket side does: one message, its reply, the next.
class StreamDriver {
 public:
  explicit StreamDriver(std::shared_ptr<StreamHandler> stream) : stream_(std::move(stream)) {}
  StreamReply send(bool text, std::string data) {
    std::promise<StreamReply> promise;
    auto future = promise.get_future();
    stream_->on_message({text, std::move(data)},
                        [&promise](StreamReply r) { promise.set_value(std::move(r)); });
    return future.get();
  }
  StreamReply text(const std::string& message) { return send(true, message); }
  StreamReply pcm(const torch::Tensor& samples) {  // [n] float -> 16-bit little-endian
    const auto q = (samples * 32768.0).round().clamp(-32768, 32767).to(torch::kShort).contiguous();
    return send(false, std::string(reinterpret_cast<const char*>(q.data_ptr<int16_t>()),
                                   static_cast<size_t>(q.numel()) * 2));
  }

 private:
  std::shared_ptr<StreamHandler> stream_;
};

json message_json(const StreamReply& reply, size_t i) {
  EXPECT_LT(i, reply.messages.size());
  EXPECT_TRUE(reply.messages.at(i).text);
  return json::parse(reply.messages.at(i).data);
}

TEST(SpeechStream, WeNetProtocolGivesTheLibrarysLiveTranscript) {
  const auto recognizer = digits_recognizer();
  TaskPool pool(1);
  auto released = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<void> ticket(nullptr, [released](void*) { ++*released; });
  const auto wav = read_audio(kDigitsWav).samples;
  // The library's own stream over the same 16-bit samples, in the same blocks.
  const auto quantised = (wav * 32768.0).round().clamp(-32768, 32767) / 32768.0;
  auto expected_stream = recognizer->stream(16000, 16);
  const int64_t block = 1600;  // 100 ms
  for (int64_t first = 0; first < wav.size(0); first += block) {
    expected_stream.push(quantised.narrow(0, first, std::min(block, wav.size(0) - first)));
  }
  const auto expected = expected_stream.finish();
  {
    StreamDriver driver(
        std::make_shared<SpeechStream>(recognizer, nullptr, 60.0, 16, pool, std::move(ticket)));
    auto ready = driver.text(R"({"signal": "start", "nbest": 2, "continuous_decoding": false})");
    EXPECT_EQ(message_json(ready, 0), json({{"status", "ok"}, {"type", "server_ready"}}));
    EXPECT_FALSE(ready.close);
    std::string stable;
    int partials = 0;
    for (int64_t first = 0; first < wav.size(0); first += block) {
      const auto reply = driver.pcm(wav.narrow(0, first, std::min(block, wav.size(0) - first)));
      ASSERT_FALSE(reply.close);
      if (reply.messages.empty()) continue;
      const auto m = message_json(reply, 0);
      EXPECT_EQ(m["type"], "partial_result");
      const auto nbest = json::parse(m["nbest"].get<std::string>());
      const auto now = nbest[0]["stable"].get<std::string>();
      EXPECT_EQ(now.substr(0, stable.size()), stable) << "the stable text only grows";
      stable = now;
      ++partials;
    }
    EXPECT_GE(partials, 2);
    const auto end = driver.text(R"({"signal": "end"})");
    EXPECT_TRUE(end.close);
    ASSERT_EQ(end.messages.size(), 2u);
    const auto final_result = message_json(end, 0);
    EXPECT_EQ(final_result["type"], "final_result");
    const auto nbest = json::parse(final_result["nbest"].get<std::string>());
    ASSERT_GE(nbest.size(), 1u);
    ASSERT_LE(nbest.size(), 2u);
    EXPECT_EQ(nbest[0]["sentence"], expected.best().text);
    EXPECT_EQ(nbest[0]["sentence"], "four one seven");
    const auto& pieces = nbest[0]["word_pieces"];
    ASSERT_EQ(pieces.size(), expected.best().tokens.size());
    EXPECT_EQ(pieces[0]["word"], "four");
    EXPECT_EQ(pieces[0]["start"], std::llround(expected.best().tokens[0].start_seconds * 1000));
    EXPECT_EQ(message_json(end, 1), json({{"status", "ok"}, {"type", "speech_end"}}));
  }
  pool.stop();  // the last task's copy of the stream goes with its thread
  EXPECT_EQ(released->load(), 1) << "the ticket goes with the stream";
}

TEST(SpeechStream, MisbehavingClientsGetAFailureAndTheClose) {
  const auto recognizer = digits_recognizer();
  TaskPool pool(2);
  const auto fresh = [&](double max_seconds = 60.0) {
    return StreamDriver(
        std::make_shared<SpeechStream>(recognizer, nullptr, max_seconds, 16, pool, nullptr));
  };
  const auto failure = [](const StreamReply& reply) {
    EXPECT_TRUE(reply.close);
    const auto m = message_json(reply, 0);
    EXPECT_EQ(m["status"], "failed");
    return m["message"].get<std::string>();
  };
  EXPECT_THAT(failure(fresh().pcm(torch::zeros({160}))),
              HasSubstr("\"start\" signal is expected before audio"));
  EXPECT_THAT(failure(fresh().text("not json")), HasSubstr("JSON object"));
  EXPECT_THAT(failure(fresh().text(R"({"nbest": 1})")), HasSubstr("needs a \"signal\""));
  EXPECT_THAT(failure(fresh().text(R"({"signal": "pause"})")), HasSubstr("unknown signal 'pause'"));
  EXPECT_THAT(failure(fresh().text(R"({"signal": "end"})")), HasSubstr("before \"start\""));
  EXPECT_THAT(failure(fresh().text(R"({"signal": "start", "nbest": "two"})")),
              HasSubstr("\"nbest\" must be an integer"));
  EXPECT_THAT(failure(fresh().text(R"({"signal": "start", "sample_rate": 5})")),
              HasSubstr("sample_rate"));
  auto odd = fresh();
  odd.text(R"({"signal": "start"})");
  EXPECT_THAT(failure(odd.send(false, "abc")), HasSubstr("3 bytes is not a whole number"));
  auto twice = fresh();
  twice.text(R"({"signal": "start"})");
  EXPECT_THAT(failure(twice.text(R"({"signal": "start"})")), HasSubstr("came twice"));
  auto long_stream = fresh(0.25);
  long_stream.text(R"({"signal": "start"})");
  EXPECT_FALSE(long_stream.pcm(torch::zeros({3200})).close);
  EXPECT_THAT(failure(long_stream.pcm(torch::zeros({3200}))), HasSubstr("max_audio_seconds"));
  auto short_stream = fresh();
  short_stream.text(R"({"signal": "start"})");
  short_stream.pcm(torch::zeros({100}));
  EXPECT_THAT(failure(short_stream.text(R"({"signal": "end"})")), HasSubstr("too short"));
  // After the pool stops, a message is refused, not lost.
  auto late = fresh();
  pool.stop();
  EXPECT_THAT(failure(late.text(R"({"signal": "start"})")), HasSubstr("shutting down"));
}

TEST(SpeechStream, AnEncoderStreamsItsFramesAsTheLibrarysStream) {
  const auto encoder = std::make_shared<const SpeechEncoder>(kMicro);
  TaskPool pool(1);
  torch::manual_seed(9);
  const auto signal =
      ((0.2 * torch::randn({20000})) * 32768.0).round().clamp(-32768, 32767) / 32768.0;
  auto library = encoder->stream(16000, 4);
  std::vector<torch::Tensor> expected;
  StreamDriver driver(std::make_shared<SpeechStream>(nullptr, encoder, 60.0, 4, pool, nullptr));
  driver.text(R"({"signal": "start"})");
  std::vector<torch::Tensor> got;
  const auto collect = [&](const StreamReply& reply) {
    for (size_t i = 0; i + 1 < reply.messages.size(); ++i) {
      if (!reply.messages[i].text) continue;
      const auto header = json::parse(reply.messages[i].data);
      if (header["type"] != "encoded") continue;
      const auto& binary = reply.messages[i + 1];
      EXPECT_FALSE(binary.text);
      const int64_t k = header["frames"], d = header["dim"];
      ASSERT_EQ(binary.data.size(), static_cast<size_t>(k * d) * sizeof(float));
      auto frames = torch::empty({k, d});
      std::memcpy(frames.data_ptr<float>(), binary.data.data(), binary.data.size());
      got.push_back(frames);
    }
  };
  for (int64_t first = 0; first < signal.size(0); first += 3000) {
    const auto piece = signal.narrow(0, first, std::min<int64_t>(3000, signal.size(0) - first));
    expected.push_back(library.push(piece));
    collect(driver.pcm(piece));
  }
  expected.push_back(library.finish());
  const auto end = driver.text(R"({"signal": "end"})");
  collect(end);
  EXPECT_TRUE(end.close);
  const auto last = message_json(end, end.messages.size() - 1);
  const auto all = torch::cat(expected);
  EXPECT_EQ(last, json({{"status", "ok"}, {"type", "speech_end"}, {"frames", all.size(0)}}));
  EXPECT_TRUE(torch::equal(torch::cat(got), all));
}

}  // namespace test_served_audio
}  // namespace attnzoo::serve
