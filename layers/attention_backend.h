// Attention backends: interchangeable implementations of softmax(q·kᵀ·scale + bias, masked)·v.
//
// A backend is one class in one file plus one line in register_builtin_attention_backends()
// (attention_backend.cpp). The layer (attention.h) and the functional entry point below select a
// backend by name; "auto" asks each registered backend, in priority order, whether it supports the
// problem and takes the first that does.
#pragma once

#include <attnzoo/layers/attention_mask.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnzoo {

// Settings of the backends that take any (ignored by the others). Validated by
// scaled_dot_product_attention.
struct AttentionBackendOptions {
  // chunked: queries and keys processed per chunk; peak memory O(L·chunk_size) per head.
  TORCH_ARG(int64_t, chunk_size) = 256;
  // block_local: block length b; each query sees the keys of its own block ...
  TORCH_ARG(int64_t, block_size) = 64;
  // ... plus `window` keys on each side of that block (a sliding-window overlap; 0 = none) ...
  TORCH_ARG(int64_t, window) = 0;
  // ... and the first `global_tokens` positions, which also attend everywhere (e.g. a class token).
  TORCH_ARG(int64_t, global_tokens) = 0;
};

// One attention computation, as a backend sees it. The tensors may be strided views (e.g. slices
// of a fused QKV projection); backends must not assume contiguity.
struct AttentionProblem {
  torch::Tensor query;     // [B, H, L, E]
  torch::Tensor key;       // [B, H, S, E]
  torch::Tensor value;     // [B, H, S, Ev]
  AttentionMask mask;      // validated against the sizes above
  double scale = 0.0;      // multiplies q·kᵀ
  double dropout_p = 0.0;  // on the probabilities; 0 outside training
  bool need_weights = false;
  AttentionBackendOptions options;

  int64_t batch() const { return query.size(0); }
  int64_t heads() const { return query.size(1); }
  int64_t query_len() const { return query.size(2); }
  int64_t key_len() const { return key.size(2); }
};

struct AttentionResult {
  torch::Tensor output;   // [B, H, L, Ev]
  torch::Tensor weights;  // [B, H, L, S] probabilities before dropout; defined iff need_weights
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  // The name used in options and YAML ("math", "sdpa", ...).
  virtual std::string name() const = 0;
  // Selection order of "auto": higher first.
  virtual int priority() const = 0;
  // True when the backend computes softmax attention exactly (up to rounding). "auto" only
  // chooses exact backends; approximations and restricted patterns (linear, block_local) are used
  // only when asked for by name.
  virtual bool exact() const { return true; }
  // Whether "auto" may choose it for `problem` (when it supports it). Exact backends by default.
  virtual bool chosen_by_auto(const AttentionProblem& /*problem*/) const { return exact(); }
  // Empty when the backend computes `problem` exactly; otherwise why not (shown to users who
  // asked for this backend by name).
  virtual std::string unsupported_reason(const AttentionProblem& problem) const = 0;
  virtual AttentionResult run(const AttentionProblem& problem) const = 0;
  // The mask under which `math` computes what this backend computes for `problem`, so that
  // probabilities can be shown for it (need_weights); std::nullopt when no mask does (an
  // approximation). Exact backends: the problem's own mask.
  virtual std::optional<AttentionMask> math_equivalent(const AttentionProblem& problem) const {
    return exact() ? std::optional<AttentionMask>(problem.mask) : std::nullopt;
  }
};

// Registers a backend; a second backend of the same name is an error.
void register_attention_backend(std::unique_ptr<AttentionBackend> backend);
// Names of the registered backends, in "auto" order, without "auto" itself.
std::vector<std::string> attention_backend_names();
// True for "auto" and every registered name.
bool is_attention_backend(const std::string& name);
// True for "auto" and the backends that compute softmax attention exactly
// (AttentionBackend::exact).
bool is_exact_attention_backend(const std::string& name);
// The backend that `requested` ("auto" or a name) resolves to for `problem`. Throws naming the
// known backends for an unknown name, or the reason when the named backend cannot take `problem`.
const AttentionBackend& select_attention_backend(const std::string& requested,
                                                 const AttentionProblem& problem);

// Empty when the backend `name` (not "auto") can run `problem`; otherwise why not. Throws for an
// unknown name, as select_attention_backend does.
std::string attention_backend_unsupported_reason(const std::string& name,
                                                 const AttentionProblem& problem);

// Validates `problem` (shapes, dtypes, devices, mask) and runs it on the selected backend. The
// functional form of the layer, for callers that project q, k and v themselves.
AttentionResult scaled_dot_product_attention(AttentionProblem problem,
                                             const std::string& backend = "auto");

// Builtin backends (one file each).
std::unique_ptr<AttentionBackend> make_math_attention_backend();
std::unique_ptr<AttentionBackend> make_sdpa_attention_backend();
std::unique_ptr<AttentionBackend> make_flash_attention_backend();
std::unique_ptr<AttentionBackend> make_chunked_attention_backend();
std::unique_ptr<AttentionBackend> make_block_local_attention_backend();
std::unique_ptr<AttentionBackend> make_linear_attention_backend();

}  // namespace attnzoo
