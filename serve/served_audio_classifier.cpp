#include <attnzoo/serve/served_audio_classifier.h>

#include <attnzoo/configs/model_family.h>
#include <attnzoo/serve/file_route.h>
#include <attnzoo/serve/model_job.h>

#include <torch/torch.h>

namespace attnzoo::serve {
namespace {

std::vector<TensorSpec> classifier_outputs(const AudioClassifier& classifier) {
  const auto& config = classifier.config();
  const int64_t classes = model_family(config.family).num_classes(config);
  return {{"logits", DataType::kFp32, {classes}}, {"probabilities", DataType::kFp32, {classes}}};
}

}  // namespace

ServedAudioClassifier::ServedAudioClassifier(std::string name,
                                             std::shared_ptr<const AudioClassifier> classifier,
                                             AudioServing serving)
    : ServedAudioModel(std::move(name),
                       std::shared_ptr<const SpeechEncoder>(classifier, &classifier->encoder()),
                       serving, classifier_outputs(*classifier), {"logits", "probabilities"}, {}),
      classifier_(std::move(classifier)) {}

FileCall ServedAudioClassifier::file_call(std::string file, const std::string& query) const {
  return classify_call(name(), "audio", std::move(file), query);
}

std::vector<OutputTensor> ServedAudioClassifier::outputs_of(
    const std::vector<RequestedOutput>& asked, const EncodedSpeech* utterances,
    size_t count) const {
  std::vector<torch::Tensor> rows;
  for (size_t i = 0; i < count; ++i) rows.push_back(utterances[i].logits);
  const auto logits = torch::stack(rows);
  const auto probabilities = torch::softmax(logits.to(torch::kDouble), 1).to(torch::kFloat);
  std::vector<OutputTensor> outputs;
  for (const auto& output : asked) {
    const auto& values = output.name == "logits" ? logits : probabilities;
    OutputTensor tensor;
    tensor.binary = output.binary_data.value_or(false);
    tensor.tensor =
        output.class_count > 0
            ? classification_tensor(output.name, values, output.class_count, classifier_->labels())
            : fp32_tensor(output.name, values);
    outputs.push_back(std::move(tensor));
  }
  return outputs;
}

}  // namespace attnzoo::serve
