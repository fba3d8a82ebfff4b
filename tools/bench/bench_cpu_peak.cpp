// bench_cpu_peak: the arithmetic peak of this processor's vector units on N threads, the ceiling
// against which the CPU benchmarks' GFLOP/s are read. Each thread runs a loop of independent
// multiply-adds on registers only (16 accumulators, more than an instruction's latency times the
// units that issue it), so that nothing but the arithmetic units limits it:
//   fp32  float32 FMA (vfmadd231ps): AVX-512, or AVX2 + FMA where the processor has no AVX-512;
//         2 FLOP per lane;
//   bf16  bfloat16 dot products into float32 (vdpbf16ps, AVX512-BF16): 4 FLOP per float32 lane;
//   int8  int8 dot products into int32 (vpdpbusd, AVX512-VNNI): 8 operations per int32 lane.
// A kind the processor lacks is reported as absent. The threads start together; the best of
// --repeats timings is reported (a machine shared with others only ever slows the loop down).
//
//   bench_cpu_peak [--threads N] [--milliseconds M] [--repeats R] [--json FILE]
//
// Prints one line per kind, "<kind> <rate> G/s", and the JSON object {"threads": N, "fp32": rate,
// ...} (absent kinds left out) to --json.
#include <attnzoo/io/atomic_file.h>
#include <attnzoo/kernels/common/cpu_vector.h>  // ATTNZOO_UNROLL

#include "tools/bench/count_argument.h"

#include <nlohmann/json.hpp>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 16;  // independent accumulators per thread

// What one call of a loop returns: a value that depends on every accumulator, so that no
// compiler drops the arithmetic.
volatile float g_sink_f = 0.0f;
volatile int32_t g_sink_i = 0;

// `iterations` passes of kChains multiply-adds each; operations per pass: kChains x ops_per_instr.
__attribute__((target("avx512f"))) void fp32_avx512(int64_t iterations) {
  __m512 acc[kChains];
  const __m512 a = _mm512_set1_ps(g_sink_f + 0.999f), b = _mm512_set1_ps(g_sink_f + 1e-7f);
  for (auto& x : acc) x = _mm512_set1_ps(g_sink_f);
  for (int64_t i = 0; i < iterations; ++i) {
    ATTNZOO_UNROLL
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  g_sink_f = _mm512_reduce_add_ps(total);
}

__attribute__((target("avx2,fma"))) void fp32_avx2(int64_t iterations) {
  __m256 acc[kChains];
  const __m256 a = _mm256_set1_ps(g_sink_f + 0.999f), b = _mm256_set1_ps(g_sink_f + 1e-7f);
  for (auto& x : acc) x = _mm256_set1_ps(g_sink_f);
  for (int64_t i = 0; i < iterations; ++i) {
    ATTNZOO_UNROLL
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, total);
  g_sink_f = lanes[0] + lanes[7];
}

__attribute__((target("avx512f,avx512bf16,avx512vl"))) void bf16_avx512(int64_t iterations) {
  __m512 acc[kChains];
  const auto a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // bfloat16 pairs (1, 1)
  const auto b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // (1e-7, 1e-7)
  for (auto& x : acc) x = _mm512_set1_ps(g_sink_f);
  for (int64_t i = 0; i < iterations; ++i) {
    ATTNZOO_UNROLL
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  g_sink_f = _mm512_reduce_add_ps(total);
}

__attribute__((target("avx512f,avx512vnni"))) void int8_avx512(int64_t iterations) {
  __m512i acc[kChains];
  const __m512i a = _mm512_set1_epi8(static_cast<char>(1 + g_sink_i));
  const __m512i b = _mm512_set1_epi8(static_cast<char>(-1 - g_sink_i));
  for (auto& x : acc) x = _mm512_set1_epi32(g_sink_i);
  for (int64_t i = 0; i < iterations; ++i) {
    ATTNZOO_UNROLL
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_epi32(total, acc[c]);
  g_sink_i = _mm512_reduce_add_epi32(total);
}

struct Kind {
  const char* name;
  bool present;
  double ops_per_pass;  // operations of one pass of kChains instructions
  void (*loop)(int64_t);
};

std::vector<Kind> kinds() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  std::vector<Kind> list;
  if (avx512) {
    list.push_back({"fp32", true, kChains * 16.0 * 2.0, fp32_avx512});
  } else {
    list.push_back({"fp32", avx2, kChains * 8.0 * 2.0, fp32_avx2});
  }
  list.push_back(
      {"bf16", avx512 && __builtin_cpu_supports("avx512bf16"), kChains * 16.0 * 4.0, bf16_avx512});
  list.push_back(
      {"int8", avx512 && __builtin_cpu_supports("avx512vnni"), kChains * 16.0 * 8.0, int8_avx512});
  return list;
}

// Seconds for `threads` threads to run loop(iterations) each, started together.
double timed_run(void (*loop)(int64_t), int64_t iterations, int64_t threads) {
  std::atomic<int64_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> team;
  for (int64_t t = 0; t < threads; ++t) {
    team.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      loop(iterations);
    });
  }
  while (ready.load() < threads) {
  }
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : team) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  int64_t milliseconds = 200, repeats = 5;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && arg == "--threads") {
      threads = attnzoo::bench::count_argument("bench_cpu_peak", "--threads", argv[++i]);
    } else if (i + 1 < argc && arg == "--milliseconds") {
      milliseconds = attnzoo::bench::count_argument("bench_cpu_peak", "--milliseconds", argv[++i]);
    } else if (i + 1 < argc && arg == "--repeats") {
      repeats = attnzoo::bench::count_argument("bench_cpu_peak", "--repeats", argv[++i]);
    } else if (i + 1 < argc && arg == "--json") {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "bench_cpu_peak: unknown argument '%s' (--threads N, --milliseconds M, "
                   "--repeats R, --json FILE)\n",
                   argv[i]);
      return 2;
    }
  }
  nlohmann::json report = {{"threads", threads}};
  for (const Kind& kind : kinds()) {
    if (!kind.present) {
      std::printf("%s absent\n", kind.name);
      continue;
    }
    // Size the loop to about --milliseconds from a short calibration run on one thread.
    int64_t iterations = 1 << 16;
    const double calibration = timed_run(kind.loop, iterations, 1);
    iterations =
        std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iterations) * milliseconds *
                                                  1e-3 / std::max(calibration, 1e-9)));
    double best = 0.0;
    for (int64_t r = 0; r < repeats; ++r) {
      const double seconds = timed_run(kind.loop, iterations, threads);
      const double ops = kind.ops_per_pass * static_cast<double>(iterations * threads);
      best = std::max(best, ops / seconds / 1e9);
    }
    std::printf("%s %.1f G/s\n", kind.name, best);
    report[kind.name] = best;
  }
  if (!json_path.empty()) attnzoo::io::write_file_atomically(json_path, report.dump(2) + "\n");
  return 0;
}
