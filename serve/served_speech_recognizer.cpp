#include <attnzoo/serve/served_speech_recognizer.h>

#include <attnzoo/api/transcript_json.h>
#include <attnzoo/serve/file_route.h>
#include <attnzoo/serve/speech_sequence.h>
#include <attnzoo/serve/speech_stream.h>

#include <nlohmann/json.hpp>

namespace attnzoo::serve {

ServedSpeechRecognizer::ServedSpeechRecognizer(std::string name,
                                               std::shared_ptr<const SpeechRecognizer> recognizer,
                                               AudioServing serving)
    : ServedAudioModel(
          std::move(name), std::shared_ptr<const SpeechEncoder>(recognizer, &recognizer->encoder()),
          serving, {{"text", DataType::kBytes, {1}}, {"transcript", DataType::kBytes, {1}}}, {},
          {}),
      recognizer_(std::move(recognizer)) {}

FileCall ServedSpeechRecognizer::file_call(std::string file, const std::string& query) const {
  check_query_keys(query, {});
  FileCall call;
  call.request = file_request("audio", std::move(file), {{"transcript", false, 0}});
  call.answer = [model = name()](const std::vector<OutputTensor>& outputs) {
    auto body = nlohmann::json::parse(outputs.front().tensor.byte_elements().front());
    body.erase("audio");
    body["model"] = model;
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  return call;
}

std::shared_ptr<StreamHandler> ServedSpeechRecognizer::open_stream(
    TaskPool& pool, std::shared_ptr<void> ticket) const {
  if (!no_stream_reason_.empty()) return nullptr;
  return std::make_shared<SpeechStream>(recognizer_, nullptr, serving().max_audio_seconds,
                                        serving().stream_chunk, pool, std::move(ticket));
}

std::unique_ptr<SpeechSequence> ServedSpeechRecognizer::open_sequence(
    int64_t sample_rate, std::shared_ptr<void> ticket) const {
  if (!no_stream_reason_.empty()) return nullptr;
  return recognizer_sequence(recognizer_, sample_rate, serving().max_audio_seconds,
                             serving().stream_chunk, std::move(ticket));
}

std::vector<OutputTensor> ServedSpeechRecognizer::outputs_of(
    const std::vector<RequestedOutput>& asked, const EncodedSpeech* utterances,
    size_t count) const {
  std::vector<std::string> texts, transcripts;
  for (size_t i = 0; i < count; ++i) {
    const auto transcript = recognizer_->decode(utterances[i]);
    if (!transcript.ok()) throw std::runtime_error(transcript.error);
    texts.push_back(transcript.best().text);
    transcripts.push_back(transcript_json(transcript));
  }
  std::vector<OutputTensor> outputs;
  for (const auto& output : asked) {
    OutputTensor tensor;
    tensor.binary = output.binary_data.value_or(false);
    tensor.tensor.name = output.name;
    tensor.tensor.datatype = DataType::kBytes;
    tensor.tensor.shape = {static_cast<int64_t>(count), 1};
    tensor.tensor.data = pack_bytes(output.name == "text" ? texts : transcripts);
    outputs.push_back(std::move(tensor));
  }
  return outputs;
}

}  // namespace attnzoo::serve
