#!/usr/bin/env python3
"""Where attnzoo and OpenVINO each spend a ViT's forward on the CPU, by kind of work, side by side.

bench_vit_cpu.py says which of the two is faster; this says in which part of the model. For each
model, batch and precision (fp32 against OpenVINO's INFERENCE_PRECISION_HINT f32, bf16 against
its default, bf16 on CPUs with AVX512-BF16 or AMX), in rounds that alternate the two:
  - attnzoo: `attnzoo bench model --profile-ops N`, the self time of each LibTorch op per forward;
  - OpenVINO: the same timm model exported to ONNX (bench_vit_cpu.py's export and compile
    options, one stream, same threads) with PERF_COUNT, each executed node's time per forward.

Both are summed into the same kinds: the linear layers; the attention between the qkv and the
output projection (for OpenVINO its transposes, the scaling of q and k, and the fused
scores-softmax-values subgraph); the residual adds with the LayerNorms; the patch embedding
(convolution, class token, position embedding); the rest (the head's norm and pooling, small
ops); and the wall time of the profiled forward outside any op or node (attnzoo's own code
between ops; OpenVINO's scheduling and the call from Python). OpenVINO's node times are not
exactly additive: their sum has come out up to 4% above the forward's wall time, and then that
last row is negative. Medians over the rounds, each profiled forward's wall time beside them. A
profile slows both a little, so the unprofiled ratio is bench_vit_cpu.py's.

Last, what the CPU speed goals (docs/benchmarks.md) ask of the linear layers: the goal's time
(0.95 of OpenVINO's in float32, 0.9 in bfloat16), the linears' FLOPs over the processor's
register-only peak of the same arithmetic (build/bin/bench_cpu_peak, measured in every round) as
a share of each side's linear time, and the share attnzoo's linears would need for the goal with
every other kind of work as measured: above 100%, no product can meet the goal alone.

    tools/bench/profile_openvino.py [--models vit_tiny_patch16_224,...] [--batches 1,8]
        [--dtypes fp32,bf16] [--threads 2] [--rounds 3] [--forwards 10] [--json FILE]

Run from the repository root after tools/setup.sh (build/bin/attnzoo and the venv's packages).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openvino as ov
import timm
import torch

from bench_common import cpu_model
from bench_vit_cpu import ROOT, export_onnx, openvino_request, processor_peak

# attnzoo's time over OpenVINO's that the CPU speed goals ask for (in float32 of the faster of
# ONNX Runtime and OpenVINO f32: OpenVINO in nearly every cell measured so far).
GOAL = {"fp32": 0.95, "bf16": 0.9}

KINDS = ["linear layers", "attention", "residual add + LayerNorm", "patch embedding", "rest",
         "outside ops or nodes"]


def attnzoo_kind(op: str) -> str:
    """The kind of an op of attnzoo's profile."""
    if "linear" in op or op in ("aten::addmm", "aten::mm", "aten::matmul") or "int8" in op:
        return "linear layers"
    if "attention" in op or "softmax" in op or "bmm" in op:
        return "attention"
    if "layer_norm" in op:  # the residual adds are inside attnzoo::add_layer_norm
        return "residual add + LayerNorm"
    if "convolution" in op or op in ("aten::cat", "aten::add"):  # the position embedding's add
        return "patch embedding"
    return "rest"


def openvino_kinds(nodes) -> dict:
    """ms per kind of one forward's executed nodes, in execution order: a node is attention from
    the qkv FullyConnected to the output projection's, patch embedding before the first block."""
    ms = dict.fromkeys(KINDS, 0.0)
    in_attention, in_blocks = False, False
    for name, node_type, us in nodes:
        if "/blocks/" in name:
            in_blocks = True
        if node_type == "FullyConnected":
            kind = "linear layers"
            if name.endswith("/attn/qkv/MatMul"):
                in_attention = True
            elif name.endswith("/attn/proj/MatMul"):
                in_attention = False
        elif in_attention:
            kind = "attention"
        elif not in_blocks:
            kind = "patch embedding"
        elif node_type == "MVN" or name.split("/")[-1].startswith("Add"):
            kind = "residual add + LayerNorm"
        else:
            kind = "rest"
        ms[kind] += us / 1000
    return ms


def profile_attnzoo(binary, model, batch, dtype, threads, forwards) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "bench.json"
        out = subprocess.run([str(binary), "bench", "model", "--model", model, "--batch",
                              str(batch), "--dtype", dtype, "--threads", str(threads),
                              "--iterations", "3", "--warmup", "2", "--profile-ops",
                              str(forwards), "--json", str(report)],
                             check=True, capture_output=True, text=True).stdout
        ops = json.loads(report.read_text())["ops"]
    ms = dict.fromkeys(KINDS, 0.0)
    for row in ops:
        ms[attnzoo_kind(row["op"])] += row["self_ms_per_forward"]
    # The profiled forward's wall time: what the ops' self times leave is attnzoo's own code.
    line = next(x for x in out.splitlines() if x.startswith("ops of "))
    forward = float(line.split("(")[1].split(" ms")[0])
    ms["outside ops or nodes"] = forward - sum(ms.values())
    return {"forward_ms": forward, "kinds_ms": ms}


def profile_openvino(request, x, forwards) -> dict:
    for _ in range(2):
        request.infer({0: x})
    totals = dict.fromkeys(KINDS, 0.0)
    wall = 0.0
    for _ in range(forwards):
        start = time.perf_counter()
        request.infer({0: x})
        wall += (time.perf_counter() - start) * 1000 / forwards
        nodes = [(p.node_name, p.node_type, p.real_time.total_seconds() * 1e6)
                 for p in request.get_profiling_info() if p.status.name == "EXECUTED"]
        for kind, ms in openvino_kinds(nodes).items():
            totals[kind] += ms / forwards
    # What the nodes' times leave of the call: the plugin's scheduling and the call from Python.
    totals["outside ops or nodes"] = wall - sum(totals.values())
    return {"forward_ms": wall, "kinds_ms": totals}


def linear_flops(model, batch) -> float:
    """FLOPs of the model's linear layers in one forward: 2·rows·in·out each, every token of the
    blocks, the class token's row for the head."""
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    total = 0.0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            rows = batch if name == "head" else batch * tokens
            total += 2.0 * rows * module.in_features * module.out_features
    return total


def what_the_goal_needs(case: dict, flops: float, peak_gops) -> dict:
    """The goal's time for attnzoo; the linears' share of the processor's peak, attnzoo's and
    OpenVINO's; and the share attnzoo's linears would need if the goal were met by them alone,
    every other kind as measured."""
    ours, theirs = case["attnzoo"], case["openvino"]
    goal_ms = GOAL[case["dtype"]] * theirs["forward_ms"]
    if not peak_gops:
        return {"goal_ms": goal_ms}
    at_peak_ms = flops / (peak_gops * 1e9) * 1e3
    other_ms = ours["forward_ms"] - ours["kinds_ms"]["linear layers"]
    left_ms = goal_ms - other_ms
    return {"goal_ms": goal_ms, "linears_at_peak_ms": at_peak_ms,
            "attnzoo_linears_share": at_peak_ms / ours["kinds_ms"]["linear layers"],
            "openvino_linears_share": at_peak_ms / theirs["kinds_ms"]["linear layers"],
            "linears_share_needed": at_peak_ms / left_ms if left_ms > 0 else None}


def median_profile(profiles: list) -> dict:
    return {"forward_ms": statistics.median(p["forward_ms"] for p in profiles),
            "kinds_ms": {k: statistics.median(p["kinds_ms"][k] for p in profiles) for k in KINDS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forwards", type=int, default=10)
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--peak-binary", default=str(ROOT / "build" / "bin" / "bench_cpu_peak"))
    parser.add_argument("--json")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    if set(dtypes) - {"fp32", "bf16"}:
        sys.exit(f"profile_openvino.py: --dtypes takes fp32 and bf16, got {args.dtypes}")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    peak_binary = Path(args.peak_binary)
    results = {"threads": args.threads, "rounds": args.rounds, "forwards": args.forwards,
               "openvino": ov.__version__, "cpu": cpu_model(), "cases": []}
    print(f"# {args.threads} threads, {args.rounds} rounds of {args.forwards} profiled forwards "
          f"each, alternating; medians; openvino {ov.__version__}; {results['cpu']}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = timm.create_model(name, pretrained=False).eval()
            size = model.default_cfg["input_size"]
            onnx_path = Path(tmp) / f"{name}.onnx"
            export_onnx(model, size, onnx_path)
            for batch in [int(b) for b in args.batches.split(",")]:
                flops = linear_flops(model, batch)
                x = torch.randn(batch, *size).numpy()
                for dtype in dtypes:
                    print(f"{name} batch {batch} {dtype} ...", file=sys.stderr, flush=True)
                    request = openvino_request(onnx_path, x.shape, args.threads,
                                               "f32" if dtype == "fp32" else None, profile=True)
                    ours, theirs, peaks = [], [], []
                    for r in range(args.rounds):
                        # The peak in every round: this kind of host changes speed by the minute.
                        peaks.append(processor_peak(args.threads, peak_binary).get(dtype))
                        first_ours = r % 2 == 0
                        for side in ("ours", "theirs") if first_ours else ("theirs", "ours"):
                            if side == "ours":
                                ours.append(profile_attnzoo(args.binary, name, batch, dtype,
                                                            args.threads, args.forwards))
                            else:
                                theirs.append(profile_openvino(request, x, args.forwards))
                    case = {"model": name, "batch": batch, "dtype": dtype,
                            "attnzoo": median_profile(ours), "openvino": median_profile(theirs)}
                    case["peak_gops"] = statistics.median(peaks) if all(peaks) else None
                    case["goal"] = what_the_goal_needs(case, flops, case["peak_gops"])
                    results["cases"].append(case)
                    print_case(case)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


def print_case(case: dict) -> None:
    ours, theirs = case["attnzoo"], case["openvino"]
    short = case["model"].replace("_patch16_224", "")
    print(f"\n{short} b{case['batch']} {case['dtype']}: a profiled forward "
          f"{ours['forward_ms']:.2f} ms attnzoo, {theirs['forward_ms']:.2f} OpenVINO "
          f"({ours['forward_ms'] / theirs['forward_ms']:.2f})" +
          (f"; processor peak {case['peak_gops']:.0f} G/s" if case["peak_gops"] else ""))
    print(f"  {'kind':28} {'attnzoo ms':>11} {'OpenVINO ms':>12} {'difference':>11}")
    for kind in KINDS:
        a, b = ours["kinds_ms"][kind], theirs["kinds_ms"][kind]
        print(f"  {kind:28} {a:11.2f} {b:12.2f} {a - b:+11.2f}")
    goal = case["goal"]
    line = (f"  goal: attnzoo <= {GOAL[case['dtype']]} x OpenVINO = {goal['goal_ms']:.2f} ms")
    if "linears_at_peak_ms" in goal:
        needed = goal["linears_share_needed"]
        line += (f"; the linears at {goal['attnzoo_linears_share']:.0%} of the peak "
                 f"(OpenVINO's {goal['openvino_linears_share']:.0%}); " +
                 (f"by the linears alone the goal needs them at {needed:.0%} of it" if needed
                  else "the rest alone takes longer than the goal allows"))
    print(line)


if __name__ == "__main__":
    main()
