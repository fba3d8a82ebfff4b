#include <attnzoo/serve/served_image_classifier.h>

#include <attnzoo/configs/model_family.h>
#include <attnzoo/preprocess/image/decode.h>
#include <attnzoo/serve/file_route.h>
#include <attnzoo/serve/model_job.h>

#include <torch/torch.h>

namespace attnzoo::serve {
namespace {

struct ImageJob : ModelJob {
  using ModelJob::ModelJob;
  torch::Tensor pixels;  // [rows, 3, H, W]
};

}  // namespace

ServedImageClassifier::ServedImageClassifier(std::string name,
                                             std::shared_ptr<const ImageClassifier> classifier)
    : ServedModel(std::move(name), "1"), classifier_(std::move(classifier)) {
  const auto& image = classifier_->config().image;
  const auto& config = classifier_->config();
  const int64_t classes = model_family(config.family).num_classes(config);
  inputs_ = {
      {"image", DataType::kBytes, {1}},
      {"pixels", DataType::kFp32, {image.channels, image.transform.height, image.transform.width}}};
  outputs_ = {{"logits", DataType::kFp32, {classes}},
              {"probabilities", DataType::kFp32, {classes}}};
}

std::shared_ptr<BatchJob> ServedImageClassifier::prepare(const InferRequest& request,
                                                         Completion done) const {
  const Tensor* image = request.input("image");
  const Tensor* pixels = request.input("pixels");
  if ((image == nullptr) == (pixels == nullptr) || request.inputs.size() != 1) {
    throw ProtocolError("model '" + name() +
                        "' takes one input: 'image' (BYTES [N, 1], encoded image files) or "
                        "'pixels' (FP32 [N, 3, H, W])");
  }
  auto outputs = resolve_outputs(request, outputs_, {"logits", "probabilities"});
  torch::Tensor rows;
  if (image != nullptr) {
    if (image->datatype != DataType::kBytes || image->shape.empty() || image->shape[0] < 1 ||
        image->elements() != image->shape[0]) {
      throw ProtocolError("input 'image' must be BYTES [N] or [N, 1] with N >= 1, got " +
                          std::string(to_string(image->datatype)) + " " + shape_text(image->shape));
    }
    std::vector<torch::Tensor> decoded;
    const auto files = image->byte_elements();
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string source = "input 'image'[" + std::to_string(i) + "]";
      try {
        decoded.push_back(classifier_->preprocess(
            decode_image_from_memory(files[i].data(), files[i].size(), source)));
      } catch (const Error& e) {
        throw ProtocolError(e.what());
      }
    }
    rows = torch::stack(decoded);
  } else {
    const auto& want = inputs_[1].dims;
    const bool fits = pixels->datatype == DataType::kFp32 && pixels->shape.size() == 4 &&
                      pixels->shape[0] >= 1 &&
                      std::equal(want.begin(), want.end(), pixels->shape.begin() + 1);
    if (!fits) {
      throw ProtocolError("input 'pixels' must be FP32 [N, " + std::to_string(want[0]) + ", " +
                          std::to_string(want[1]) + ", " + std::to_string(want[2]) + "], got " +
                          std::string(to_string(pixels->datatype)) + " " +
                          shape_text(pixels->shape));
    }
    rows = fp32_input(*pixels);
  }
  auto job = std::make_shared<ImageJob>(std::move(outputs), std::move(done), rows.size(0));
  job->pixels = std::move(rows);
  return job;
}

FileCall ServedImageClassifier::file_call(std::string file, const std::string& query) const {
  return classify_call(name(), "image", std::move(file), query);
}

BatchTiming ServedImageClassifier::run(std::vector<std::shared_ptr<BatchJob>>& jobs) const {
  const auto& labels = classifier_->labels();
  return run_stacked(
      jobs, [](ModelJob& job) { return static_cast<ImageJob&>(job).pixels; },
      [&](const torch::Tensor& batch) {
        auto logits = classifier_->logits(batch);
        auto probabilities = torch::softmax(logits.to(torch::kDouble), 1).to(torch::kFloat);
        return std::vector<torch::Tensor>{logits, probabilities};
      },
      [&](ModelJob& job, const std::vector<torch::Tensor>& results) {
        std::vector<OutputTensor> outputs;
        for (const auto& asked : job.outputs) {
          const auto& values = asked.name == "logits" ? results[0] : results[1];
          OutputTensor output;
          output.binary = asked.binary_data.value_or(false);
          output.tensor = asked.class_count > 0
                              ? classification_tensor(asked.name, values, asked.class_count, labels)
                              : fp32_tensor(asked.name, values);
          outputs.push_back(std::move(output));
        }
        return outputs;
      });
}

}  // namespace attnzoo::serve
