#!/usr/bin/env bash
# bench_test.sh CASE ATTNZOO_BINARY: `attnzoo bench` scenarios; checks exit statuses, the table,
# the JSON (with python3's json module) and the PNG. Small sizes only: the benchmark's numbers are
# not checked for speed, only for being measured and for the growth attention must show.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
usage_error() { # usage_error ARGS...: exit 1 or 2, one line on stderr
  "$bin" "$@" >"$out/stdout" 2>"$out/stderr"
  local status=$?
  if [ "$status" -ne 1 ] && [ "$status" -ne 2 ]; then
    echo "FAIL: attnzoo $* exited $status, expected 1 or 2"
    sed 's/^/  stderr: /' "$out/stderr"
    exit 1
  fi
  lines stderr 1
}
check_json() { # check_json FILE PYTHON: runs PYTHON with `d` = the parsed file; it raises on failure
  python3 - "$1" "$2" <<'EOF' || exit 1
import json, math, sys
with open(sys.argv[1]) as f:
    d = json.load(f)
def fail(message):
    print("FAIL: " + message)
    sys.exit(1)
exec(sys.argv[2])
EOF
}

case "$case_name" in
  bench_small)
    run 0 bench attention --lengths 64,128 --dim 64 --heads 2 --repeats 2 \
      --json "$out/bench.json" --plot "$out/bench.png"
    expect stdout '^ +N \| +notes ms +notes MB \|'
    expect stdout '^ +64 \|'
    expect stdout '^ +128 \|'
    expect stdout '^ +fit \|.*N\^'
    expect stderr '^bench: math N=128 \.\.\. [0-9.]+ ms, [0-9.]+ MiB$'  # not a terminal: plain lines
    is_png "$out/bench.png"
    check_json "$out/bench.json" '
backends = d["command"].split("--backends ")[1].split()[0].split(",")
for name in ("math", "sdpa"):
    if name not in backends: fail(name + " not among the backends run: %s" % backends)
seen = {(m["backend"], m["length"]): m for m in d["measurements"]}
for b in backends:
    for n in (64, 128):
        if (b, n) not in seen: fail("no measurement for %s at N=%d" % (b, n))
if len(d["measurements"]) != 2 * len(backends): fail("unexpected measurements")
for b in ("math", "sdpa"):
    for n in (64, 128):
        m = seen[(b, n)]
        if m["status"] != "ok": fail("%s N=%d: %s (%s)" % (b, n, m["status"], m["reason"]))
        for key in ("time_ms_median", "time_ms_min", "peak_bytes"):
            if not isinstance(m[key], (int, float)) or not math.isfinite(m[key]) or m[key] <= 0:
                fail("%s N=%d: %s = %r" % (b, n, key, m[key]))
        if len(m["times_ms"]) != 2: fail("%s N=%d: %d timed calls, expected 2" % (b, n, len(m["times_ms"])))
# math materialises [B, H, N, N]: doubling N must (about) quadruple its measured peak.
ratio = seen[("math", 128)]["peak_bytes"] / seen[("math", 64)]["peak_bytes"]
if ratio < 3: fail("math peak memory grew only %.2fx from N=64 to 128" % ratio)
# ... and at least one full [B, H, N, N] float buffer must be seen (B=1, H=2).
if seen[("math", 128)]["peak_bytes"] < 2 * 128 * 128 * 4: fail("math peak below its score buffer")
mach = d["machine"]
if not mach["cpu_model"] or mach["threads"] < 1 or not mach["libtorch"].startswith("2.") or not mach["date"]:
    fail("machine info incomplete: %r" % mach)
if {f["backend"] for f in d["fits"]} != set(backends): fail("fits do not cover the backends")
if not 1.5 < [f for f in d["fits"] if f["backend"] == "math"][0]["memory_exponent"] < 2.5:
    fail("math memory exponent not near 2")
'
    ;;
  bench_selected)
    # An explicit list is honoured in order; --backward and the mask flags run.
    run 0 bench attention --backends math,sdpa --lengths 32,48 --dim 32 --heads 2 --batch 2 \
      --repeats 1 --warmup 0 --backward --causal --padding --json "$out/bench.json"
    expect stdout 'forward\+backward'
    expect stdout '^ +N \| +notes ms +notes MB \| +math ms +math MiB \| +sdpa ms +sdpa MiB$'
    check_json "$out/bench.json" '
if [(m["backend"], m["length"]) for m in d["measurements"]] != [("math", 32), ("math", 48), ("sdpa", 32), ("sdpa", 48)]:
    fail("measurements: %r" % [(m["backend"], m["length"]) for m in d["measurements"]])
for m in d["measurements"]:
    if m["status"] != "ok" or not m["peak_bytes"] > 0: fail("%r" % m)
s = d["settings"]
if not (s["backward"] and s["causal"] and s["padding"] and s["batch"] == 2): fail("settings %r" % s)
'
    ;;
  bench_limits)
    # --max-memory-gb: math predicted above the limit is skipped (never run), with the reason.
    run 0 bench attention --backends math,sdpa --lengths 64,256 --dim 32 --heads 2 --repeats 1 \
      --max-memory-gb 0.001 --json "$out/bench.json"
    expect stdout '^ +256 \| +\| +skip +skip \|'
    expect stdout 'math skip at N=256: predicted .* GB > --max-memory-gb'
    check_json "$out/bench.json" '
seen = {(m["backend"], m["length"]): m for m in d["measurements"]}
m = seen[("math", 256)]
if m["status"] != "skip" or "--max-memory-gb" not in m["reason"] or m["times_ms"]: fail("%r" % m)
if seen[("math", 64)]["status"] != "ok": fail("math at 64 should run")
if seen[("sdpa", 256)]["status"] != "ok": fail("sdpa at 256 (O(N)) should run")
'
    # --max-seconds: the first call is over the limit, so N=64 keeps that one call and larger N
    # are skipped.
    run 0 bench attention --backends math --lengths 64,128,256 --dim 32 --heads 2 --repeats 3 \
      --max-seconds 1e-9 --json "$out/bench.json"
    expect stdout 'math skip at N=128,256: a call took .* s > --max-seconds'
    check_json "$out/bench.json" '
seen = {m["length"]: m for m in d["measurements"]}
if seen[64]["status"] != "ok" or len(seen[64]["times_ms"]) != 1 or not seen[64]["truncated"]: fail("%r" % seen[64])
for n in (128, 256):
    if seen[n]["status"] != "skip" or "--max-seconds" not in seen[n]["reason"]: fail("%r" % seen[n])
'
    ;;
  bench_unsupported)
    # A backend that throws for a problem is reported as n/a with its reason, and the run goes
    # on. Here math's [N, N] scores need 4e14 bytes, beyond any machine's address space, so the
    # allocation fails at once whatever the overcommit policy (both guards are lifted).
    run 0 bench attention --backends math --lengths 16,10000000 --dim 1 --heads 1 --repeats 1 \
      --warmup 0 --max-memory-gb 1e9 --max-seconds 1e12 --json "$out/bench.json"
    expect stdout '^ +10000000 \| +\| +n/a +n/a$'
    expect stdout 'math n/a at N=10000000: .*allocate'
    check_json "$out/bench.json" '
seen = {m["length"]: m for m in d["measurements"]}
if seen[16]["status"] != "ok": fail("%r" % seen[16])
m = seen[10000000]
if m["status"] != "n/a" or "allocate" not in m["reason"] or m["times_ms"] or m["peak_bytes"] is not None:
    fail("%r" % m)
'
    ;;
  bench_model)
    # A model's latency: the timed calls and their median, in the table and the JSON; the
    # output of the last call (a ViT's logits, a Conformer's encoded frames).
    run 0 bench model --model vit_tiny_patch16_224 --set architecture.depth=2 --iterations 3 \
      --warmup 1 --threads 1 --json "$out/m.json" --output "$out/m.safetensors"
    expect stdout '^vit_tiny_patch16_224 batch 1 fp32 cpu threads 1: median [0-9.]+ ms, min [0-9.]+ ms over 3 calls$'
    python3 - "$out/m.json" <<'PY' || exit 1
import json, statistics, sys
j = json.load(open(sys.argv[1]))
assert j["model"] == "vit_tiny_patch16_224" and j["input"] == [1, 3, 224, 224], j
assert len(j["times_ms"]) == 3 and j["median_ms"] == statistics.median(j["times_ms"]), j
assert j["min_ms"] == min(j["times_ms"]) and j["threads"] == 1, j
PY
    [ -s "$out/m.safetensors" ] || { echo "FAIL: no output file"; exit 1; }
    # The op profile: a depth-2 ViT runs 2 x 4 linears (qkv, proj, fc1, fc2) and 2 attentions
    # a forward; the table and the JSON say so.
    run 0 bench model --model vit_tiny_patch16_224 --set architecture.depth=2 --iterations 1 \
      --warmup 1 --threads 1 --profile-ops 3 --json "$out/p.json"
    expect stdout '^ops of 3 profiled forwards \([0-9.]+ ms each; self time, per forward\):$'
    expect stdout '^  \(outside any op\) +0\.0 +[0-9.-]+ +[0-9.-]+%$'
    python3 - "$out/p.json" <<'PY' || exit 1
import json, sys
ops = {o["op"]: o for o in json.load(open(sys.argv[1]))["ops"]}
# oneDNN's packed linear and attnzoo's own (float32 on AVX-512, where it pays); without oneDNN,
# LibTorch's.
packed = ("mkldnn::_linear_pointwise", "attnzoo::linear_packed_cpu")
names = packed if any(name in ops for name in packed) else ("aten::linear",)
assert sum(ops[name]["calls_per_forward"] for name in names if name in ops) == 8, ops.keys()
# LibTorch's sdpa, or attnzoo's CPU kernel where `auto` takes it (processors with AVX512-BF16).
attention = [o for name, o in ops.items()
             if "scaled_dot_product" in name or name == "attnzoo::flash_attention"]
assert attention and all(o["calls_per_forward"] == 2 for o in attention), attention
assert all(o["self_ms_per_forward"] >= 0 for o in ops.values()), ops
PY
    run 0 bench model --model conformer_s --set architecture.num_layers=1 --seconds 1 \
      --iterations 1 --warmup 0 --batch 2 --profile-ops 2 --json "$out/c.json"
    expect stdout '^conformer_s batch 2 fp32 cpu threads [0-9]+: median'
    grep -q '"input": \[' "$out/c.json" || { echo "FAIL: no input shape"; exit 1; }
    python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['input'] == [2, 100, 80]" \
      "$out/c.json" || { echo "FAIL: conformer input is not 1 s of 80 features"; exit 1; }
    # The relative attention's CPU kernel (AVX2 + FMA or better) is an op of its own in the
    # profile, once per layer, not time outside any op.
    if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
      python3 - "$out/c.json" <<'PY' || exit 1
import json, sys
ops = {o["op"]: o for o in json.load(open(sys.argv[1]))["ops"]}
relative = ops.get("attnzoo::flash_attention_relative_cpu")
assert relative and relative["calls_per_forward"] == 1, ops.keys()
PY
    fi
    run 0 bench model --model conformer_s --set architecture.num_layers=1 --frames 37 \
      --iterations 1 --warmup 0 --json "$out/f.json"
    python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['input'] == [1, 37, 80]" \
      "$out/f.json" || { echo "FAIL: --frames not honoured"; exit 1; }
    run 2 bench model --model vit_tiny_patch16_224 --iterations 0
    run 1 bench model --model vit_nope
    expect stderr "^attnzoo bench: unknown model 'vit_nope'"
    run 1 bench model --model vit_tiny_patch16_224 --cuda-graph
    expect stderr '^attnzoo bench: --cuda-graph: CUDA graphs need --device cuda$'
    ;;
  bench_memcheck)
    # The tracker must see a 100 MiB LibTorch tensor as 100 MiB, and math's score buffer.
    run 0 bench memcheck --mb 100
    expect stdout '^tensor of 104857600 bytes: tracked peak rose by 10[0-9]{7} bytes$'
    rose=$(sed -n 's/^tensor of 104857600 bytes: tracked peak rose by \([0-9]*\) bytes$/\1/p' "$out/stdout")
    [ $((rose > 103809024 && rose < 105906176)) -eq 1 ] ||
      { echo "FAIL: 100 MiB tensor raised the peak by $rose bytes"; exit 1; }
    expect stdout '^memory tracking ok$'
    ;;
  bench_bad_args)
    usage_error bench attention --backends math,nosuch --lengths 8
    expect stderr '--backends.*nosuch'
    usage_error bench attention --lengths 64,0
    expect stderr '--lengths'
    usage_error bench attention --lengths 64,abc
    expect stderr '--lengths'
    usage_error bench attention --dtype fp8
    expect stderr '--dtype'
    usage_error bench attention --repeats 0 --lengths 8
    expect stderr '--repeats'
    usage_error bench attention --dim 30 --heads 4 --lengths 8
    expect stderr '--heads'
    usage_error bench
    expect stderr 'subcommand'
    # Without a GPU, --device cuda must fail clearly (on a GPU machine it is a valid request).
    if "$bin" version | grep -q 'CUDA devices: none'; then
      usage_error bench attention --device cuda --lengths 8
      expect stderr '--device cuda'
    fi
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
