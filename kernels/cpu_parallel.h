// parallel_for over LibTorch's intra-op threads, for attnzoo's own CPU loops.
//
// LibTorch's at::parallel_for is a header template: with the PyPI wheel (built on OpenMP) its team
// is a `#pragma omp parallel` compiled into the caller, and in a translation unit built without
// OpenMP the pragma vanishes and every range runs on the calling thread. attnzoo is built without
// OpenMP (clang cannot target the GNU runtime the wheel ships, and a second runtime would bring a
// second team of threads), so this one starts the team itself, through the GNU OpenMP runtime
// LibTorch has loaded (GOMP_parallel, looked up at run time): the loops run on the same threads,
// with the same count (at::set_num_threads), as LibTorch's own ops. Where LibTorch runs on
// another threading backend, at::parallel_for does the work (its native backend is a library
// call, which needs no OpenMP in the caller).
#pragma once

#include <cstdint>
#include <functional>

namespace attnzoo::kernels {

// Calls f(b, e) on disjoint ranges covering [begin, end), as at::parallel_for does: at most one
// range per thread, none shorter than `grain` elements (but the last), all on the calling thread
// when the range is at most `grain` long, inside another parallel region, or with one thread. An
// exception thrown by f is rethrown here (the first, when several ranges throw). Under
// ThreadSanitizer every range runs on the calling thread: it cannot see the runtime's own
// synchronisation.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& f);

}  // namespace attnzoo::kernels
