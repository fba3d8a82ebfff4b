#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; tests/fuzz/) and runs each on its seed corpus
# for a bounded time. Fails when any target crashes, leaks or trips a sanitizer.
#   tools/fuzz.sh [--minutes M | --seconds S] [TARGET...]   default: 10 minutes each, every target
#   tools/fuzz.sh TARGET SECONDS                           one target (the older form)
# Targets: safetensors, image, audio. New inputs found go to a scratch corpus under build-fuzz/,
# not into the repository; a crash leaves its reproducer (crash-*) in build-fuzz/: fix it, then
# add it to tests/fuzz/corpus/TARGET/ as a regression seed. CI runs `tools/fuzz.sh --seconds 60`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
all=(safetensors image audio)
seconds=600
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h | --help) sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) seconds=$1; shift ;;
    safetensors | image | audio) targets+=("$1"); shift ;;
    *) echo "tools/fuzz.sh: unknown target or option '$1' (targets: ${all[*]})" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
build="$ROOT/build-fuzz"
# fuzz_image and fuzz_audio link LibTorch: that of the venv tools/setup.sh makes, unless
# ATTNZOO_TORCH_PREFIX says where another is.
if [ -z "${ATTNZOO_TORCH_PREFIX:-}" ]; then
  vpy="$("$ROOT/tools/requirements/venv_path.sh")/bin/python"
  if [ -x "$vpy" ]; then
    ATTNZOO_TORCH_PREFIX=$("$vpy" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  fi
fi
torch_args=()
[ -z "${ATTNZOO_TORCH_PREFIX:-}" ] || torch_args=(-DCMAKE_PREFIX_PATH="$ATTNZOO_TORCH_PREFIX")
echo "fuzz: building ${targets[*]} (clang, ASan + UBSan) in build-fuzz/"
CXX=${CXX:-clang++} cmake -S "$ROOT/tests/fuzz" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "${torch_args[@]}" >/dev/null
cmake --build "$build" --target "${targets[@]/#/fuzz_}"
failed=()
for target in "${targets[@]}"; do
  corpus="$build/corpus_$target"
  log="$build/fuzz_$target.log"
  mkdir -p "$corpus"
  echo "fuzz_$target: running for $seconds s on tests/fuzz/corpus/$target"
  code=0
  (cd "$build" && "bin/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
    "$corpus" "$ROOT/tests/fuzz/corpus/$target" >"$log" 2>&1) || code=$?
  if [ "$code" -ne 0 ] || grep -q "ERROR:" "$log"; then
    echo "fuzz_$target: FAILED (exit status $code); the report (whole log: $log):"
    grep -A40 -m1 -E "ERROR:|runtime error" "$log" || tail -n 40 "$log"
    failed+=("$target")
    continue
  fi
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -oE '^#[0-9]+[[:space:]]+DONE[[:space:]]+cov: [0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  echo "fuzz_$target: $runs executions in $seconds s, coverage $cov, no crash, leak or report"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
