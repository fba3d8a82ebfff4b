#!/usr/bin/env python3
"""The figures of docs/serving.md: `attnzoo serve` under load on loopback, each model with and
without dynamic batching, at several numbers of concurrent clients, through load_test.py.

For each model and mode a server is started (2 LibTorch threads, 2 I/O threads, a queue that holds
every client); every input's answer alone is taken first (one request at a time), then each load
runs for SECONDS and every answer is checked against it. Prints a Markdown table and writes the
figures as JSON.

    serve_figures.py build/bin/attnzoo --json figures.json [--seconds 20] \
        [--models vit_digits,vit_small_patch16_224] [--clients 1,8,64] [--delay-us 2000]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_test  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = {"vit_digits": REPO / "assets" / "weights" / "vit_digits.safetensors"}
SIZES = {"vit_digits": 32}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attnzoo")
    parser.add_argument("--json", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--models", default="vit_digits,vit_small_patch16_224")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--delay-us", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    rows = []
    for model in args.models.split(","):
        size = SIZES.get(model, 224)
        rng = np.random.default_rng(0)
        inputs = [load_test.pixels_input(rng.standard_normal((1, 3, size, size), dtype=np.float32))
                  for _ in range(16)]
        for dynamic in (False, True):
            serve_args = ["--model", model, "--threads", str(args.threads),
                          "--max-batch-size", str(args.max_batch_size),
                          "--max-queue-size", str(4 * max(clients))]
            if model in WEIGHTS:
                serve_args += ["--weights", str(WEIGHTS[model])]
            if dynamic:
                serve_args += ["--max-queue-delay-us", str(args.delay_us)]
            server = load_test.ServeProcess(args.attnzoo, serve_args)
            if not server.started():
                raise SystemExit(f"serve_figures.py: the server did not start: {server.output}")
            try:
                reference = load_test.reference_answers("127.0.0.1", server.port, model, inputs)
                for n in clients:
                    figures = load_test.run("127.0.0.1", server.port, model, inputs, n,
                                            seconds=args.seconds, reference=reference,
                                            rss_pid=server.process.pid, progress=False)
                    figures.update(model=model, dynamic_batching=dynamic)
                    print(json.dumps(figures), flush=True)
                    rows.append(figures)
            finally:
                status = server.stop()
            if status != 0:
                raise SystemExit(f"serve_figures.py: the server exited with {status}")
    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| model | clients | batching | requests/s | p50 ms | p99 ms | errors | wrong |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['clients']} | "
              f"{'dynamic' if r['dynamic_batching'] else 'none'} | {r['throughput_rps']:.1f} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']} | {r['wrong']} |")
    print("\nthroughput with / without dynamic batching:")
    for model in args.models.split(","):
        for n in clients:
            pair = {r["dynamic_batching"]: r["throughput_rps"] for r in rows
                    if r["model"] == model and r["clients"] == n}
            print(f"  {model} at {n} clients: {pair[True] / pair[False]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
