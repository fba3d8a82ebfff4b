#!/usr/bin/env python3
"""Dynamic batching against the model's own batched ceiling: the figures of docs/serving.md's
"Dynamic batching against the ceiling".

For each model, in one run with the measurements rotating through ROUNDS rounds (medians):
  - the ceiling: `attnzoo bench model --model M --batch B --threads T`, the forward pass of a
    batch of B on random weights, as B / its median time (rows per second);
  - the server, in each SETTING (its flags; the default, "default=": the server's own choice of
    instances and threads, and "one_team=--instances 1 --threads T": one instance as the bench
    runs it), with `max_batch_size` B and a queue delay, under wrk with CONNS keep-alive connections posting one row each as binary tensors
    (`pixels` FP32 for the ViTs, `waveform` FP32 of 2.1 s for the recognizer: no image or audio
    file to decode, so that the server's own costs are what separates it from the ceiling), its
    mean batch size, and where a batch's time went in the server (/metrics: the forward pass, the
    stacking of inputs and the outputs, per execution).

    serve_batching.py build/bin/attnzoo [--models vit_digits,vit_small_patch16_224,recognizer]
        [--batch 8] [--threads 2] [--conns N] [--seconds 10] [--rounds 3] [--delay-us 5000]
        [--settings "default=;one_team=--instances 1 --threads 2"]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_test  # noqa: E402
from serve_contention import post_lua, wrk  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ASR_WEIGHTS = REPO / "assets/weights/conformer_digits_ctc.safetensors"
# Each model: its name in the zoo, the serve flags beyond the model, the bench flags beyond the
# model, and the one input of a request (name, numpy array without the batch dimension).
SECONDS = 2.1
MODELS = {
    "vit_digits": ("vit_digits", ["--weights", str(REPO / "assets/weights/vit_digits.safetensors")],
                   [], ("pixels", (3, 32, 32))),
    "vit_small_patch16_224": ("vit_small_patch16_224", [], [], ("pixels", (3, 224, 224))),
    "recognizer": ("conformer_digits_ctc", ["--weights", str(ASR_WEIGHTS)],
                   ["--seconds", str(SECONDS)], ("waveform", (int(16000 * SECONDS),))),
}
def request_body(name, shape):
    """A binary infer request of one row of random values; no outputs listed (all come back)."""
    values = np.random.default_rng(0).uniform(-0.5, 0.5, (1, *shape)).astype("<f4")
    raw = values.tobytes()
    header = json.dumps({"inputs": [{"name": name, "datatype": "FP32", "shape": [1, *shape],
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    return header + raw, len(header)


def ceiling(attnzoo, zoo_name, bench_flags, batch, threads, work):
    """Rows per second of the batched forward, and its median time in ms."""
    out = work / "bench.json"
    subprocess.run([attnzoo, "bench", "model", "--model", zoo_name, "--batch", str(batch),
                    "--threads", str(threads), "--iterations", "10", "--json", str(out),
                    *bench_flags], check=True, capture_output=True)
    summary = json.loads(out.read_text())
    median_ms = summary["median_ms"]
    return batch * 1000.0 / median_ms, median_ms


def metric_sum(port, name, model):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    match = re.search(re.escape(name) + r'\{model="' + re.escape(model) + r'"[^}]*\} ([0-9.e+]+)',
                      text)
    return float(match.group(1)) if match else 0.0


def served(attnzoo, zoo_name, serve_flags, setting, batch, delay_us, conns, seconds, lua):
    serve = load_test.ServeProcess(attnzoo, [
        "--model", zoo_name, *serve_flags, *setting, "--max-batch-size", str(batch),
        "--max-queue-delay-us", str(delay_us), "--max-queue-size", str(4 * conns),
        "--grpc-port", "-1"])
    if not serve.started():
        sys.exit(f"the server did not start: {''.join(serve.output)}")
    try:
        figures = wrk(serve.port, f"/v2/models/{zoo_name}/infer", str(lua), conns, seconds)
        rows = metric_sum(serve.port, "nv_inference_count", zoo_name)
        executions = max(1.0, metric_sum(serve.port, "nv_inference_exec_count", zoo_name))
        figures["mean_batch"] = rows / executions
        # Where a batch's time goes in the server: the forward pass against the bench's, and the
        # stacking of inputs and the outputs around it (per execution, ms).
        for stage in ("input", "infer", "output"):
            figures[f"{stage}_ms"] = metric_sum(
                serve.port, f"nv_inference_compute_{stage}_duration_us", zoo_name) / executions / 1e3
        return figures
    finally:
        serve.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attnzoo")
    parser.add_argument("--models", default="vit_digits,vit_small_patch16_224,recognizer")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    # 0: two batches' worth of connections (four for vit_digits, whose requests are short)
    parser.add_argument("--conns", type=int, default=0)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay-us", type=int, default=5000)
    parser.add_argument("--settings", default="default=;one_team=--instances 1 --threads 2")
    args = parser.parse_args()
    models = args.models.split(",")
    settings = [(name, flags.split()) for name, flags in
                (item.split("=", 1) for item in args.settings.split(";"))]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in models:
            body, header_length = request_body(*MODELS[model][3])
            (work / f"{model}.bin").write_bytes(body)
            (work / f"{model}.lua").write_text(post_lua(
                work / f"{model}.bin", {"Inference-Header-Content-Length": header_length}))
        for round_index in range(args.rounds):
            for model in models:
                zoo_name, serve_flags, bench_flags, _ = MODELS[model]
                top, bench_ms = ceiling(args.attnzoo, zoo_name, bench_flags, args.batch,
                                        args.threads, work)
                conns = args.conns or 2 * args.batch * (4 if model == "vit_digits" else 1)
                for name, setting in settings:
                    figures = served(args.attnzoo, zoo_name, serve_flags, setting, args.batch,
                                     args.delay_us, conns, args.seconds, work / f"{model}.lua")
                    figures["ceiling"] = top
                    figures["bench_ms"] = bench_ms
                    results.setdefault((model, name), []).append(figures)
                    print(f"round {round_index + 1}/{args.rounds} {model} {name}: ceiling "
                          f"{top:.1f} rows/s, served {figures['rps']:.1f} requests/s (mean batch "
                          f"{figures['mean_batch']:.2f}, {figures['errors']} errors, "
                          f"{figures['timeouts']} timeouts; a batch: forward "
                          f"{figures['infer_ms']:.1f} ms against the bench's {bench_ms:.1f}, "
                          f"input {figures['input_ms']:.1f}, output {figures['output_ms']:.1f})",
                          flush=True)
    print(f"\n| model | setting | bench model --batch {args.batch} rows/s | served requests/s | "
          "served / ceiling | mean batch | server's forward ms | bench's ms | input + output ms "
          "| p99 ms | errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        for name, _ in settings:
            runs = results[(model, name)]
            top = statistics.median(r["ceiling"] for r in runs)
            rps = statistics.median(r["rps"] for r in runs)
            print(f"| {model} | {name} | {top:.1f} | {rps:.1f} | {rps / top:.2f} | "
                  f"{statistics.median(r['mean_batch'] for r in runs):.2f} | "
                  f"{statistics.median(r['infer_ms'] for r in runs):.1f} | "
                  f"{statistics.median(r['bench_ms'] for r in runs):.1f} | "
                  f"{statistics.median(r['input_ms'] + r['output_ms'] for r in runs):.1f} | "
                  f"{statistics.median(r['p99_ms'] for r in runs):.0f} | "
                  f"{sum(r['errors'] + r['timeouts'] for r in runs)} |")


if __name__ == "__main__":
    main()
