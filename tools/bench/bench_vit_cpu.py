"""ViT inference latency on the CPU, attnzoo against the runtimes a user would pick instead,
measured side by side in one session: rounds alternate every peer in a rotating order, every
timed call is kept, and the medians over all rounds are compared as ratios. Same thread count for
all (intra-op; ONNX Runtime's inter-op 1; OpenVINO one stream). Random weights: latency does not
depend on them. The peers (--peers, all by default):

  attnzoo          `attnzoo bench model` in float32
  attnzoo_bf16     the same in bfloat16 (--dtype bf16)
  attnzoo_int8     the same with `--set inference.quantize=int8` (int8 weights per output
                   channel, activations per row)
  attnzoo_int8_bf16  int8 with bfloat16 activations between the int8 products (`--dtype bf16`
                   with int8: the attention, LayerNorms and residual stream in bfloat16), what
                   `--dtype auto` gives with int8 on a CPU with AVX512-BF16 or AMX
  timm             timm eager (Python, the same LibTorch underneath)
  ort              ONNX Runtime on the model exported from timm (opset 17)
  ort_int8         ONNX Runtime on onnxruntime.quantization.quantize_dynamic's model of that
                   export (int8 weights per channel, QUInt8 activations)
  openvino_f32     OpenVINO on the same export with INFERENCE_PRECISION_HINT f32
  openvino         OpenVINO at its default precision (bf16 on CPUs with AVX512-BF16 or AMX)

Each row also gives the achieved GFLOP/s (the model's FLOPs, counted by torch's FlopCounterMode on
timm's model, over the median time) as a share of the same-dtype GEMM rate measured in the same
run: torch.mm of 2048 x 2048 matrices in float32 and bfloat16 on the same threads.

A table after the rows gives each goal's ratio twice: of the medians over all calls, and as the
median of the per-round ratios (each round's peers run within seconds of each other, so a slow
minute of this kind of shared host weighs on both sides of a round's ratio). A last table reads
the goals (attnzoo at most 0.95 of the faster of ORT and OpenVINO f32 in
float32, 0.9 of OpenVINO's bf16, 0.9 of ORT's int8) against the processor: the model's FLOPs over
the time a goal allows, as a share of the register-only peak of the same arithmetic on the same
threads (build/bin/bench_cpu_peak: float32 FMA, bfloat16 and int8 dot products), beside the
shares attnzoo and the peer reached. A goal that asks for more than the processor's units can do
with the whole model (its softmax, norms and memory traffic included) cannot be met by any kernel.

With --bf16, also attnzoo in bfloat16 against its own float32 and the drift of the logits (max
|bf16 - fp32| on the same input and weights); with --int8, the same for int8.

usage: tools/bench/bench_vit_cpu.py [--models vit_tiny_patch16_224,...] [--batches 1,8] [--threads N]
                              [--rounds 5] [--iterations 10] [--warmup 3] [--peers attnzoo,ort,...]
                              [--bf16] [--int8] [--peak-binary FILE] [--json FILE]
Run from the repository root after tools/setup.sh (uses build/bin/attnzoo and the venv's packages).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import onnxruntime as ort
import openvino as ov
import timm
import torch
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode

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


PEERS = ["attnzoo", "attnzoo_bf16", "attnzoo_int8", "attnzoo_int8_bf16", "timm", "ort", "ort_int8",
         "openvino_f32", "openvino"]
# The GEMM rate each peer's share is taken against.
PEER_DTYPE = {"attnzoo_bf16": "bf16", "openvino": "bf16", "attnzoo_int8": "int8",
              "attnzoo_int8_bf16": "int8", "ort_int8": "int8"}


def openvino_request(onnx_path: Path, shape, threads: int, precision=None, profile=False):
    """An infer request of OpenVINO's CPU plugin on the export, reshaped to `shape` (static); one
    stream of `threads` threads; `precision`: INFERENCE_PRECISION_HINT (None: the plugin's
    default); `profile`: each node's time kept (PERF_COUNT, read by get_profiling_info)."""
    core = ov.Core()
    model = core.read_model(str(onnx_path))
    model.reshape({model.input(0).get_any_name(): ov.PartialShape(list(shape))})
    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    if profile:
        config["PERF_COUNT"] = True
    return core.compile_model(model, "CPU", config).create_infer_request()


def gemm_rates(threads: int, size: int = 2048, repeats: int = 5) -> dict:
    """GFLOP/s of torch.mm on size x size matrices, float32 and bfloat16 (the best of `repeats`),
    and of torch._int_mm in int8 where LibTorch has it on the CPU."""
    torch.set_num_threads(threads)
    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
        torch.mm(a, b)
        best = min(python_times(lambda: torch.mm(a, b), repeats, 1))
        rates[name] = 2.0 * size ** 3 / (best * 1e-3) / 1e9
    try:
        a = torch.randint(-128, 127, (size, size), dtype=torch.int8)
        b = torch.randint(-128, 127, (size, size), dtype=torch.int8)
        torch._int_mm(a, b)
        best = min(python_times(lambda: torch._int_mm(a, b), repeats, 1))
        rates["int8"] = 2.0 * size ** 3 / (best * 1e-3) / 1e9
    except (RuntimeError, AttributeError):
        pass
    return rates


def processor_peak(threads: int, binary: Path) -> dict:
    """G/s of the register-only multiply-add loops of build/bin/bench_cpu_peak (fp32 FMA, bf16 and
    int8 dot products) on `threads` threads; {} where the program is not built."""
    if not binary.is_file():
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "peak.json"
        subprocess.run([str(binary), "--threads", str(threads), "--json", str(report)],
                       check=True, stdout=subprocess.DEVNULL)
        peak = json.loads(report.read_text())
    return {k: peak[k] for k in ("fp32", "bf16", "int8") if k in peak}


# The goals: attnzoo's peer, attnzoo's time over the peer's at most this, the arithmetic.
GOALS = {"fp32": (("ort", "openvino_f32"), "attnzoo", 0.95),
         "bf16": (("openvino",), "attnzoo_bf16", 0.9),
         "int8": (("ort_int8",), "attnzoo_int8", 0.9)}


def goal_shares(case: dict, peak: dict) -> dict:
    """Per goal: the share of the peak the goal asks for, and the shares attnzoo and the peer
    reached (the model's FLOPs over each time)."""
    med, work = case["median_ms"], case["flops_per_image"] * case["batch"]
    shares = {}
    for kind, (peers, ours, ratio) in GOALS.items():
        present = [med[p] for p in peers if p in med]
        if kind not in peak or ours not in med or not present:
            continue
        def share(ms, kind=kind):
            return work / (ms * 1e-3) / 1e9 / peak[kind]

        peer = min(present)
        shares[kind] = {"goal": share(ratio * peer), "attnzoo": share(med[ours]),
                        "peer": share(peer)}
    return shares


def goal_ratios(times: dict, rounds: int) -> dict:
    """Per goal: attnzoo's time over the faster peer's as the ratio of the medians over all calls,
    and as the median of the per-round ratios (each round's own medians: the peers of a round run
    within seconds of each other, so a slow minute of the host weighs on both sides)."""
    ratios = {}
    for kind, (peers, ours, _) in GOALS.items():
        present = [p for p in peers if p in times]
        if ours not in times or not present:
            continue
        def median_of(name, r=None):
            calls = times[name]
            if r is not None:
                size = len(calls) // rounds
                calls = calls[r * size:(r + 1) * size]
            return statistics.median(calls)

        per_round = [median_of(ours, r) / min(median_of(p, r) for p in present)
                     for r in range(rounds)]
        ratios[kind] = {"of_medians": median_of(ours) / min(median_of(p) for p in present),
                        "per_round": per_round, "median_of_rounds": statistics.median(per_round)}
    return ratios


def model_flops(model, size) -> float:
    """FLOPs of one image through timm's model (matmuls, convolutions, attention)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        model(torch.randn(1, *size))
    return float(counter.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224,"
                                            "vit_base_patch16_224")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--int8", action="store_true")
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--peak-binary", default=str(ROOT / "build" / "bin" / "bench_cpu_peak"))
    parser.add_argument("--json")
    args = parser.parse_args()

    peers = args.peers.split(",")
    unknown = set(peers) - set(PEERS)
    if unknown:
        sys.exit(f"bench_vit_cpu.py: unknown peers {sorted(unknown)} (known: {PEERS})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rates = gemm_rates(args.threads)
    peak = processor_peak(args.threads, Path(args.peak_binary))
    results = {"threads": args.threads, "rounds": args.rounds, "iterations": args.iterations,
               "torch": torch.__version__, "timm": timm.__version__,
               "onnxruntime": ort.__version__, "openvino": ov.__version__, "cpu": cpu_model(),
               "gemm_gflops": rates, "peak_gops": peak, "cases": []}
    print(f"# threads {args.threads}, {args.rounds} rounds x {args.iterations} calls, "
          f"alternating; medians in ms; torch {torch.__version__}, timm {timm.__version__}, "
          f"onnxruntime {ort.__version__}, openvino {ov.__version__}; {results['cpu']}")
    print("# GEMM 2048^3 GFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()))
    print("# processor peak, registers only, G/s: " +
          (", ".join(f"{k} {v:.0f}" for k, v in peak.items()) or "bench_cpu_peak not built"))
    print(f"{'model':24} {'batch':>5} " + " ".join(f"{p:>12}" for p in peers) +
          "  attnzoo / best other f32, GFLOP/s share of GEMM per peer")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = timm.create_model(name, pretrained=False).eval()
            onnx_path = Path(tmp) / f"{name}.onnx"
            size = model.default_cfg["input_size"]
            export_onnx(model, size, onnx_path)
            flops = model_flops(model, size)
            sessions = {}
            if "ort" in peers:
                sessions["ort"] = ort_session(onnx_path, args.threads)
            if "ort_int8" in peers:
                from onnxruntime.quantization import QuantType, quantize_dynamic
                int8_path = Path(tmp) / f"{name}.int8.onnx"
                quantize_dynamic(str(onnx_path), str(int8_path), weight_type=QuantType.QInt8,
                                 per_channel=True)
                sessions["ort_int8"] = ort_session(int8_path, args.threads)
            for batch in [int(b) for b in args.batches.split(",")]:
                x = torch.randn(batch, *size)
                xn = x.numpy()
                requests = {}
                if "openvino_f32" in peers:
                    requests["openvino_f32"] = openvino_request(onnx_path, x.shape,
                                                                args.threads, "f32")
                if "openvino" in peers:
                    requests["openvino"] = openvino_request(onnx_path, x.shape, args.threads)

                def run_timm():
                    with torch.inference_mode():
                        model(x)

                def attnzoo_runner(dtype="fp32", extra=()):
                    return lambda: vit_times(args.binary, name, batch, args.threads,
                                             args.iterations, args.warmup, dtype, extra=extra)

                def python_runner(call):
                    return lambda: python_times(call, args.iterations, args.warmup)

                runners = {
                    "attnzoo": attnzoo_runner(),
                    "attnzoo_bf16": attnzoo_runner("bf16"),
                    "attnzoo_int8": attnzoo_runner(extra=["--set", "inference.quantize=int8"]),
                    "attnzoo_int8_bf16": attnzoo_runner(
                        "bf16", extra=["--set", "inference.quantize=int8"]),
                    "timm": python_runner(run_timm),
                    "ort": python_runner(lambda: sessions["ort"].run(None, {"pixels": xn})),
                    "ort_int8": python_runner(
                        lambda: sessions["ort_int8"].run(None, {"pixels": xn})),
                    "openvino_f32": python_runner(lambda: requests["openvino_f32"].infer({0: xn})),
                    "openvino": python_runner(lambda: requests["openvino"].infer({0: xn})),
                }
                times = alternate({p: runners[p] for p in peers}, args.rounds)
                med = {k: statistics.median(v) for k, v in times.items()}
                share = {p: flops * batch / (med[p] * 1e-3) / 1e9 /
                         rates[PEER_DTYPE.get(p, "fp32")]
                         for p in peers if PEER_DTYPE.get(p, "fp32") in rates}
                case = {"model": name, "batch": batch, "flops_per_image": flops,
                        "median_ms": med, "times_ms": times, "gemm_share": share}
                others = [med[p] for p in ("ort", "openvino_f32", "timm") if p in med]
                if "attnzoo" in med and others:
                    case["attnzoo_vs_best_f32"] = med["attnzoo"] / min(others)
                case["peak_share"] = goal_shares(case, peak)
                case["goal_ratios"] = goal_ratios(times, args.rounds)
                results["cases"].append(case)
                ratio = f"{case['attnzoo_vs_best_f32']:.3f}" if "attnzoo_vs_best_f32" in case \
                    else "-"
                print(f"{name:24} {batch:>5} " + " ".join(f"{med[p]:12.2f}" for p in peers) +
                      f"  {ratio}  " + " ".join(f"{p} {share[p]:.0%}" for p in share),
                      flush=True)
        print_goal_shares(results["cases"])
        print_goal_ratios(results["cases"])
        if args.bf16:
            results["bf16"] = bf16_report(args, Path(tmp))
        if args.int8:
            results["int8"] = int8_report(args, Path(tmp))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def print_goal_table(cases: list, key: str, title: str, columns: list) -> None:
    """A table of case[key][goal] per case and goal: `columns` lists (field, header, width,
    format) of each goal's cells; goals that no case has are left out."""
    kinds = [k for k in GOALS if any(k in c[key] for c in cases)]
    if not kinds:
        return
    print("\n# " + title)
    print(f"{'model':24} {'batch':>5} " + " ".join(
        " ".join(f"{header.format(kind=k):>{width}}" for _, header, width, _ in columns)
        for k in kinds))
    for c in cases:
        cells = []
        for k in kinds:
            got = c[key].get(k)
            cells.append(" ".join(f"{got[field]:{width}{form}}" if got else f"{'-':>{width}}"
                                  for field, _, width, form in columns))
        print(f"{c['model']:24} {c['batch']:>5} " + " ".join(cells), flush=True)


def print_goal_shares(cases: list) -> None:
    print_goal_table(cases, "peak_share",
                     "each goal as a share of the processor's peak of its arithmetic: what the "
                     "goal asks, what attnzoo and the peer reached",
                     [("goal", "{kind} goal", 10, ".0%"), ("attnzoo", "attnzoo", 8, ".0%"),
                      ("peer", "peer", 6, ".0%")])


def print_goal_ratios(cases: list) -> None:
    lines = ", ".join(f"{k} {line}" for k, (_, _, line) in GOALS.items())
    print_goal_table(cases, "goal_ratios",
                     "goals: attnzoo / the faster peer, the ratio of the medians and the median "
                     f"of the per-round ratios (lines: {lines})",
                     [("of_medians", "{kind} medians", 13, ".3f"),
                      ("median_of_rounds", "rounds", 7, ".3f")])


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
