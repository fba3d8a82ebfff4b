"""attnzoo's fused residual add + LayerNorm (its CPU kernel, `torch.ops.attnzoo.add_layer_norm`
from build/lib/libattnzoo_kernels.so) against LibTorch's own two ops, `layer_norm(x + residual)`,
on the same tensors, at the block boundaries of ViT-Ti, ViT-S and ViT-B (197 and 1576 rows:
batch 1 and 8) and of conformer_s and conformer_m on 60 s of audio (1500 rows), in float32 and
bfloat16. The two alternate in rounds of a few calls each (the order rotating); the medians and
the median of the per-round ratios are reported.

    tools/bench/bench_add_layer_norm_cpu.py [--threads 2] [--rounds 15] [--calls 20] [--json FILE]

Run from the repository root with the venv's Python after tools/setup.sh (the library is
LibTorch's ABI of the venv's torch).
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from bench_common import alternate, cpu_model, python_times

ROOT = Path(__file__).resolve().parents[2]

SHAPES = [("vit_tiny", 192), ("vit_small", 384), ("vit_base", 768)]


def cases():
    for model, width in SHAPES:
        for batch in (1, 8):
            yield f"{model} b{batch}", 197 * batch, width
    yield "conformer_s 60 s", 1500, 144
    yield "conformer_m 60 s", 1500, 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per round and side")
    parser.add_argument("--library", default=str(ROOT / "build" / "lib" / "libattnzoo_kernels.so"))
    parser.add_argument("--json")
    args = parser.parse_args()
    if not Path(args.library).is_file():
        sys.exit(f"bench_add_layer_norm_cpu: {args.library} does not exist (build first)")
    torch.ops.load_library(args.library)
    torch.set_num_threads(args.threads)
    print(f"# {cpu_model()}, {args.threads} threads, {args.rounds} rounds of {args.calls} calls, "
          f"alternating; torch {torch.__version__}")
    print(f"{'shape':18} {'rows':>5} {'cols':>5} {'dtype':9} {'fused us':>9} {'unfused us':>10} "
          f"{'fused / unfused':>15}")
    results = []
    for name, rows, cols in cases():
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            x, residual = torch.randn(rows, cols, dtype=dtype), torch.randn(rows, cols, dtype=dtype)
            weight, bias = torch.randn(cols, dtype=dtype), torch.randn(cols, dtype=dtype)

            def fused():
                torch.ops.attnzoo.add_layer_norm(x, residual, weight, bias, 1e-6)

            def unfused():
                torch.nn.functional.layer_norm(x + residual, (cols,), weight, bias, 1e-6)

            with torch.inference_mode():
                times = alternate({"fused": lambda: python_times(fused, args.calls, 5),
                                   "unfused": lambda: python_times(unfused, args.calls, 5)},
                                  args.rounds)
            # alternate() gathers each side's calls round after round, args.calls a round.
            rounds = [slice(i, i + args.calls) for i in range(0, len(times["fused"]), args.calls)]
            per_round = [statistics.median(times["fused"][r]) /
                         statistics.median(times["unfused"][r]) for r in rounds]
            fused_us = 1000 * statistics.median(times["fused"])
            unfused_us = 1000 * statistics.median(times["unfused"])
            ratio = statistics.median(per_round)
            kind = str(dtype).replace("torch.", "")
            print(f"{name:18} {rows:5} {cols:5} {kind:9} {fused_us:9.1f} {unfused_us:10.1f} "
                  f"{ratio:15.2f}", flush=True)
            results.append({"shape": name, "rows": rows, "cols": cols, "dtype": kind,
                            "fused_us": fused_us, "unfused_us": unfused_us,
                            "fused_over_unfused": ratio})
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "rounds": args.rounds,
                                               "calls": args.calls, "cases": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
