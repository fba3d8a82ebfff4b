#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) in the ASan + UBSan tree (tools/sanitizer_tree.sh) and
# runs each on its seed corpus for a bounded time, as many at once as there are cores. Fails when
# any target crashes, leaks or trips a sanitizer.
#   tools/fuzz.sh [--minutes M | --seconds S] [TARGET...]   default: 10 minutes each, every target
#   tools/fuzz.sh TARGET SECONDS                           one target (the older form)
# Targets: safetensors, pickle, image, audio, config, checkpoint, units, v2_request, cmvn_stats,
# tar.
# New inputs found go to a scratch corpus under build-asan/fuzz/, not into the repository; a crash
# leaves its reproducer (crash-*) there: fix it, then add it to tests/fuzz/corpus/TARGET/ as a
# regression seed. CI runs every target for 20 s (.ci/run).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
all=(safetensors pickle image audio config checkpoint units v2_request grpc_request cmvn_stats tar)
seconds=600
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) seconds=$1; shift ;;
    safetensors | pickle | image | audio | config | checkpoint | units | v2_request | grpc_request | \
      cmvn_stats | tar)
      targets+=("$1"); shift ;;
    *) echo "tools/fuzz.sh: unknown target or option '$1' (targets: ${all[*]})" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
echo "fuzz: building ${targets[*]} in build-asan/ (tools/sanitizer_tree.sh address)"
"$ROOT/tools/sanitizer_tree.sh" address "${targets[@]/#/fuzz_}"
bin="$ROOT/build-asan/bin"
build="$ROOT/build-asan/fuzz"
mkdir -p "$build"
# fuzz TARGET: one target's run, its log in build-asan/fuzz/fuzz_TARGET.log and its exit status
# in build-asan/fuzz/fuzz_TARGET.status.
fuzz() {
  local target=$1 code=0
  local corpus="$build/corpus_$target" log="$build/fuzz_$target.log"
  local seeds=("$ROOT/tests/fuzz/corpus/$target")
  # The zoo's own YAML files seed the config target too.
  [ "$target" != config ] || seeds+=("$ROOT/configs")
  mkdir -p "$corpus"
  # 4 GB of RSS (libFuzzer's default is 2; LibTorch and a target's models take about 0.9).
  # timeout: a fuzzer that does not end (libFuzzer's out-of-memory report, a heap profile of the
  # whole process, once ran for minutes) fails the run rather than stalling it.
  (cd "$build" && timeout --kill-after=30 $((seconds + 300)) "$bin/fuzz_$target" \
    -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 \
    "$corpus" "${seeds[@]}" >"$log" 2>&1) || code=$?
  echo "$code" >"$build/fuzz_$target.status"
}
# As many targets at once as there are cores (each fuzzer is one process on one core).
jobs=${ATTNZOO_FUZZ_JOBS:-$(nproc)}
echo "fuzz: ${targets[*]}, $seconds s each, $jobs at a time, on tests/fuzz/corpus/<target>"
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz "$target" &
done
wait
failed=()
for target in "${targets[@]}"; do
  log="$build/fuzz_$target.log"
  code=$(cat "$build/fuzz_$target.status")
  if [ "$code" -ne 0 ] || grep -q "ERROR:" "$log"; then
    echo "fuzz_$target: FAILED (exit status $code); the report (whole log: $log):"
    grep -A40 -m1 -E "ERROR:|runtime error" "$log" || tail -n 40 "$log"
    failed+=("$target")
    continue
  fi
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -oE '^#[0-9]+[[:space:]]+DONE[[:space:]]+cov: [0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  rss=$(grep -oE 'stat::peak_rss_mb: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  echo "fuzz_$target: $runs executions in $seconds s, coverage $cov, peak RSS $rss MB, no crash, leak or report"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
