#include <attnzoo/serve/model_job.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace attnzoo::serve {
std::vector<RequestedOutput> resolve_outputs(const InferRequest& request,
                                             const std::vector<TensorSpec>& specs,
                                             const std::set<std::string>& classifiable) {
  std::vector<RequestedOutput> outputs;
  if (request.outputs.empty()) {
    for (const auto& spec : specs) {
      RequestedOutput output;
      output.name = spec.name;
      output.binary_data = request.binary_data_output;
      outputs.push_back(output);
    }
    return outputs;
  }
  for (auto output : request.outputs) {
    bool known = false;
    for (const auto& spec : specs) known = known || spec.name == output.name;
    if (!known) {
      std::string names;
      for (const auto& spec : specs) names += (names.empty() ? "" : ", ") + spec.name;
      throw ProtocolError("unknown output '" + output.name + "' (the model gives " + names + ")");
    }
    if (output.class_count > 0 && classifiable.count(output.name) == 0) {
      throw ProtocolError("output '" + output.name + "' does not take a classification parameter");
    }
    if (!output.binary_data) output.binary_data = request.binary_data_output;
    outputs.push_back(output);
  }
  return outputs;
}

int failure_status(FailureReason reason) {
  switch (reason) {
    case FailureReason::kRejected:
      return 503;
    case FailureReason::kTimeout:
      return 504;
    case FailureReason::kInvalid:
      return 400;
    case FailureReason::kBackend:
      return 500;
  }
  return 500;
}

void ModelJob::fail(FailureReason reason, const std::string& message) {
  InferOutcome outcome;
  outcome.status = failure_status(reason);
  outcome.reason = reason;
  outcome.error = message;
  complete(std::move(outcome));
}

void ModelJob::complete(InferOutcome outcome) {
  if (completed_.exchange(true)) return;
  done_(std::move(outcome));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

Tensor fp32_tensor(const std::string& name, const torch::Tensor& values) {
  const auto v = values.to(torch::kCPU, torch::kFloat).contiguous();
  Tensor tensor;
  tensor.name = name;
  tensor.datatype = DataType::kFp32;
  tensor.shape.assign(v.sizes().begin(), v.sizes().end());
  tensor.data.assign(reinterpret_cast<const char*>(v.data_ptr<float>()),
                     static_cast<size_t>(v.numel()) * sizeof(float));
  return tensor;
}

Tensor classification_tensor(const std::string& name, const torch::Tensor& values, int64_t k,
                             const std::vector<std::string>& labels) {
  const auto v = values.to(torch::kCPU, torch::kFloat).contiguous();
  k = std::min<int64_t>(k, v.size(1));
  const auto [top, index] = v.topk(k, 1);
  // Accessors, not a tensor view and .item() per element: this runs for every request.
  const auto scores = top.accessor<float, 2>();
  const auto indices = index.accessor<int64_t, 2>();
  std::vector<std::string> elements;
  for (int64_t r = 0; r < v.size(0); ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = indices[r][j];
      char number[48];
      std::snprintf(number, sizeof(number), "%.9g:%lld", scores[r][j], static_cast<long long>(i));
      std::string element = number;
      if (!labels.empty()) element += ":" + labels[static_cast<size_t>(i)];
      elements.push_back(std::move(element));
    }
  }
  Tensor tensor;
  tensor.name = name;
  tensor.datatype = DataType::kBytes;
  tensor.shape = {v.size(0), k};
  tensor.data = pack_bytes(elements);
  return tensor;
}

torch::Tensor fp32_input(const Tensor& input) {
  auto values =
      torch::empty(std::vector<int64_t>(input.shape.begin(), input.shape.end()), torch::kFloat);
  std::memcpy(values.data_ptr<float>(), input.data.data(), input.data.size());
  return values;
}

BatchTiming run_stacked(
    std::vector<std::shared_ptr<BatchJob>>& jobs,
    const std::function<torch::Tensor(ModelJob&)>& rows_of,
    const std::function<std::vector<torch::Tensor>(const torch::Tensor&)>& compute,
    const std::function<std::vector<OutputTensor>(ModelJob&, const std::vector<torch::Tensor>&)>&
        outputs_of) {
  BatchTiming timing;
  try {
    auto start = Clock::now();
    std::vector<torch::Tensor> rows;
    for (auto& job : jobs) rows.push_back(rows_of(static_cast<ModelJob&>(*job)));
    const auto batch = rows.size() == 1 ? rows.front() : torch::cat(rows);
    timing.input_us = microseconds_between(start, Clock::now());
    start = Clock::now();
    const auto results = compute(batch);
    timing.infer_us = microseconds_between(start, Clock::now());
    start = Clock::now();
    int64_t first = 0;
    for (auto& job : jobs) {
      auto& model_job = static_cast<ModelJob&>(*job);
      std::vector<torch::Tensor> own;
      for (const auto& result : results) own.push_back(result.narrow(0, first, model_job.rows()));
      first += model_job.rows();
      InferOutcome outcome;
      outcome.outputs = outputs_of(model_job, own);
      model_job.complete(std::move(outcome));
    }
    timing.output_us = microseconds_between(start, Clock::now());
  } catch (const std::exception& e) {
    for (auto& job : jobs) job->fail(FailureReason::kBackend, e.what());
  }
  return timing;
}

}  // namespace attnzoo::serve
