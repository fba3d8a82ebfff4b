#!/usr/bin/env bash
# Configures and builds a sanitizer tree of attnzoo: clang, every library and test of attnzoo
# instrumented (the libraries at -O1 for ASan, -O0 for TSan; the tests at -O0), linked to
# LibTorch's CPU libraries alone (ATTNZOO_TORCH_CPU_ONLY; the sanitizers would otherwise map the
# CUDA libraries too). Third-party libraries are as installed.
#   tools/sanitizer_tree.sh address|thread [TARGET...]      default: every target
#   address  build-asan/: ASan + UBSan, and libFuzzer's coverage: the tests of tools/sanitize.sh
#            and the fuzz targets of tools/fuzz.sh are built here
#   thread   build-tsan/: TSan
# tools/setup.sh does the work (the packages and the venv are checked, not re-made).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kind=${1:-}
shift || true
case "$kind" in
  address) dir=build-asan; args="-DATTNZOO_SANITIZE=address,undefined -DATTNZOO_FUZZ=ON" ;;
  # -O0: the threaded cases spend their time in LibTorch and in waits, and the tree compiles in
  # two thirds of -O1's time (188 s against 255 s cold here, the cases as fast).
  thread) dir=build-tsan; args="-DATTNZOO_SANITIZE=thread -DATTNZOO_SANITIZE_OPTIMIZATION=-O0" ;;
  *) echo "tools/sanitizer_tree.sh: give address or thread, then the targets" >&2; exit 2 ;;
esac
target_args=()
for t in "$@"; do target_args+=(--target "$t"); done
CC=clang CXX=clang++ \
  ATTNZOO_CMAKE_ARGS="$args -DATTNZOO_TORCH_CPU_ONLY=ON -DATTNZOO_CUDA=OFF" \
  "$ROOT/tools/setup.sh" --no-data --build-dir "$ROOT/$dir" "${target_args[@]}"
