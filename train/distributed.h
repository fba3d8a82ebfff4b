// Data-parallel training on LibTorch's c10d process groups (Gloo for CPU tensors, NCCL for CUDA),
// launched as torchrun launches: every process reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// and LOCAL_RANK from its environment, rank 0 hosts the TCPStore the others meet at.
//
// Gradients are averaged in buckets while the backward pass is still running: a hook on each
// parameter copies its gradient (plus what earlier micro-batches accumulated) into its bucket,
// and a full bucket is all-reduced asynchronously, in bucket order on every rank (collectives must
// be issued in the same order everywhere). finish_gradients() waits for the rest and writes the
// means into the parameters' .grad: every rank then holds the gradient of the whole global batch.
#pragma once

#include <attnzoo/core/error.h>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnzoo {

struct DistributedEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  bool enabled() const { return world_size > 1; }
  // From the environment (torchrun's variables); WORLD_SIZE unset or 1: a single process. Throws
  // attnzoo::Error naming the variable for a malformed or inconsistent value.
  static DistributedEnv from_environment();
};

// Whether this build has c10d's Gloo (CPU) and NCCL (CUDA) process groups.
bool distributed_available(bool cuda);

class DataParallel {
 public:
  // Joins the group: rank 0 listens on master_addr:master_port; all wait for world_size ranks
  // (up to `timeout`). `device` selects Gloo (CPU) or NCCL (CUDA). Throws naming the variable or
  // the address when the group cannot form.
  DataParallel(const DistributedEnv& env, const torch::Device& device,
               std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~DataParallel();

  int64_t rank() const;
  int64_t world_size() const;

  // Rank 0's parameters and buffers to every rank.
  void broadcast(torch::nn::Module& module);
  // Hooks every parameter that requires grad, in buckets of about `bucket_bytes` (filled in
  // reverse registration order, the order gradients tend to arrive in).
  void attach(torch::nn::Module& module, int64_t bucket_bytes = 25 << 20);
  // Whether the coming backward pass reduces its gradients: false for all but the last
  // micro-batch of an accumulated step (their gradients simply accumulate locally).
  void set_sync(bool sync);
  // After the synchronising backward: waits for every bucket (launching those whose parameters
  // got no gradient, with zeros) and sets each parameter's .grad to the mean over the ranks.
  void finish_gradients();
  // The mean over the ranks of a number (a loss, for logging).
  double mean(double value);
  void barrier();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace attnzoo
