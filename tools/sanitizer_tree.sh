#!/usr/bin/env bash
# Configures and builds a sanitizer tree of attnzoo: clang, every library and test of attnzoo
# instrumented at -O1, linked to LibTorch's CPU libraries alone (ATTNZOO_TORCH_CPU_ONLY; the
# sanitizers would otherwise map the CUDA libraries too). Third-party libraries are as installed.
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
  thread) dir=build-tsan; args="-DATTNZOO_SANITIZE=thread" ;;
  *) echo "tools/sanitizer_tree.sh: give address or thread, then the targets" >&2; exit 2 ;;
esac
target_args=()
for t in "$@"; do target_args+=(--target "$t"); done
CC=clang CXX=clang++ \
  ATTNZOO_CMAKE_ARGS="$args -DATTNZOO_TORCH_CPU_ONLY=ON -DATTNZOO_CUDA=OFF" \
  "$ROOT/tools/setup.sh" --no-data --build-dir "$ROOT/$dir" "${target_args[@]}"
