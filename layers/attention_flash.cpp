// The `flash` backend: attnzoo's own fused attention kernels (kernels/flash_attn,
// FlashAttention-2's algorithm: O(L + S) memory, the log-sum-exp kept for the backward pass). They
// read q, k and v by strides, so the views of the fused QKV projection that the layer hands over go
// in without a copy; the output [B, L, H, E] is already the layout the output projection wants.
//
// The kernels take key lengths and causal masks natively and one additive bias [1|B, 1|H, L, S];
// the other masks become -inf in that bias: a key-padding mask [B, S] as a bias [B, 1, 1, S]
// broadcast along L by a zero stride (no [L, S] copy), a boolean attn_mask merged with the
// problem's own bias. A query that sees no key gets zeros, as on every backend.
//
// On CUDA (when the kernels are built) it runs bf16 and fp16 with head dims up to 128; on the CPU
// float32 and bfloat16 where the processor has AVX2 + FMA (the CPU kernel, flash_attn_cpu.cpp).
// `auto` prefers it on CUDA only with ATTNZOO_FLASH_AUTO=1 in the environment
// (tools/device_check.sh sets it). On the CPU `auto` takes it for bfloat16 and float32 inference
// where the processor has AVX512-BF16, whose dot products make it about twice as fast as
// LibTorch's sdpa in bfloat16, and where its float32 path measured ahead of sdpa too; elsewhere,
// and wherever gradients are recorded (its CPU backward is the LibTorch reference, with the
// [L, S] matrix in memory), sdpa stays (docs/benchmarks.md). Asked for by
// name, it runs whenever it supports the problem. No dropout; gradients through the op's autograd
// formula.
#include <attnzoo/kernels/ops.h>
#include <attnzoo/layers/attention_backend.h>

#include <cstdlib>
#include <limits>
#include <string>

namespace attnzoo {
namespace {

class FlashAttention final : public AttentionBackend {
 public:
  std::string name() const override { return "flash"; }
  int priority() const override { return 20; }  // ahead of sdpa (10)
  bool chosen_by_auto(const AttentionProblem& p) const override {
    if (p.query.is_cpu()) {
      const bool records_gradients =
          torch::GradMode::is_enabled() &&
          (p.query.requires_grad() || p.key.requires_grad() || p.value.requires_grad());
      // Inference only (the CPU backward is the reference's), on processors with AVX512-BF16:
      // bfloat16 through its dot products (about half sdpa's time), float32 through the AVX-512
      // path (on a Zen 5, whole fp32 ViTs 0.86-0.99 of their time with sdpa, int8 ViTs
      // 0.90-0.97). The AVX-512 processor measured without AVX512-BF16 (an Ice Lake) ran the
      // float32 kernel at 0.93-1.16 of sdpa's time: there, and on AVX2, sdpa stays.
      if (records_gradients || !kernels::flash_attention_cpu_bfloat16_products()) return false;
      const auto dtype = p.query.scalar_type();
      return dtype == torch::kBFloat16 ||
             (dtype == torch::kFloat && kernels::flash_attention_cpu_vector_width() == 16);
    }
    const char* opt_in = std::getenv("ATTNZOO_FLASH_AUTO");
    return p.query.is_cuda() && opt_in != nullptr && std::string(opt_in) == "1";
  }

  std::string unsupported_reason(const AttentionProblem& p) const override {
    if (p.need_weights) return "it does not return attention weights (need_weights); use math";
    const auto dtype = p.query.scalar_type();
    if (p.query.is_cpu()) {
      if (kernels::flash_attention_cpu_vector_width() == 0) {
        return "its CPU kernel needs AVX2 + FMA, which this processor lacks";
      }
      if (dtype != torch::kFloat && dtype != torch::kBFloat16) {
        return std::string("on the CPU it takes float32 and bfloat16, got ") + c10::toString(dtype);
      }
    } else {
      if (!ATTNZOO_WITH_CUDA) return "the CUDA kernels are not built (ATTNZOO_CUDA=OFF)";
      if (!p.query.is_cuda()) {
        return "it runs on CPU and CUDA tensors, got " + p.query.device().str();
      }
      if (dtype != torch::kHalf && dtype != torch::kBFloat16) {
        return std::string("on CUDA it takes float16 and bfloat16, got ") + c10::toString(dtype);
      }
    }
    if (p.query.is_cuda() && p.query.size(3) > kMaxHeadDim) {
      return "head_dim " + std::to_string(p.query.size(3)) + " > " + std::to_string(kMaxHeadDim);
    }
    if (p.value.size(3) != p.query.size(3)) {
      return "the value head_dim " + std::to_string(p.value.size(3)) +
             " differs from the query's " + std::to_string(p.query.size(3));
    }
    if (p.dropout_p > 0.0) return "it has no attention dropout (dropout_p > 0)";
    return {};
  }

  AttentionResult run(const AttentionProblem& p) const override {
    const auto& mask = p.mask;
    const int64_t L = p.query_len(), S = p.key_len();
    const auto device = p.query.device();
    std::optional<torch::Tensor> key_lengths;
    if (mask.key_lengths().defined()) key_lengths = mask.key_lengths().to(device, torch::kLong);

    // The additive bias of the kernel, float32 for half inputs (a finite bias stays finite, as
    // in float32 math: -1e9 in fp16 would be -inf), else the inputs' dtype: the problem's bias,
    // and -inf where the boolean masks exclude a key. Kept at its broadcast sizes; L and S are
    // expanded by zero strides.
    const auto dtype = p.query.scalar_type();
    const auto bias_dtype =
        dtype == torch::kHalf || dtype == torch::kBFloat16 ? torch::kFloat : dtype;
    torch::Tensor bias;
    if (mask.bias().defined()) bias = mask.bias().to(device, bias_dtype);
    const auto excluded = [&]() -> std::optional<torch::Tensor> {
      AttentionMask boolean;
      bool any = false;
      if (mask.key_padding_mask().defined()) {
        boolean.key_padding_mask(mask.key_padding_mask());
        any = true;
      }
      if (mask.attn_mask().defined()) {
        boolean.attn_mask(mask.attn_mask());
        any = true;
      }
      if (!any) return std::nullopt;
      const auto allowed = boolean.allowed(L, S, device);
      if (!allowed) return std::nullopt;
      return allowed->logical_not();
    }();
    if (excluded) {
      const double neg_inf = -std::numeric_limits<double>::infinity();
      if (bias.defined()) {
        bias = bias.masked_fill(*excluded, neg_inf);
      } else {
        bias =
            torch::zeros(excluded->sizes(), torch::TensorOptions().dtype(bias_dtype).device(device))
                .masked_fill(*excluded, neg_inf);
      }
    }
    if (bias.defined()) {
      while (bias.dim() < 4) bias = bias.unsqueeze(0);
      bias = bias.expand({bias.size(0), bias.size(1), L, S});
    }

    // [B, H, L, E] views -> the kernel's [B, L, H, E] views (no copies).
    const auto [out, lse] = kernels::flash_attention(
        p.query.transpose(1, 2), p.key.transpose(1, 2), p.value.transpose(1, 2), key_lengths,
        bias.defined() ? std::optional<torch::Tensor>(bias) : std::nullopt, mask.causal(),
        mask.causal_alignment() == CausalAlignment::kBottomRight, p.scale);
    (void)lse;
    AttentionResult result;
    result.output = out.transpose(1, 2);  // [B, H, L, E]
    return result;
  }

 private:
  static constexpr int64_t kMaxHeadDim = 128;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash_attention_backend() {
  return std::make_unique<FlashAttention>();
}

}  // namespace attnzoo
