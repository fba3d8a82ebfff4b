#include "tools/cli/bench_model.h"

#include "tools/bench/op_profile.h"
#include "tools/bench/timing.h"
#include "tools/cli/bench_machine.h"

#include <attnzoo/api/inference_dtype.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/core/dtype_device.h>
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/cuda_graph.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace attnzoo::cli {

int run_model_bench(const ModelBenchOptions& o) {
  const auto device = parse_device("--device", o.device);
  if (o.cuda_graph && o.device != "cuda") {
    throw Error("--cuda-graph: CUDA graphs need --device cuda");
  }
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));
  const auto config = resolve_model_config(o.model, o.overrides);
  torch::manual_seed(0);
  auto model = build_model(config);
  const auto dtype = parse_inference_dtype("--dtype", o.dtype, device, /*accept_fp64=*/true);
  model.module->eval();
  model.module->to(device, dtype);

  // The input: seeded, so that two runs (e.g. fp32 and bf16) see the same numbers.
  torch::manual_seed(1);
  const auto frames =
      o.frames > 0 ? o.frames : static_cast<int64_t>(o.seconds * 1000.0 / config.frame_shift_ms());
  const auto input = model.family().random_input(config, o.batch, frames).values;
  const auto on_device = input.to(device, dtype);
  // The model's first output: the logits of a classifier, the encoded frames of an encoder.
  const auto eager = [&](const torch::Tensor& x) {
    torch::InferenceMode inference;
    return model.forward({x}).front().second;
  };
  std::unique_ptr<CudaGraphForward> graph;
  if (o.cuda_graph) graph = std::make_unique<CudaGraphForward>(eager, on_device);
  const auto forward = [&] { return graph ? (*graph)(on_device) : eager(on_device); };
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  torch::Tensor output;
  const auto timings = bench::time_calls([&] { output = forward(); }, o.warmup, o.iterations, sync);
  const double med = timings.median();
  const double best = timings.min();
  std::printf("%s batch %lld %s%s %s%s threads %d: median %.3f ms, min %.3f ms over %lld calls\n",
              config.name.c_str(), static_cast<long long>(o.batch), dtype_name(dtype),
              config.inference.quantize == Quantization::kInt8 ? " int8" : "", o.device.c_str(),
              graph ? " (CUDA graph)" : "", torch::get_num_threads(), med, best,
              static_cast<long long>(o.iterations));
  // The op profile after the timed calls, so that the callbacks do not slow those.
  nlohmann::json ops = nlohmann::json::array();
  if (o.profile_ops > 0) {
    std::vector<bench::OpTime> rows;
    double profiled_ms = 0.0;
    {
      bench::OpProfile profile;
      const bench::Stopwatch watch;
      for (int64_t i = 0; i < o.profile_ops; ++i) {
        output = forward();
        sync();
      }
      profiled_ms = watch.elapsed_ms();
      rows = profile.rows();
    }
    const double per = 1.0 / static_cast<double>(o.profile_ops);
    double in_ops_ms = 0.0;
    for (const auto& row : rows) in_ops_ms += row.self_ms;
    std::printf("ops of %lld profiled forwards (%.3f ms each; self time, per forward):\n",
                static_cast<long long>(o.profile_ops), profiled_ms * per);
    std::printf("  %-44s %8s %10s %7s\n", "op", "calls", "ms", "share");
    const auto print_row = [&](const std::string& op, double calls, double ms) {
      std::printf("  %-44s %8.1f %10.3f %6.1f%%\n", op.c_str(), calls, ms,
                  100.0 * ms / (profiled_ms * per));
    };
    for (const auto& row : rows) {
      print_row(row.op, static_cast<double>(row.calls) * per, row.self_ms * per);
      ops.push_back({{"op", row.op},
                     {"calls_per_forward", static_cast<double>(row.calls) * per},
                     {"self_ms_per_forward", row.self_ms * per}});
    }
    print_row("(outside any op)", 0.0, (profiled_ms - in_ops_ms) * per);
  }
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", config.name},
                        {"batch", o.batch},
                        {"dtype", dtype_name(dtype)},
                        {"device", o.device},
                        {"cuda_graph", o.cuda_graph},
                        {"threads", torch::get_num_threads()},
                        {"input", input.sizes().vec()},
                        {"times_ms", timings.ms},
                        {"median_ms", med},
                        {"min_ms", best},
                        {"machine", machine_json(device)}};
    if (o.profile_ops > 0) j["ops"] = ops;
    j["machine"]["load_average_1min"] = json_number(load_average());
    io::write_file_atomically(o.json, j.dump(1) + "\n");
  }
  if (!o.output.empty()) {
    io::TensorDict tensors;
    tensors.insert("input", input.contiguous());
    tensors.insert("output", output.to(torch::kCPU, torch::kFloat).contiguous());
    io::save_safetensors(o.output, tensors, {{"model", config.name}, {"dtype", o.dtype}});
  }
  return 0;
}

}  // namespace attnzoo::cli
