#include <attnzoo/serve/served_speech_encoder.h>

#include <attnzoo/configs/model_family.h>
#include <attnzoo/serve/file_route.h>
#include <attnzoo/serve/model_job.h>
#include <attnzoo/serve/speech_sequence.h>
#include <attnzoo/serve/speech_stream.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstring>

namespace attnzoo::serve {
namespace {

std::vector<TensorSpec> encoder_outputs(const SpeechEncoder& encoder) {
  const auto& config = encoder.config();
  const auto& family = model_family(config.family);
  // The width of the frames, whatever the family: one second of silence through the model.
  const int64_t rate = config.features->sample_rate;
  const int64_t width = encoder.encode_waveform(torch::zeros({rate}), rate).encoded.size(1);
  std::vector<TensorSpec> outputs{{"encoded", DataType::kFp32, {-1, width}},
                                  {"embedding", DataType::kFp32, {width}}};
  if (const int64_t vocab = family.ctc_vocab(config); vocab > 0) {
    outputs.push_back({"log_probs", DataType::kFp32, {-1, vocab}});
  }
  return outputs;
}

// The FP32 values of an output tensor, row by row of its last dimension, as JSON.
nlohmann::json fp32_json(const Tensor& tensor) {
  const int64_t width = tensor.shape.back();
  const auto count = static_cast<int64_t>(tensor.data.size() / sizeof(float));
  std::vector<float> values(static_cast<size_t>(count));
  std::memcpy(values.data(), tensor.data.data(), values.size() * sizeof(float));
  auto rows = nlohmann::json::array();
  for (int64_t first = 0; first < count; first += width) {
    rows.push_back(std::vector<float>(values.begin() + first, values.begin() + first + width));
  }
  return rows;
}

}  // namespace

ServedSpeechEncoder::ServedSpeechEncoder(std::string name,
                                         std::shared_ptr<const SpeechEncoder> encoder,
                                         AudioServing serving)
    : ServedAudioModel(std::move(name), encoder, serving, encoder_outputs(*encoder), {},
                       {"encoded", "log_probs"}) {}

FileCall ServedSpeechEncoder::file_call(std::string file, const std::string& query) const {
  check_query_keys(query, {"encoded"});
  const bool with_encoded = query_integer(query, "encoded", 0, 0, 1) == 1;
  FileCall call;
  call.request =
      file_request("audio", std::move(file), {{"embedding", false, 0}, {"encoded", false, 0}});
  call.answer = [model = name(), frame_ms = encoder().frame_period_ms(),
                 with_encoded](const std::vector<OutputTensor>& outputs) {
    const auto& embedding = outputs[0].tensor;
    const auto& encoded = outputs[1].tensor;  // [1, frames, D]
    const int64_t frames = encoded.shape[1];
    nlohmann::json body = {{"model", model},
                           {"frames", frames},
                           {"frame_ms", frame_ms},
                           {"seconds", static_cast<double>(frames) * frame_ms / 1000.0},
                           {"embedding", fp32_json(embedding).front()}};
    if (with_encoded) body["encoded"] = fp32_json(encoded);
    return body.dump();
  };
  return call;
}

std::shared_ptr<StreamHandler> ServedSpeechEncoder::open_stream(
    TaskPool& pool, std::shared_ptr<void> ticket) const {
  if (!no_stream_reason_.empty()) return nullptr;
  return std::make_shared<SpeechStream>(nullptr, encoder_ptr(), serving().max_audio_seconds,
                                        serving().stream_chunk, pool, std::move(ticket));
}

std::unique_ptr<SpeechSequence> ServedSpeechEncoder::open_sequence(
    int64_t sample_rate, std::shared_ptr<void> ticket) const {
  if (!no_stream_reason_.empty()) return nullptr;
  return encoder_sequence(encoder_ptr(), sample_rate, serving().max_audio_seconds,
                          serving().stream_chunk, std::move(ticket));
}

std::vector<OutputTensor> ServedSpeechEncoder::outputs_of(const std::vector<RequestedOutput>& asked,
                                                          const EncodedSpeech* utterances,
                                                          size_t count) const {
  std::vector<OutputTensor> outputs;
  for (const auto& output : asked) {
    OutputTensor tensor;
    tensor.binary = output.binary_data.value_or(false);
    if (output.name == "embedding") {
      std::vector<torch::Tensor> rows;
      for (size_t i = 0; i < count; ++i) rows.push_back(utterances[i].embedding);
      tensor.tensor = fp32_tensor(output.name, torch::stack(rows));
    } else {  // encoded or log_probs: one utterance (prepare checked)
      const auto& u = utterances[0];
      tensor.tensor = fp32_tensor(
          output.name, (output.name == "encoded" ? u.encoded : u.log_probs).unsqueeze(0));
    }
    outputs.push_back(std::move(tensor));
  }
  return outputs;
}

}  // namespace attnzoo::serve
