#include <attnzoo/models/cuda_graph.h>

#include <attnzoo/layers/attention_mask.h>  // shape_string

#if ATTNZOO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <torch/torch.h>

namespace attnzoo {

namespace {
constexpr const char* kCudaGraphWho = "CudaGraphForward";
}  // namespace

struct CudaGraphForward::Impl {
  torch::Tensor input, output;  // the graph's static buffers
#if ATTNZOO_WITH_CUDA
  // Made only once the checks pass: constructing one touches the CUDA runtime.
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

bool CudaGraphForward::built_with_cuda() { return ATTNZOO_WITH_CUDA != 0; }

CudaGraphForward::CudaGraphForward(Forward forward, const torch::Tensor& example, int64_t warmup)
    : impl_(std::make_unique<Impl>()) {
  TORCH_CHECK_VALUE(forward, kCudaGraphWho, ": no forward function");
  TORCH_CHECK_VALUE(example.defined(), kCudaGraphWho, ": the example input is undefined");
  TORCH_CHECK_VALUE(warmup >= 1, kCudaGraphWho,
                    ": warmup must be >= 1 (the capture needs the lazily ", "created state), got ",
                    warmup);
  TORCH_CHECK_VALUE(built_with_cuda(), kCudaGraphWho,
                    ": this build of attnzoo has no CUDA support (ATTNZOO_CUDA=OFF or a CPU-only "
                    "LibTorch)");
  TORCH_CHECK_VALUE(example.is_cuda(), kCudaGraphWho,
                    ": CUDA graphs record CUDA work; the example is on ", example.device().str());
#if ATTNZOO_WITH_CUDA
  const c10::cuda::CUDAGuard device_guard(example.device());
  torch::InferenceMode inference;
  impl_->input = example.clone();
  // Warm-up on a side stream, as torch.cuda.graphs does: the capture must not be the first call.
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, example.device().index());
  {
    // The side stream starts after what the caller queued (e.g. the example's own copy).
    at::cuda::CUDAEvent queued;
    queued.record(c10::cuda::getCurrentCUDAStream(example.device().index()));
    queued.block(side);
  }
  {
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    for (int64_t i = 0; i < warmup; ++i) forward(impl_->input);
    side.synchronize();
    try {
      impl_->graph = std::make_unique<at::cuda::CUDAGraph>();
      impl_->graph->capture_begin();
      impl_->output = forward(impl_->input);
      impl_->graph->capture_end();
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, kCudaGraphWho,
                  ": capturing the forward failed (a host synchronisation such as "
                  ".item(), or a host tensor copied to the device, inside it?): ",
                  e.what_without_backtrace());
    }
  }
  side.synchronize();
#else
  (void)forward;
#endif
}

CudaGraphForward::~CudaGraphForward() = default;

bool CudaGraphForward::accepts(const torch::Tensor& x) const {
  return x.defined() && x.sizes() == impl_->input.sizes() &&
         x.scalar_type() == impl_->input.scalar_type() && x.device() == impl_->input.device();
}

torch::Tensor CudaGraphForward::operator()(const torch::Tensor& x) {
  TORCH_CHECK_VALUE(accepts(x), kCudaGraphWho, ": the graph was recorded for ",
                    shape_string(impl_->input.sizes()), " ", impl_->input.scalar_type(), " on ",
                    impl_->input.device().str(), ", got ",
                    x.defined() ? shape_string(x.sizes()) + " " +
                                      std::string(c10::toString(x.scalar_type())) + " on " +
                                      x.device().str()
                                : std::string("an undefined tensor"));
#if ATTNZOO_WITH_CUDA
  const c10::cuda::CUDAGuard device_guard(x.device());
  torch::InferenceMode inference;
  impl_->input.copy_(x);
  impl_->graph->replay();
  return impl_->output.clone();
#else
  return {};
#endif
}

}  // namespace attnzoo
