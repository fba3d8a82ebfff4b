#!/usr/bin/env python3
"""`attnzoo serve` on a quiet machine and beside a neighbour that keeps one core busy: the figures
of docs/serving.md's "Sharing the machine".

For each model and each server setting (a list of `attnzoo serve` flags), a server is started on a
free port and wrk (the C load generator, Debian's `wrk`) sends requests from CONNS keep-alive
connections for SECONDS, once quiet and once beside `sh -c 'while :; do :; done'` (started after
the server is ready, stopped before the next run). The settings and both conditions rotate
through ROUNDS rounds, so slow drift of the machine falls on each alike; the table gives the
medians of requests/s, of p99 latency and the largest latency seen, with wrk's errors and
timeouts (its timeout: 2 s).

    serve_contention.py build/bin/attnzoo [--models vit_digits,vit_small_patch16_224,recognizer]
        [--settings "default=;one_team=--instances 1 --threads 2 --wait-policy active"]
        [--conns 8] [--seconds 10] [--rounds 3] [--json figures.json]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_test  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# Each model: the serve flags that load it, the route, and the body of a request.
MODELS = {
    "vit_digits": (["--model", "vit_digits", "--weights",
                    str(REPO / "assets/weights/vit_digits.safetensors")],
                   "/v2/models/vit_digits/classify", REPO / "assets/samples/digit_7.png"),
    "vit_small_patch16_224": (["--model", "vit_small_patch16_224"],
                              "/v2/models/vit_small_patch16_224/classify", None),
    "recognizer": (["--model", "conformer_digits_ctc", "--weights",
                    str(REPO / "assets/weights/conformer_digits_ctc.safetensors")],
                   "/v2/models/conformer_digits_ctc/transcribe",
                   REPO / "assets/samples/digits_417.wav"),
}


def post_lua(body, headers=None):
    """A wrk script that POSTs the file `body` with `headers` besides its Content-Type."""
    lines = [f'local f = io.open("{body}", "rb")', 'wrk.method = "POST"',
             'wrk.body = f:read("*all")', "f:close()",
             'wrk.headers["Content-Type"] = "application/octet-stream"']
    lines += [f'wrk.headers["{name}"] = "{value}"' for name, value in (headers or {}).items()]
    return "\n".join(lines) + "\n"


def random_png(path):
    """A 224 x 224 RGB image of noise (ViT-S classifies anything; the content does not matter)."""
    import numpy as np
    from PIL import Image
    Image.fromarray((np.random.default_rng(0).random((224, 224, 3)) * 255).astype("uint8")).save(
        path)


def milliseconds(text):
    value, unit = re.fullmatch(r"([0-9.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def wrk(port, route, lua, conns, seconds):
    out = subprocess.run(
        ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "2s", "--latency", "-s", lua,
         f"http://127.0.0.1:{port}{route}"], capture_output=True, text=True, check=True).stdout
    figures = {"rps": float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1)),
               "p99_ms": milliseconds(re.search(r"\n\s+99%\s+(\S+)", out).group(1)),
               "max_ms": milliseconds(re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out).group(1))}
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    figures["timeouts"] = int(errors.group(4)) if errors else 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    figures["errors"] = (int(non_2xx.group(1)) if non_2xx else 0) + (
        sum(int(errors.group(i)) for i in (1, 2, 3)) if errors else 0)
    return figures


def one_run(attnzoo, model, flags, conns, seconds, neighbour, work):
    serve_flags, route, body = MODELS[model]
    serve = load_test.ServeProcess(attnzoo, serve_flags + flags)
    if not serve.started():
        sys.exit(f"the server did not start: {''.join(serve.output)}")
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if neighbour else None
    try:
        return wrk(serve.port, route, str(work / f"{model}.lua"), conns, seconds)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
        serve.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attnzoo")
    parser.add_argument("--models", default="vit_digits,vit_small_patch16_224,recognizer")
    parser.add_argument("--settings",
                        default="default=;one_team=--instances 1 --threads 2 --wait-policy active;"
                                "one_thread=--instances 1 --threads 1")
    parser.add_argument("--conns", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    settings = [(name, flags.split()) for name, flags in
                (item.split("=", 1) for item in args.settings.split(";"))]
    models = args.models.split(",")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in models:
            body = MODELS[model][2]
            if body is None:
                body = work / "noise.png"
                random_png(body)
            (work / f"{model}.lua").write_text(post_lua(body))
        for round_index in range(args.rounds):
            for model in models:
                for name, flags in settings:
                    for neighbour in (False, True):
                        figures = one_run(args.attnzoo, model, flags, args.conns, args.seconds,
                                          neighbour, work)
                        key = (model, name, "neighbour" if neighbour else "quiet")
                        results.setdefault(key, []).append(figures)
                        print(f"round {round_index + 1}/{args.rounds} {' '.join(key)}: "
                              f"{figures['rps']:.1f} requests/s, p99 {figures['p99_ms']:.1f} ms, "
                              f"max {figures['max_ms']:.1f} ms", flush=True)
    print(f"\n| model | setting | condition | requests/s | p99 ms | max ms | errors, timeouts |")
    print("|---|---|---|---:|---:|---:|---:|")
    table = []
    for (model, name, condition), runs in results.items():
        row = {"model": model, "setting": name, "condition": condition,
               "rps": statistics.median(r["rps"] for r in runs),
               "p99_ms": statistics.median(r["p99_ms"] for r in runs),
               "max_ms": max(r["max_ms"] for r in runs),
               "errors": sum(r["errors"] for r in runs),
               "timeouts": sum(r["timeouts"] for r in runs), "runs": runs}
        table.append(row)
        print(f"| {model} | {name} | {condition} | {row['rps']:.1f} | {row['p99_ms']:.1f} | "
              f"{row['max_ms']:.1f} | {row['errors']}, {row['timeouts']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
