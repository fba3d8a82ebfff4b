#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs one on its seed corpus.
#   tools/fuzz.sh [TARGET] [SECONDS]   defaults: safetensors 600; targets: safetensors, image, audio
# New inputs found go to a scratch corpus under build-fuzz/, not into the repository; a crash
# leaves its reproducer in build-fuzz/ (add it to tests/fuzz/corpus/TARGET/ once fixed).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${1:-safetensors}
seconds=${2:-600}
build="$ROOT/build-fuzz"
# fuzz_image and fuzz_audio link LibTorch: that of the venv tools/setup.sh makes (named as it
# names it), unless ATTNZOO_TORCH_PREFIX says where another is.
if [ -z "${ATTNZOO_TORCH_PREFIX:-}" ]; then
  vpy="$("$ROOT/tools/requirements/venv_path.sh")/bin/python"
  if [ -x "$vpy" ]; then
    ATTNZOO_TORCH_PREFIX=$("$vpy" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  fi
fi
torch_args=()
[ -z "${ATTNZOO_TORCH_PREFIX:-}" ] || torch_args=(-DCMAKE_PREFIX_PATH="$ATTNZOO_TORCH_PREFIX")
CXX=${CXX:-clang++} cmake -S "$ROOT/tests/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "${torch_args[@]}" >/dev/null
cmake --build "$build" --target "fuzz_$target"
corpus="$build/corpus_$target"
mkdir -p "$corpus"
cd "$build"
"bin/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 "$corpus" \
  "$ROOT/tests/fuzz/corpus/$target" 2>&1 | tee "$build/fuzz_$target.log" | grep -E "^#[0-9]+ +(DONE|pulse)|stat::|ERROR|SUMMARY" || true
grep -q "ERROR:" "$build/fuzz_$target.log" && { echo "fuzz_$target found a bug (see $build/fuzz_$target.log)"; exit 1; }
echo "fuzz_$target: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$build/fuzz_$target.log" | grep -o '[0-9]*$') executions in ${seconds} s, no crash"
