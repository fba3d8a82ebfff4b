#!/usr/bin/env bash
# tools/device_check.sh: the GPU checks, in one call on the lent GPU machine (see the `run` tool):
# builds kernels/, io/, layers/, models/, their tests and the GPU benchmarks against that machine's
# own torch (ATTNZOO_KERNELS_ONLY: no OpenCV, libsndfile or yaml-cpp there), runs every *_CUDA test
# (kernels, the attention layer's backends, CUDA graphs), then the same tests of kernels/ and
# layers/ in a second tree whose kernels take the mma.sync path (see below), compute-sanitizer on
# one small flash case when present, then the benchmarks; writes the logs and JSON under $OUT and
# prints a short table last. Meant to finish within 8 minutes.
#
# The second tree: the flash forward's score product has two paths, wgmma on sm_90a and mma.sync
# (the sm_80 path) everywhere else. An sm_80 cubin does not load on a 9.x GPU (cubins run only on
# their own major version) and compute_80 PTX would be JIT-compiled at first use (minutes for
# every instantiation), so the mma.sync path runs on Hopper compiled for plain sm_90, which has
# no wgmma: the same source path, as Hopper SASS. Without a GPU (a dry run) both trees build and
# every test skips.
#
#   tools/device_check.sh --prepare      # here, before the run: copies GoogleTest's sources and
#                                        # the nlohmann-json headers into build-device/
#   OUT=/tmp/out tools/device_check.sh   # on the GPU machine; carry build-device/googletest and
#                                        # build-device/include
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE_DIR=$ROOT/build-device
if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$DEVICE_DIR/include"
  rm -rf "$DEVICE_DIR/googletest" "$DEVICE_DIR/include/nlohmann"
  cp -r /usr/src/googletest "$DEVICE_DIR/googletest"
  cp -r /usr/include/nlohmann "$DEVICE_DIR/include/nlohmann"
  du -sh "$DEVICE_DIR/googletest" "$DEVICE_DIR/include"
  echo "carry: build-device/googletest build-device/include"
  exit 0
fi
OUT=${OUT:-$DEVICE_DIR/out}
mkdir -p "$OUT"
GTEST=$DEVICE_DIR/googletest
BUILD=$DEVICE_DIR/build
PY=${ATTNZOO_DEVICE_PYTHON:-python3}
start=$(date +%s)
say() { printf '[device_check %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1 ||
  echo "no GPU (nvidia-smi failed): a dry run" >"$OUT/gpu.txt"
say "GPU: $(cat "$OUT/gpu.txt")"
prefix=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
say "torch $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
extra=()
[ -d "$GTEST" ] && extra+=(-DATTNZOO_GTEST_SOURCE_DIR="$GTEST")
[ -d "$DEVICE_DIR/include/nlohmann" ] && extra+=(-DATTNZOO_JSON_INCLUDE_DIR="$DEVICE_DIR/include")
# The GPU's architecture (sm_90a on Hopper); without a GPU (a dry run) sm_90a.
arch=$("$PY" -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}" + ("a" if m == 9 else ""))' 2>/dev/null) || arch=90a
say "configuring for sm_$arch"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DATTNZOO_KERNELS_ONLY=ON -DATTNZOO_CUDA=ON \
    -DATTNZOO_CUDA_ARCHITECTURES="$arch" "${extra[@]}" >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"; echo "device_check: configure failed"; exit 1
fi
say "building"
if ! cmake --build "$BUILD" -j "$(nproc)" >"$OUT/build.log" 2>&1; then
  grep -E "error" "$OUT/build.log" | head -30; echo "device_check: build failed"; exit 1
fi
tests_rc=0
# The attention layer's auto takes the flash kernel only when opted in (until it is verified).
export ATTNZOO_FLASH_AUTO=1
# run_cuda_tests TREE SUFFIX BINARY...: the *_CUDA tests of each binary of TREE, logged as
# $OUT/BINARY$SUFFIX.log.
run_cuda_tests() {
  local tree=$1 suffix=$2 name
  shift 2
  for name in "$@"; do
    say "CUDA tests: $name$suffix"
    timeout 240 "$tree/bin/$name" --gtest_filter='*_CUDA*' \
      --gtest_output="json:$OUT/$name$suffix.json" >"$OUT/$name$suffix.log" 2>&1 || tests_rc=1
  done
}
run_cuda_tests "$BUILD" "" attnzoo_kernels_tests attnzoo_layers_tests attnzoo_models_tests

MMA_BUILD=$DEVICE_DIR/build-mma
say "configuring the mma.sync tree (sm_90 without the a: no wgmma)"
if cmake -S "$ROOT" -B "$MMA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DATTNZOO_KERNELS_ONLY=ON -DATTNZOO_CUDA=ON \
    -DATTNZOO_CUDA_ARCHITECTURES=90-real "${extra[@]}" >"$OUT/configure_mma.log" 2>&1 &&
  cmake --build "$MMA_BUILD" -j "$(nproc)" --target attnzoo_kernels_tests attnzoo_layers_tests \
    >"$OUT/build_mma.log" 2>&1; then
  run_cuda_tests "$MMA_BUILD" _mma attnzoo_kernels_tests attnzoo_layers_tests
else
  tail -30 "$OUT/build_mma.log" "$OUT/configure_mma.log" 2>/dev/null
  echo "device_check: the mma.sync tree failed to build"
  tests_rc=1
fi

tests=$BUILD/bin/attnzoo_kernels_tests
if command -v compute-sanitizer >/dev/null; then
  # One small case (L = 197 and 1000, E = 64, forward and backward): the sanitizers slow the
  # kernels down a hundredfold or more.
  say "compute-sanitizer memcheck and racecheck (FlashAttention.SanitizerCase_CUDA)"
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 3 "$tests" \
      --gtest_filter='FlashAttention.SanitizerCase_CUDA' >"$OUT/sanitizer_$tool.log" 2>&1
    echo "$tool rc=$?" >>"$OUT/sanitizer.txt"
  done
fi
say "benchmark: attention"
timeout 180 "$BUILD/bin/bench_flash" --json "$OUT/bench_flash.json" >"$OUT/bench_flash.txt" 2>&1
bench_rc=$?
if [ -x "$BUILD/bin/bench_vit_cuda" ]; then
  say "benchmark: ViT-B/16 against the PyTorch peers"
  timeout 150 "$PY" "$ROOT/tools/bench/bench_vit_cuda.py" --ours "$BUILD/bin/bench_vit_cuda" \
    --json "$OUT/bench_vit.json" >"$OUT/bench_vit.txt" 2>&1 || bench_rc=1
fi
cuobjdump_bin=$(command -v cuobjdump || true)
if [ -n "$cuobjdump_bin" ]; then
  "$cuobjdump_bin" -sass "$BUILD"/lib/libattnzoo_kernels.so 2>/dev/null |
    grep -cE "HGMMA|HMMA" >"$OUT/mma_instruction_count.txt" || true
fi

echo
echo "== device check ($(cat "$OUT/gpu.txt")) =="
# One line per test run: "[  STATUS  ] Suite.Name (N ms)"; the counts per tree, then the
# failures by name.
for tree in sm_90a:attnzoo_*_tests.log mma.sync:attnzoo_*_tests_mma.log; do
  printf '  %s:' "${tree%%:*}"
  # shellcheck disable=SC2086 # the glob is meant
  cat $OUT/${tree#*:} 2>/dev/null |
    grep -E "^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z].* \([0-9]+ ms\)$" |
    awk '{print $2}' | sort | uniq -c | awk '{printf " %s %s", $2, $1}'
  echo
done
cat "$OUT"/attnzoo_*_tests*.log 2>/dev/null |
  grep -E "^\[  FAILED  \] [A-Za-z].* \([0-9]+ ms\)$" | sed 's/^/  /'
[ -f "$OUT/sanitizer.txt" ] && sed 's/^/  sanitizer /' "$OUT/sanitizer.txt"
echo "  tests rc=$tests_rc, bench rc=$bench_rc, $(($(date +%s) - start)) s"
grep -E "peak|ratio" "$OUT/bench_flash.txt" | head -20
[ -f "$OUT/bench_vit.txt" ] && tail -12 "$OUT/bench_vit.txt"
exit $((tests_rc != 0 || bench_rc != 0))
