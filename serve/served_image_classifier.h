// An ImageClassifier behind the server: images (encoded files, decoded and transformed on the
// receiving thread) or prepared pixels in, logits and probabilities out, many requests in one
// forward pass (served_model.h has the tensors).
#pragma once

#include <attnzoo/api/image_classifier.h>
#include <attnzoo/serve/served_model.h>

#include <memory>
#include <string>

namespace attnzoo::serve {

class ServedImageClassifier : public ServedModel {
 public:
  ServedImageClassifier(std::string name, std::shared_ptr<const ImageClassifier> classifier);

  const char* kind() const override { return "image_classifier"; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  const char* file_route() const override { return "classify"; }
  FileCall file_call(std::string file, const std::string& query) const override;
  std::shared_ptr<BatchJob> prepare(const InferRequest& request, Completion done) const override;
  BatchTiming run(std::vector<std::shared_ptr<BatchJob>>& jobs) const override;

 private:
  std::shared_ptr<const ImageClassifier> classifier_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

}  // namespace attnzoo::serve
