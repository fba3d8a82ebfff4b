#include <attnzoo/train/distributed.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#if defined(ATTNZOO_WITH_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#if defined(ATTNZOO_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

namespace attnzoo {
namespace {

int64_t env_integer(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (*end != '\0' || parsed < min || parsed > max) {
    throw Error(std::string("environment variable ") + name + "='" + value +
                "': expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                "]");
  }
  return parsed;
}

}  // namespace

DistributedEnv DistributedEnv::from_environment() {
  DistributedEnv env;
  env.world_size = env_integer("WORLD_SIZE", 1, 1, 1 << 20);
  env.rank = env_integer("RANK", 0, 0, env.world_size - 1);
  env.local_rank = env_integer("LOCAL_RANK", env.rank, 0, 1 << 20);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) env.master_addr = addr;
  env.master_port = env_integer("MASTER_PORT", 29500, 1, 65535);
  if (env.world_size > 1 && !std::getenv("RANK")) {
    throw Error("WORLD_SIZE=" + std::to_string(env.world_size) +
                " but RANK is not set (launch each process with its RANK, as "
                "torchrun does)");
  }
  return env;
}

bool distributed_available(bool cuda) {
#if defined(ATTNZOO_WITH_NCCL)
  if (cuda) return true;
#endif
#if defined(ATTNZOO_WITH_GLOO)
  if (!cuda) return true;
#endif
  (void)cuda;
  return false;
}

#if defined(ATTNZOO_WITH_GLOO)

struct DataParallel::State {
  int64_t rank = 0, world = 1;
  c10::intrusive_ptr<c10d::Backend> group;
  bool sync = true;

  struct Bucket {
    std::vector<torch::Tensor> params;
    std::vector<int64_t> offsets;  // into flat, per param
    torch::Tensor flat;
    int64_t ready = 0;
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<Bucket> buckets;
  std::map<const void*, std::pair<size_t, size_t>> where;  // param impl -> (bucket, index)
  std::vector<torch::Tensor> written;  // per bucket: which params got a gradient (bool)
  size_t next_launch = 0;
  std::mutex mutex;

  // Launches the complete buckets in order (collectives must start in the same order on every
  // rank, whatever order the gradients arrived in).
  void launch_ready() {
    while (next_launch < buckets.size()) {
      auto& b = buckets[next_launch];
      if (b.ready < static_cast<int64_t>(b.params.size())) break;
      std::vector<at::Tensor> tensors = {b.flat};
      b.work = group->allreduce(tensors);
      b.launched = true;
      ++next_launch;
    }
  }

  void on_gradient(const torch::Tensor& param, const torch::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto [bi, pi] = where.at(param.unsafeGetTensorImpl());
    auto& b = buckets[bi];
    auto slot = b.flat.narrow(0, b.offsets[pi], param.numel()).view_as(param);
    // What earlier micro-batches accumulated, plus this one's.
    if (param.grad().defined()) {
      torch::add_out(slot, param.grad(), grad);
    } else {
      slot.copy_(grad);
    }
    written[bi][static_cast<int64_t>(pi)] = true;
    ++b.ready;
    launch_ready();
  }
};

DataParallel::DataParallel(const DistributedEnv& env, const torch::Device& device,
                           std::chrono::milliseconds timeout)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.rank = env.rank;
  s.world = env.world_size;
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<int>(env.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(env.rank) + ": cannot meet the other ranks at " +
                env.master_addr + ":" + std::to_string(env.master_port) +
                " (MASTER_ADDR, MASTER_PORT): " + e.what());
  }
  if (device.is_cuda()) {
#if defined(ATTNZOO_WITH_NCCL)
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    s.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(env.rank),
                                                          static_cast<int>(env.world_size), nccl);
#else
    throw Error("data-parallel training on CUDA needs NCCL, and this build has no NCCL headers");
#endif
  } else {
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr));
    s.group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(env.rank),
                                                          static_cast<int>(env.world_size), gloo);
  }
}

DataParallel::~DataParallel() = default;

int64_t DataParallel::rank() const { return state_->rank; }
int64_t DataParallel::world_size() const { return state_->world; }

void DataParallel::broadcast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& p : module.parameters()) tensors.push_back(p);
  for (auto& b : module.buffers()) tensors.push_back(b);
  for (auto& t : tensors) {
    std::vector<at::Tensor> one = {t.data()};
    state_->group->broadcast(one)->wait();
  }
}

void DataParallel::attach(torch::nn::Module& module, int64_t bucket_bytes) {
  auto& s = *state_;
  TORCH_CHECK_VALUE(s.buckets.empty(), "DataParallel: attach() once");
  auto params = module.parameters();
  std::reverse(params.begin(), params.end());
  State::Bucket current;
  int64_t bytes = 0;
  const auto close = [&] {
    if (current.params.empty()) return;
    int64_t total = 0;
    for (const auto& p : current.params) {
      current.offsets.push_back(total);
      total += p.numel();
    }
    current.flat = torch::zeros({total}, current.params.front().options());
    s.buckets.push_back(std::move(current));
    current = State::Bucket{};
    bytes = 0;
  };
  for (auto& p : params) {
    if (!p.requires_grad()) continue;
    TORCH_CHECK_VALUE(
        current.params.empty() || p.options().dtype() == current.params.front().options().dtype(),
        "DataParallel: parameters of mixed dtypes");
    s.where[p.unsafeGetTensorImpl()] = {s.buckets.size(), current.params.size()};
    current.params.push_back(p);
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
    if (bytes >= bucket_bytes) close();
  }
  close();
  for (const auto& b : s.buckets) {
    s.written.push_back(torch::zeros({static_cast<int64_t>(b.params.size())}, torch::kBool));
  }
  for (auto& b : s.buckets) {
    for (auto& p : b.params) {
      State* state = state_.get();
      torch::Tensor param = p;
      p.register_hook([state, param](const torch::Tensor& grad) {
        if (state->sync) state->on_gradient(param, grad);
        return grad;
      });
    }
  }
}

void DataParallel::set_sync(bool sync) { state_->sync = sync; }

void DataParallel::finish_gradients() {
  auto& s = *state_;
  torch::NoGradGuard no_grad;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    // Parameters that got no gradient in this backward: their own accumulation or zeros.
    for (size_t bi = 0; bi < s.buckets.size(); ++bi) {
      auto& b = s.buckets[bi];
      for (size_t pi = 0; pi < b.params.size(); ++pi) {
        if (s.written[bi][static_cast<int64_t>(pi)].item<bool>()) continue;
        auto slot = b.flat.narrow(0, b.offsets[pi], b.params[pi].numel());
        const auto& g = b.params[pi].grad();
        if (g.defined()) {
          slot.copy_(g.reshape({-1}));
        } else {
          slot.zero_();
        }
        ++b.ready;
      }
    }
    s.launch_ready();
  }
  const double scale = 1.0 / static_cast<double>(s.world);
  for (size_t bi = 0; bi < s.buckets.size(); ++bi) {
    auto& b = s.buckets[bi];
    TORCH_INTERNAL_ASSERT(b.launched, "DataParallel: bucket ", bi, " was not launched");
    b.work->wait();
    b.flat.mul_(scale);
    for (size_t pi = 0; pi < b.params.size(); ++pi) {
      auto& p = b.params[pi];
      const auto mean = b.flat.narrow(0, b.offsets[pi], p.numel()).view_as(p);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(mean);
      } else {
        p.mutable_grad() = mean.clone();
      }
    }
    b.ready = 0;
    b.launched = false;
    b.work.reset();
    s.written[bi].zero_();
  }
  s.next_launch = 0;
}

double DataParallel::mean(double value) {
  std::vector<at::Tensor> t = {torch::tensor({value}, torch::kDouble)};
  state_->group->allreduce(t)->wait();
  return t[0].item<double>() / static_cast<double>(state_->world);
}

void DataParallel::barrier() { state_->group->barrier()->wait(); }

#else  // no c10d process groups in this build

struct DataParallel::State {};

DataParallel::DataParallel(const DistributedEnv&, const torch::Device&, std::chrono::milliseconds) {
  throw Error(
      "WORLD_SIZE > 1: this build has no c10d process groups (configure with the gloo headers, "
      "Debian's libgloo-dev, for data-parallel training)");
}
DataParallel::~DataParallel() = default;
int64_t DataParallel::rank() const { return 0; }
int64_t DataParallel::world_size() const { return 1; }
void DataParallel::broadcast(torch::nn::Module&) {}
void DataParallel::attach(torch::nn::Module&, int64_t) {}
void DataParallel::set_sync(bool) {}
void DataParallel::finish_gradients() {}
double DataParallel::mean(double value) { return value; }
void DataParallel::barrier() {}

#endif

}  // namespace attnzoo
