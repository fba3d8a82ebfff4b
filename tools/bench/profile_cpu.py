#!/usr/bin/env python3
"""Where a model's CPU forward pass spends its cycles: docs/benchmarks.md's profile tables.

For each model and batch, two views of `attnzoo bench model` on the same threads:
  - perf: `perf record` of the timed calls (the model's construction left out by a delay), its
    samples of every thread summed into kinds of work: the GEMMs (oneDNN's JIT kernels, MKL), the
    attention, attnzoo's fused kernels, OpenMP (libgomp: the fork, the join, the workers spinning
    or sleeping at a barrier), allocation (malloc, free, page faults), the rest of LibTorch (the
    dispatcher, tensor bookkeeping, elementwise ops), the rest;
  - ops: `attnzoo bench model --profile-ops`, the self time of each LibTorch op on the calling
    thread, per forward (its parallel regions included).

    profile_cpu.py build/bin/attnzoo [--models vit_tiny_patch16_224,vit_small_patch16_224]
        [--batches 1,8] [--threads 2] [--seconds 6] [--top 6] [--set KEY=VALUE ...]

Needs `perf` (Debian's linux-perf) and permission to use it (perf_event_paranoid <= 2 for one's
own processes).
"""
import argparse
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

# (kind, test on the DSO, test on the symbol): the first that matches takes the sample.
KINDS = [
    ("GEMM (oneDNN JIT, MKL)", lambda d, s: d.startswith("[JIT]") or
     re.search(r"mkl_blas|sgemm|gemm|brgemm|dnnl|jit_", s)),
    ("attention (LibTorch's flash CPU)", lambda d, s: "flash_attention" in s),
    ("attnzoo kernels (layer norm, ...)", lambda d, s: "libattnzoo_kernels" in d),
    ("OpenMP (libgomp: fork, join, wait)", lambda d, s: "libgomp" in d),
    ("allocation (malloc, free, page faults)", lambda d, s: re.search(
        r"malloc|free|_int_|memalign|unlink_chunk|page_fault|clear_page|do_anonymous|alloc_pages|"
        r"mmap|munmap|brk", s)),
    ("exp, erf (libm, Sleef)", lambda d, s: "libm." in d or "Sleef" in s),
    ("rest of LibTorch (dispatch, bookkeeping, elementwise)",
     lambda d, s: "libtorch" in d or "libc10" in d),
    ("kernel (other)", lambda d, s: "kernel" in d),
    ("other", lambda d, s: True),
]


def perf_kinds(attnzoo, model, batch, threads, seconds, overrides, work):
    """Shares of the samples of the timed calls, by kind."""
    data = work / "perf.data"
    # Enough calls for `seconds` of profile: one timing call first.
    probe = run_bench(attnzoo, model, batch, threads, overrides, iterations=5)
    iterations = max(20, int(seconds * 1000 / probe))
    delay_ms = 3000
    subprocess.run(["perf", "record", "-q", "-F", "999", "-D", str(delay_ms), "-o", str(data),
                    str(attnzoo), "bench", "model", "--model", model, "--batch", str(batch),
                    "--threads", str(threads), "--warmup", str(int(delay_ms / probe) + 3),
                    "--iterations", str(iterations), *overrides],
                   check=True, capture_output=True)
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "-g", "none",
                             "--sort", "dso,symbol", "--stdio", "--percent-limit", "0"],
                            check=True, capture_output=True, text=True).stdout
    shares = defaultdict(float)
    for line in report.splitlines():
        match = re.match(r"\s*([0-9.]+)%\s+(\S+(?: tid \d+)?)\s+\[[.k]\]\s+(.*)$", line)
        if not match:
            continue
        share, dso, symbol = float(match.group(1)), match.group(2), match.group(3)
        for kind, test in KINDS:
            if test(dso, symbol):
                shares[kind] += share
                break
    return shares


def run_bench(attnzoo, model, batch, threads, overrides, iterations, profile_ops=0):
    """The median ms, and with profile_ops the op table's rows (op, calls, ms, share)."""
    cmd = [str(attnzoo), "bench", "model", "--model", model, "--batch", str(batch), "--threads",
           str(threads), "--iterations", str(iterations), *overrides]
    if profile_ops:
        cmd += ["--profile-ops", str(profile_ops)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    median = float(re.search(r"median ([0-9.]+) ms", out).group(1))
    if not profile_ops:
        return median
    rows = []
    for line in out.splitlines():
        match = re.match(r"\s+(\S.*?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%$", line)
        if match:
            rows.append((match.group(1), float(match.group(2)), float(match.group(3)),
                         float(match.group(4))))
    return median, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attnzoo")
    parser.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--set", action="append", default=[], help="a config override")
    args = parser.parse_args()
    overrides = [x for item in args.set for x in ("--set", item)]
    cases = [(m, int(b)) for m in args.models.split(",") for b in args.batches.split(",")]
    perf = {}
    ops = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, batch in cases:
            print(f"{model} batch {batch}: perf ...", file=sys.stderr, flush=True)
            perf[(model, batch)] = perf_kinds(args.attnzoo, model, batch, args.threads,
                                              args.seconds, overrides, Path(tmp))
            print(f"{model} batch {batch}: ops ...", file=sys.stderr, flush=True)
            ops[(model, batch)] = run_bench(args.attnzoo, model, batch, args.threads, overrides,
                                            iterations=10, profile_ops=20)
    names = [f"{m.replace('_patch16_224', '')} b{b}" for m, b in cases]
    print(f"\nperf samples of all threads, by kind (%), {args.threads} threads:\n")
    print("| kind | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(cases))
    for kind, _ in KINDS:
        print(f"| {kind} | " + " | ".join(f"{perf[c][kind]:.1f}" for c in cases) + " |")
    print("\nops on the calling thread: ms per forward (share), the largest first:\n")
    for case, name in zip(cases, names):
        median, rows = ops[case]
        listed = ", ".join(f"{op} {ms:.2f} ({share:.0f}%)" for op, _, ms, share in rows[:args.top])
        print(f"- {name} (median {median:.2f} ms): {listed}")


if __name__ == "__main__":
    main()
