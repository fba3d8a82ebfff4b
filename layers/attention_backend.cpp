#include <attnzoo/layers/attention_backend.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>

namespace attnzoo {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<AttentionBackend>> backends;
  std::vector<const AttentionBackend*> by_priority;  // "auto" order
};

void add_locked(Registry& registry, std::unique_ptr<AttentionBackend> backend) {
  TORCH_CHECK(backend, "register_attention_backend: null backend");
  const std::string name = backend->name();
  TORCH_CHECK(name != "auto", "register_attention_backend: 'auto' is reserved");
  TORCH_CHECK(!registry.backends.count(name), "register_attention_backend: a backend named '", name,
              "' is already registered");
  registry.by_priority.push_back(backend.get());
  std::stable_sort(registry.by_priority.begin(), registry.by_priority.end(),
                   [](const AttentionBackend* a, const AttentionBackend* b) {
                     return a->priority() > b->priority();
                   });
  registry.backends.emplace(name, std::move(backend));
}

// The builtin backends: adding one is one line here and one file.
void register_builtin_attention_backends(Registry& registry) {
  add_locked(registry, make_math_attention_backend());
  add_locked(registry, make_sdpa_attention_backend());
  add_locked(registry, make_flash_attention_backend());
  add_locked(registry, make_chunked_attention_backend());
  add_locked(registry, make_block_local_attention_backend());
  add_locked(registry, make_linear_attention_backend());
}

Registry& registry() {
  static Registry* instance = [] {
    auto* r = new Registry();  // never destroyed: backends may be used during static teardown
    register_builtin_attention_backends(*r);
    return r;
  }();
  return *instance;
}

std::string known_names(const Registry& r) {
  std::ostringstream out;
  out << "auto";
  for (const auto* b : r.by_priority) out << ", " << b->name();
  return out.str();
}

}  // namespace

void register_attention_backend(std::unique_ptr<AttentionBackend> backend) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  add_locked(r, std::move(backend));
}

std::vector<std::string> attention_backend_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto* b : r.by_priority) names.push_back(b->name());
  return names;
}

bool is_attention_backend(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return name == "auto" || r.backends.count(name) > 0;
}

bool is_exact_attention_backend(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.backends.find(name);
  return name == "auto" || (it != r.backends.end() && it->second->exact());
}

const AttentionBackend& select_attention_backend(const std::string& requested,
                                                 const AttentionProblem& problem) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (requested == "auto") {
    std::ostringstream reasons;
    for (const auto* b : r.by_priority) {
      if (!b->chosen_by_auto(problem)) continue;
      const std::string why = b->unsupported_reason(problem);
      if (why.empty()) return *b;
      reasons << "\n  " << b->name() << ": " << why;
    }
    TORCH_CHECK(false, "attention: no backend supports this problem:", reasons.str());
  }
  const auto it = r.backends.find(requested);
  TORCH_CHECK_VALUE(it != r.backends.end(), "attention: unknown backend '", requested,
                    "'; known backends: ", known_names(r));
  const std::string why = it->second->unsupported_reason(problem);
  TORCH_CHECK_VALUE(why.empty(), "attention: backend '", requested,
                    "' cannot run this problem: ", why);
  return *it->second;
}

std::string attention_backend_unsupported_reason(const std::string& name,
                                                 const AttentionProblem& problem) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.backends.find(name);
  TORCH_CHECK_VALUE(it != r.backends.end(), "attention: unknown backend '", name,
                    "'; known backends: ", known_names(r));
  return it->second->unsupported_reason(problem);
}

AttentionResult scaled_dot_product_attention(AttentionProblem problem, const std::string& backend) {
  const auto& q = problem.query;
  const auto& k = problem.key;
  const auto& v = problem.value;
  const char* who = "attention";
  TORCH_CHECK_VALUE(q.defined() && k.defined() && v.defined(), who,
                    ": query, key and value must all be defined");
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, who,
                    ": query, key and value must be [B, H, L|S, E], got query ",
                    shape_string(q.sizes()), ", key ", shape_string(k.sizes()), ", value ",
                    shape_string(v.sizes()));
  TORCH_CHECK_VALUE(k.size(0) == q.size(0) && v.size(0) == q.size(0), who,
                    ": batch mismatch: query has B = ", q.size(0), ", key B = ", k.size(0),
                    ", value B = ", v.size(0));
  TORCH_CHECK_VALUE(k.size(1) == q.size(1) && v.size(1) == q.size(1), who,
                    ": head count mismatch: query has H = ", q.size(1), ", key H = ", k.size(1),
                    ", value H = ", v.size(1));
  TORCH_CHECK_VALUE(k.size(3) == q.size(3), who, ": key head_dim must equal query head_dim ",
                    q.size(3), ", got ", k.size(3));
  TORCH_CHECK_VALUE(v.size(2) == k.size(2), who, ": value length must equal key length ", k.size(2),
                    ", got ", v.size(2));
  TORCH_CHECK_VALUE(q.size(2) >= 1 && k.size(2) >= 1, who,
                    ": query and key lengths must be >= 1, got L = ", q.size(2),
                    ", S = ", k.size(2));
  TORCH_CHECK_VALUE(q.is_floating_point(), who, ": query must be floating point, got ",
                    q.scalar_type());
  TORCH_CHECK_VALUE(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), who,
                    ": query, key and value must share a dtype, got ", q.scalar_type(), ", ",
                    k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK_VALUE(k.device() == q.device() && v.device() == q.device(), who,
                    ": query, key and value must be on one device, got ", q.device(), ", ",
                    k.device(), ", ", v.device());
  TORCH_CHECK_VALUE(problem.dropout_p >= 0.0 && problem.dropout_p < 1.0, who,
                    ": dropout must lie in [0, 1), got ", problem.dropout_p);
  TORCH_CHECK_VALUE(std::isfinite(problem.scale) && problem.scale >= 0.0, who,
                    ": scale must be finite and >= 0 (0 = 1/sqrt(head_dim)), got ", problem.scale);
  const auto& bo = problem.options;
  TORCH_CHECK_VALUE(bo.chunk_size() >= 1, who, ": chunk_size must be >= 1, got ", bo.chunk_size());
  TORCH_CHECK_VALUE(bo.block_size() >= 1, who, ": block_size must be >= 1, got ", bo.block_size());
  TORCH_CHECK_VALUE(bo.window() >= 0, who, ": window must be >= 0, got ", bo.window());
  TORCH_CHECK_VALUE(bo.global_tokens() >= 0, who, ": global_tokens must be >= 0, got ",
                    bo.global_tokens());
  if (problem.scale == 0.0) problem.scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  problem.mask.validate(problem.batch(), problem.heads(), problem.query_len(), problem.key_len(),
                        who);
  return select_attention_backend(backend, problem).run(problem);
}

}  // namespace attnzoo
