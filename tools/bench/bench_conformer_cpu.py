"""Conformer encoder latency on the CPU: attnzoo (C++, `attnzoo bench model`) against
torchaudio.models.Conformer (Python eager, the same LibTorch underneath) in the same
configuration, measured side by side in one session (alternating rounds, every timed call kept,
medians compared as ratios, the same thread count).

torchaudio's Conformer is the block stack (no subsampling, no positional encodings), so the
comparison runs our blocks in that configuration: the sizes of conformer_s / conformer_m (kernel
31, odd, as torchaudio requires) on the frames that 10 s and 60 s of audio leave after x4
subsampling (25 per second). Our full encoders (conv2d x4 subsampling, relative positions) are
timed too, for the real-time factor (RTF = time / audio duration).

usage: tools/bench/bench_conformer_cpu.py [--models conformer_s,conformer_m] [--seconds 10,60]
                                    [--threads N] [--rounds 5] [--iterations 5] [--json FILE]
Run from the repository root after tools/setup.sh (uses build/bin/attnzoo and the venv's packages).
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torchaudio
import yaml

from bench_common import alternate, attnzoo_times, python_times

ROOT = Path(__file__).resolve().parents[2]


def conformer_times(binary, model, overrides, frames, threads, iterations, warmup):
    extra = ["--frames", str(frames)]
    for o in overrides:
        extra += ["--set", o]
    return attnzoo_times(binary, model, iterations, warmup, threads, extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="conformer_s,conformer_m")
    parser.add_argument("--seconds", default="10,60")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {"threads": args.threads, "rounds": args.rounds, "iterations": args.iterations,
               "torch": torch.__version__, "torchaudio": torchaudio.__version__, "cases": []}
    print(f"# threads {args.threads}, {args.rounds} rounds x {args.iterations} calls, "
          f"alternating; medians in ms; torch {torch.__version__}, torchaudio "
          f"{torchaudio.__version__}")
    print(f"{'model':12} {'audio':>6} {'frames':>6} {'attnzoo':>9} {'torchaudio':>10} "
          f"{'ratio':>6} {'full enc.':>9} {'RTF':>7}")
    for name in args.models.split(","):
        arch = yaml.safe_load((ROOT / "configs" / "conformer" / f"{name}.yaml").read_text())[
            "architecture"]
        d, heads, ffn, layers = (arch["encoder_dim"], arch["num_heads"], arch["ffn_dim"],
                                 arch["num_layers"])
        # torchaudio's layout: blocks only, odd kernel, no positions, no final norm.
        stack = [f"architecture.input_dim={d}", "architecture.subsampling=none",
                 "architecture.position=none", "architecture.final_norm=false",
                 "architecture.depthwise_conv_kernel_size=31", "features={kind: fbank, "
                 f"num_mel_bins: {d}}}"]
        torch.manual_seed(0)
        reference = torchaudio.models.Conformer(input_dim=d, num_heads=heads, ffn_dim=ffn,
                                                num_layers=layers,
                                                depthwise_conv_kernel_size=31).eval()
        for seconds in [int(s) for s in args.seconds.split(",")]:
            frames = seconds * 25  # after x4 subsampling of 100 frames per second
            x = torch.randn(1, frames, d)
            lengths = torch.tensor([frames])

            def run_torchaudio():
                with torch.inference_mode():
                    reference(x, lengths)

            times = alternate({
                "attnzoo": lambda: conformer_times(args.binary, name, stack, frames,
                                                   args.threads, args.iterations, args.warmup),
                "torchaudio": lambda: python_times(run_torchaudio, args.iterations,
                                                   args.warmup),
                "full": lambda: conformer_times(args.binary, name, [], seconds * 100,
                                                args.threads, args.iterations, args.warmup),
            }, args.rounds)
            med = {k: statistics.median(v) for k, v in times.items()}
            case = {"model": name, "seconds": seconds, "frames": frames, "median_ms": med,
                    "times_ms": times, "attnzoo_vs_torchaudio": med["attnzoo"] / med["torchaudio"],
                    "rtf_full_encoder": med["full"] / (1000.0 * seconds)}
            results["cases"].append(case)
            print(f"{name:12} {seconds:5}s {frames:6} {med['attnzoo']:9.1f} "
                  f"{med['torchaudio']:10.1f} {case['attnzoo_vs_torchaudio']:6.3f} "
                  f"{med['full']:9.1f} {case['rtf_full_encoder']:7.4f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
