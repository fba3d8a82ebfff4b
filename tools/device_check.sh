#!/usr/bin/env bash
# tools/device_check.sh: the GPU checks, in one call on the lent GPU machine (see the `run` tool):
# builds kernels/, its tests and bench_flash against that machine's own torch (ATTNZOO_KERNELS_ONLY:
# no OpenCV, libsndfile or yaml-cpp there), runs every *_CUDA test, then the attention benchmark;
# writes the logs and JSON under $OUT and prints a short table last. Meant to finish within
# 8 minutes.
#
#   OUT=/tmp/out tools/device_check.sh [GTEST_SOURCES]
#
# GTEST_SOURCES: GoogleTest's sources when the machine has no GTest package (carry a copy of
# Debian's /usr/src/googletest, e.g. as build-device/googletest).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/build-device/out}
mkdir -p "$OUT"
GTEST=${1:-$ROOT/build-device/googletest}
BUILD=$ROOT/build-device/build
PY=${ATTNZOO_DEVICE_PYTHON:-python3}
start=$(date +%s)
say() { printf '[device_check %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1 ||
  echo "no GPU (nvidia-smi failed): a dry run" >"$OUT/gpu.txt"
say "GPU: $(cat "$OUT/gpu.txt")"
prefix=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
say "torch $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
gtest_arg=()
[ -d "$GTEST" ] && gtest_arg=(-DATTNZOO_GTEST_SOURCE_DIR="$GTEST")
# The GPU's architecture (sm_90a on Hopper); without a GPU (a dry run) sm_90a.
arch=$("$PY" -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}" + ("a" if m == 9 else ""))' 2>/dev/null) || arch=90a
say "configuring for sm_$arch"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DATTNZOO_KERNELS_ONLY=ON -DATTNZOO_CUDA=ON \
    -DATTNZOO_CUDA_ARCHITECTURES="$arch" "${gtest_arg[@]}" >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"; echo "device_check: configure failed"; exit 1
fi
say "building"
if ! cmake --build "$BUILD" -j "$(nproc)" >"$OUT/build.log" 2>&1; then
  grep -E "error" "$OUT/build.log" | head -30; echo "device_check: build failed"; exit 1
fi
say "CUDA tests"
tests=$BUILD/tests/kernels/attnzoo_kernels_tests
"$tests" --gtest_filter='*_CUDA*' --gtest_output="json:$OUT/cuda_tests.json" >"$OUT/cuda_tests.log" 2>&1
tests_rc=$?
if command -v compute-sanitizer >/dev/null; then
  say "compute-sanitizer memcheck and racecheck (flash attention, small cases)"
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 3 "$tests" \
      --gtest_filter='FlashAttention.KernelIsAsAccurateAsLibTorch_CUDA' \
      >"$OUT/sanitizer_$tool.log" 2>&1
    echo "$tool rc=$?" >>"$OUT/sanitizer.txt"
  done
fi
say "benchmark"
timeout 240 "$BUILD/bench_flash" --json "$OUT/bench_flash.json" >"$OUT/bench_flash.txt" 2>&1
bench_rc=$?
cuobjdump_bin=$(command -v cuobjdump || true)
if [ -n "$cuobjdump_bin" ]; then
  "$cuobjdump_bin" -sass "$BUILD/kernels/libattnzoo_kernels.so" 2>/dev/null |
    grep -cE "HGMMA|HMMA" >"$OUT/mma_instruction_count.txt" || true
fi

echo
echo "== device check ($(cat "$OUT/gpu.txt")) =="
# One line per test run: "[  STATUS  ] Suite.Name (N ms)"; the counts, then the failures by name.
grep -E "^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z].* \([0-9]+ ms\)$" "$OUT/cuda_tests.log" |
  awk '{print $2}' | sort | uniq -c | awk '{print "  " $2 ": " $1}'
grep -E "^\[  FAILED  \] [A-Za-z].* \([0-9]+ ms\)$" "$OUT/cuda_tests.log" | sed 's/^/  /'
[ -f "$OUT/sanitizer.txt" ] && sed 's/^/  sanitizer /' "$OUT/sanitizer.txt"
echo "  tests rc=$tests_rc, bench rc=$bench_rc, $(($(date +%s) - start)) s"
grep -E "peak|ratio" "$OUT/bench_flash.txt" | head -20
exit $((tests_rc != 0 || bench_rc != 0))
