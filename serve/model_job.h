// What the served models share: a job that carries one request's prepared input rows and the
// outputs it asked for, and the conversions between LibTorch tensors and the protocol's tensors.
// Internal to serve/.
#pragma once

#include <attnzoo/serve/served_model.h>

#include <torch/types.h>

#include <atomic>
#include <set>
#include <string>
#include <vector>

namespace attnzoo::serve {

// The outputs a request asked for, each with its binary flag settled (the output's binary_data
// parameter, else the request's binary_data_output); every output of `specs` when it named none.
// ProtocolError for a name the model does not give, or a classification asked of an output not
// in `classifiable`.
std::vector<RequestedOutput> resolve_outputs(const InferRequest& request,
                                             const std::vector<TensorSpec>& specs,
                                             const std::set<std::string>& classifiable);

class ModelJob : public BatchJob {
 public:
  ModelJob(std::vector<RequestedOutput> outputs, Completion done, int64_t rows)
      : outputs(std::move(outputs)), done_(std::move(done)), rows_(rows) {}
  int64_t rows() const override { return rows_; }
  void fail(FailureReason reason, const std::string& message) override;
  // Hands the outcome to the request; later calls do nothing.
  void complete(InferOutcome outcome);

  const std::vector<RequestedOutput> outputs;

 private:
  Completion done_;
  int64_t rows_;
  std::atomic<bool> completed_{false};
};

// The HTTP status of a failure: 503 rejected, 504 timeout, 400 invalid, 500 the model's.
int failure_status(FailureReason reason);

// "[2, 3, 224, 224]"
std::string shape_text(const std::vector<int64_t>& shape);

// A float tensor (any shape) as an FP32 protocol tensor named `name`.
Tensor fp32_tensor(const std::string& name, const torch::Tensor& values);
// values [rows, C] -> BYTES [rows, k] of "value:index:label" (label omitted when `labels` is
// empty), each row's k largest first: Triton's classification extension.
Tensor classification_tensor(const std::string& name, const torch::Tensor& values, int64_t k,
                             const std::vector<std::string>& labels);
// An FP32 input as a float tensor of its shape (a copy: the request's bytes are not aligned).
torch::Tensor fp32_input(const Tensor& input);

// Runs `compute` over the jobs' stacked rows and completes each job with its own rows; on an
// exception every job fails with the message (status 500). `rows_of(job)` gives a job's input
// rows, `outputs_of(job, first_row)` its outputs. Returns the stages' timings.
BatchTiming run_stacked(
    std::vector<std::shared_ptr<BatchJob>>& jobs,
    const std::function<torch::Tensor(ModelJob&)>& rows_of,
    const std::function<std::vector<torch::Tensor>(const torch::Tensor&)>& compute,
    const std::function<std::vector<OutputTensor>(ModelJob&, const std::vector<torch::Tensor>&)>&
        outputs_of);

}  // namespace attnzoo::serve
