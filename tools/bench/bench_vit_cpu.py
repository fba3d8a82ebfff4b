"""ViT inference latency on the CPU: attnzoo (C++, `attnzoo bench model`) against timm eager (Python,
the same LibTorch underneath) and ONNX Runtime (the model exported from timm), measured side by
side in one session: rounds alternate the three in a rotating order, every timed call is kept, and
the medians over all rounds are compared as ratios. Same thread count for all (intra-op; ONNX
Runtime's inter-op 1). Random weights: latency does not depend on them.

With --bf16, also attnzoo in bfloat16 against its own float32 (ratio of medians) and the drift of
the logits (max |bf16 - fp32| on the same input and weights).

With --int8, also attnzoo's int8 inference (`--set inference.quantize=int8`: int8 weights per
output channel, activations per row) against its own float32 and against ONNX Runtime running
onnxruntime.quantization.quantize_dynamic's model of the same export (int8 weights per channel,
the default QUInt8 activations), alternating in one session.

usage: tools/bench/bench_vit_cpu.py [--models vit_tiny_patch16_224,...] [--batches 1,8] [--threads N]
                              [--rounds 5] [--iterations 10] [--warmup 3] [--bf16] [--int8]
                              [--json FILE]
Run from the repository root after tools/setup.sh (uses build/bin/attnzoo and the venv's packages).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import onnxruntime as ort
import timm
import torch
from safetensors.torch import load_file

from bench_common import alternate, attnzoo_times, cpu_model, python_times

ROOT = Path(__file__).resolve().parents[2]


def vit_times(binary, model, batch, threads, iterations, warmup, dtype="fp32", output=None,
              extra=()):
    extra = (["--batch", str(batch), "--dtype", dtype] + (["--output", str(output)] if output else [])
             + list(extra))
    return attnzoo_times(binary, model, iterations, warmup, threads, extra)


def export_onnx(model, size, path: Path) -> None:
    torch.onnx.export(model, (torch.randn(1, *size),), str(path), dynamo=False,
                      input_names=["pixels"], output_names=["logits"],
                      dynamic_axes={"pixels": {0: "batch"}}, opset_version=17)


def ort_session(path: Path, threads: int):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224,"
                                            "vit_base_patch16_224")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--json")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = {"threads": args.threads, "rounds": args.rounds, "iterations": args.iterations,
               "torch": torch.__version__, "timm": timm.__version__,
               "onnxruntime": ort.__version__, "cpu": cpu_model(), "cases": []}
    print(f"# threads {args.threads}, {args.rounds} rounds x {args.iterations} calls, "
          f"alternating; medians in ms; torch {torch.__version__}, timm {timm.__version__}, "
          f"onnxruntime {ort.__version__}; {results['cpu']}")
    print(f"{'model':24} {'batch':>5} {'attnzoo':>9} {'timm':>9} {'ORT':>9} "
          f"{'vs timm':>8} {'vs ORT':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = timm.create_model(name, pretrained=False).eval()
            onnx_path = Path(tmp) / f"{name}.onnx"
            size = model.default_cfg["input_size"]
            export_onnx(model, size, onnx_path)
            session = ort_session(onnx_path, args.threads)
            for batch in [int(b) for b in args.batches.split(",")]:
                x = torch.randn(batch, *size)
                xn = x.numpy()

                def run_timm():
                    with torch.inference_mode():
                        model(x)

                def run_ort():
                    session.run(None, {"pixels": xn})

                times = alternate({
                    "attnzoo": lambda: vit_times(args.binary, name, batch, args.threads,
                                                 args.iterations, args.warmup),
                    "timm": lambda: python_times(run_timm, args.iterations, args.warmup),
                    "ort": lambda: python_times(run_ort, args.iterations, args.warmup),
                }, args.rounds)
                med = {k: statistics.median(v) for k, v in times.items()}
                case = {"model": name, "batch": batch, "median_ms": med, "times_ms": times,
                        "attnzoo_vs_timm": med["attnzoo"] / med["timm"],
                        "attnzoo_vs_ort": med["attnzoo"] / med["ort"]}
                results["cases"].append(case)
                print(f"{name:24} {batch:>5} {med['attnzoo']:9.2f} {med['timm']:9.2f} "
                      f"{med['ort']:9.2f} {case['attnzoo_vs_timm']:8.3f} "
                      f"{case['attnzoo_vs_ort']:8.3f}", flush=True)
        if args.bf16:
            results["bf16"] = bf16_report(args, Path(tmp))
        if args.int8:
            results["int8"] = int8_report(args, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def bf16_report(args, tmp: Path) -> list:
    print("\n# attnzoo bf16 vs fp32 (same input and random weights), alternating")
    print(f"{'model':24} {'batch':>5} {'fp32':>9} {'bf16':>9} {'bf16/fp32':>10} "
          f"{'max|dlogit|':>12} {'max|logit|':>11}")
    report = []
    for name in args.models.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            times = alternate({
                dtype: (lambda dtype=dtype: vit_times(args.binary, name, batch, args.threads,
                                                      args.iterations, args.warmup, dtype,
                                                      tmp / f"{dtype}.safetensors"))
                for dtype in ("fp32", "bf16")}, args.rounds)
            fp32 = load_file(str(tmp / "fp32.safetensors"))["output"].double()
            bf16 = load_file(str(tmp / "bf16.safetensors"))["output"].double()
            med = {k: statistics.median(v) for k, v in times.items()}
            drift = (fp32 - bf16).abs().max().item()
            entry = {"model": name, "batch": batch, "median_ms": med,
                     "bf16_vs_fp32": med["bf16"] / med["fp32"], "max_logit_diff": drift,
                     "max_abs_logit": fp32.abs().max().item()}
            report.append(entry)
            print(f"{name:24} {batch:>5} {med['fp32']:9.2f} {med['bf16']:9.2f} "
                  f"{entry['bf16_vs_fp32']:10.3f} {drift:12.4f} {entry['max_abs_logit']:11.3f}",
                  flush=True)
    return report


def int8_report(args, tmp: Path) -> list:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    print("\n# int8: attnzoo int8 vs its fp32, and vs ONNX Runtime's quantize_dynamic, alternating")
    print(f"{'model':24} {'batch':>5} {'fp32':>9} {'int8':>9} {'ORT int8':>9} {'fp32/int8':>10} "
          f"{'int8 vs ORT int8':>17} {'max|dlogit|':>12}")
    report = []
    for name in args.models.split(","):
        model = timm.create_model(name, pretrained=False).eval()
        size = model.default_cfg["input_size"]
        onnx_path, int8_path = tmp / f"{name}.fp32.onnx", tmp / f"{name}.int8.onnx"
        export_onnx(model, size, onnx_path)
        quantize_dynamic(str(onnx_path), str(int8_path), weight_type=QuantType.QInt8,
                         per_channel=True)
        session = ort_session(int8_path, args.threads)
        for batch in [int(b) for b in args.batches.split(",")]:
            xn = torch.randn(batch, *size).numpy()
            times = alternate({
                "fp32": lambda: vit_times(args.binary, name, batch, args.threads, args.iterations,
                                          args.warmup, output=tmp / "fp32.safetensors"),
                "int8": lambda: vit_times(args.binary, name, batch, args.threads, args.iterations,
                                          args.warmup, output=tmp / "int8.safetensors",
                                          extra=["--set", "inference.quantize=int8"]),
                "ort_int8": lambda: python_times(lambda: session.run(None, {"pixels": xn}),
                                                 args.iterations, args.warmup),
            }, args.rounds)
            fp32 = load_file(str(tmp / "fp32.safetensors"))["output"].double()
            int8 = load_file(str(tmp / "int8.safetensors"))["output"].double()
            med = {k: statistics.median(v) for k, v in times.items()}
            entry = {"model": name, "batch": batch, "median_ms": med, "times_ms": times,
                     "fp32_vs_int8": med["fp32"] / med["int8"],
                     "int8_vs_ort_int8": med["int8"] / med["ort_int8"],
                     "max_logit_diff": (fp32 - int8).abs().max().item()}
            report.append(entry)
            print(f"{name:24} {batch:>5} {med['fp32']:9.2f} {med['int8']:9.2f} "
                  f"{med['ort_int8']:9.2f} {entry['fp32_vs_int8']:10.2f} "
                  f"{entry['int8_vs_ort_int8']:17.3f} {entry['max_logit_diff']:12.4f}",
                  flush=True)
    return report


if __name__ == "__main__":
    sys.exit(main())
