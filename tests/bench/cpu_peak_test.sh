#!/usr/bin/env bash
# bench_cpu_peak: prints a positive rate per kind it measures (fp32 on every x86-64 processor with
# AVX2 + FMA or AVX-512), writes the same rates and the thread count to --json, and refuses bad
# arguments with status 2 and a message naming the flag.
set -euo pipefail
binary="$1"
python="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$binary" --threads 1 --milliseconds 20 --repeats 2 --json "$work/peak.json" > "$work/out.txt"
cat "$work/out.txt"
"$python" - "$work/out.txt" "$work/peak.json" <<'PY'
import json
import sys

printed = {}
for line in open(sys.argv[1]):
    kind, *rest = line.split()
    if rest == ["absent"]:
        continue
    assert rest[1] == "G/s", line
    printed[kind] = float(rest[0])
report = json.load(open(sys.argv[2]))
assert report["threads"] == 1, report
assert "fp32" in printed, f"no fp32 rate in {printed}"
for kind, rate in printed.items():
    assert rate > 1.0, f"{kind}: {rate} G/s"
    assert abs(report[kind] - rate) <= 0.05 + 1e-6 * rate, (kind, report[kind], rate)
assert set(report) - {"threads"} == set(printed), (report, printed)
PY

expect_refusal() {
  local want="$1"
  shift
  if "$binary" "$@" > "$work/refused.txt" 2>&1; then
    echo "accepted: $*" >&2
    exit 1
  else
    status=$?
  fi
  [[ $status == 2 ]] || { echo "status $status for: $*" >&2; exit 1; }
  grep -qF -- "$want" "$work/refused.txt" || { cat "$work/refused.txt" >&2; exit 1; }
}
expect_refusal "--threads takes a positive integer, got '0'" --threads 0
expect_refusal "--milliseconds takes a positive integer, got 'x'" --milliseconds x
expect_refusal "unknown argument '--fast'" --fast
echo "bench_cpu_peak: ok"
