#include <attnzoo/api/intra_op_threads.h>

#include <ATen/Parallel.h>

#include <dlfcn.h>

namespace attnzoo {

void use_intra_op_threads(int threads) {
  at::get_num_threads();
  at::internal::lazy_init_num_threads();
  // Looked up at run time: a LibTorch without OpenMP has nothing to change.
  using SetThreads = void (*)(int);
  static const auto set_threads =
      reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set_threads) set_threads(threads < 1 ? 1 : threads);
}

void use_one_intra_op_thread() { use_intra_op_threads(1); }

}  // namespace attnzoo
