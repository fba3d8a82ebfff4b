#!/usr/bin/env python3
"""A bounded load generator for `attnzoo serve` (KServe v2 infer over HTTP/1.1 keep-alive).

CLIENTS threads each send one request at a time, for SECONDS (or REQUESTS in all), each request
one image of the set (cycled), as the binary tensor extension: an encoded image file ("image",
BYTES) or prepared pixels ("pixels", FP32, random, seeded). It prints throughput and latency
percentiles (p50, p90, p99, max), and counts errors and, with --check, wrong answers: every
logits row must equal the answer the same server gave to that input alone, before the load
(one client, one request at a time: no batch partner), within --tolerance.

    load_test.py --port 8000 --model vit_digits --images assets/samples/digit_7.png \
        --clients 64 --seconds 30 --check [--json] [--rss PID]

--rss PID samples the server's resident memory (/proc/PID/status) every second and reports the
first and last samples and the maximum.
"""
import argparse
import http.client
import json
import re
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np


def infer_body(name, datatype, shape, raw):
    """The body and headers of a binary-extension infer request with one input; logits back as
    binary."""
    header = json.dumps({
        "inputs": [{"name": name, "datatype": datatype, "shape": shape,
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
    }).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header)),
                          "Content-Type": "application/octet-stream"}


def image_input(path):
    data = open(path, "rb").read()
    return infer_body("image", "BYTES", [1, 1], struct.pack("<I", len(data)) + data)


def pixels_input(pixels):
    return infer_body("pixels", "FP32", list(pixels.shape), pixels.astype("<f4").tobytes())


def logits_of(status, headers, body):
    """The logits of a binary response as float32, or None for an error status."""
    if status != 200:
        return None
    length = int(headers.get("Inference-Header-Content-Length", len(body)))
    header = json.loads(body[:length])
    out = header["outputs"][0]
    return np.frombuffer(body[length:length + out["parameters"]["binary_data_size"]],
                         dtype="<f4").reshape(out["shape"])


class Connection:
    """One keep-alive connection that reconnects after the server closes it."""

    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None

    def post(self, path, body, headers):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request("POST", path, body=body, headers=headers)
                response = self.conn.getresponse()
                return response.status, dict(response.getheaders()), response.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")


class ServeProcess:
    """`ATTNZOO serve ARGS --port 0` in a process of its own: started(), then stop() sends SIGTERM
    and returns the exit status. `output` collects what it prints. `env`: its environment (None:
    this process's)."""

    def __init__(self, attnzoo, args, env=None):
        self.process = subprocess.Popen([attnzoo, "serve", "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        self.output = []
        self.port = None

    def started(self, timeout=180.0):
        """Waits for the line saying where it listens; False when it exits or says nothing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                return False
            self.output.append(line)
            match = re.search(r"listening on http://[0-9.]+:([0-9]+)", line)
            if match:
                self.port = int(match.group(1))
                self.reader = threading.Thread(target=self._collect, daemon=True)
                self.reader.start()
                return True
        return False

    def _collect(self):
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self, timeout=60.0):
        """SIGTERM, then the exit status (None if it did not exit in time: it is killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None
        if hasattr(self, "reader"):
            self.reader.join(timeout=5)
        return status


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run(host, port, model, inputs, clients, seconds=None, requests=None, reference=None,
        tolerance=1e-5, timeout=60.0, rss_pid=None, progress=True):
    """Runs the load; returns a dict of figures. inputs: [(body, headers)]; reference: the logits
    of each input alone, or None."""
    path = f"/v2/models/{model}/infer"
    latencies, lock = [], threading.Lock()
    counts = {"ok": 0, "errors": 0, "wrong": 0, "statuses": {}}
    issued = [0]
    stop_at = time.monotonic() + seconds if seconds else None
    rss = []

    def next_index():
        with lock:
            if requests is not None and issued[0] >= requests:
                return None
            issued[0] += 1
            return issued[0] - 1

    def client():
        conn = Connection(host, port, timeout)
        while stop_at is None or time.monotonic() < stop_at:
            i = next_index()
            if i is None:
                return
            body, headers = inputs[i % len(inputs)]
            start = time.monotonic()
            try:
                status, response_headers, data = conn.post(path, body, headers)
            except Exception as e:  # a refused or reset connection counts as an error
                status, response_headers, data = f"exception {type(e).__name__}", {}, b""
            elapsed = time.monotonic() - start
            logits = logits_of(status, response_headers, data) if status == 200 else None
            with lock:
                counts["statuses"][str(status)] = counts["statuses"].get(str(status), 0) + 1
                if logits is None:
                    counts["errors"] += 1
                    continue
                latencies.append(elapsed)
                counts["ok"] += 1
                if reference is not None:
                    expected = reference[i % len(inputs)]
                    if logits.shape != expected.shape or \
                            np.abs(logits - expected).max() > tolerance:
                        counts["wrong"] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    last_print = start
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        now = time.monotonic()
        if rss_pid and (not rss or now - rss[-1][0] >= 1.0):
            rss.append((now, rss_kib(rss_pid)))
        if progress and now - last_print >= 10.0:
            last_print = now
            with lock:
                print(f"load: {now - start:.0f} s, {counts['ok']} answered, "
                      f"{counts['errors']} errors", file=sys.stderr, flush=True)
    wall = time.monotonic() - start
    lat = np.array(latencies) * 1000.0 if latencies else np.zeros(1)
    figures = {
        "clients": clients, "seconds": round(wall, 2), "answered": counts["ok"],
        "errors": counts["errors"], "wrong": counts["wrong"] if reference is not None else None,
        "statuses": counts["statuses"],
        "throughput_rps": round(counts["ok"] / wall, 2),
        "p50_ms": round(float(np.percentile(lat, 50)), 2),
        "p90_ms": round(float(np.percentile(lat, 90)), 2),
        "p99_ms": round(float(np.percentile(lat, 99)), 2),
        "max_ms": round(float(lat.max()), 2),
    }
    if rss:
        figures["rss_mib_first"] = round(rss[0][1] / 1024, 1)
        figures["rss_mib_last"] = round(rss[-1][1] / 1024, 1)
        figures["rss_mib_max"] = round(max(r for _, r in rss) / 1024, 1)
    return figures


def reference_answers(host, port, model, inputs, timeout=60.0):
    """Each input's logits from the server alone: one request at a time."""
    conn = Connection(host, port, timeout)
    answers = []
    for body, headers in inputs:
        status, response_headers, data = conn.post(f"/v2/models/{model}/infer", body, headers)
        logits = logits_of(status, response_headers, data)
        if logits is None:
            raise SystemExit(f"load_test.py: reference request failed: {status} {data[:200]!r}")
        answers.append(logits)
    return answers


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--images", nargs="*", default=[], help="image files to send")
    parser.add_argument("--pixels", type=int, nargs=3, metavar=("C", "H", "W"),
                        help="send random FP32 pixels of this size instead of images")
    parser.add_argument("--distinct", type=int, default=16, help="distinct random inputs")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--requests", type=int)
    parser.add_argument("--check", action="store_true",
                        help="compare every answer with the input's answer alone")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--rss", type=int, metavar="PID", help="sample this process's RSS")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.seconds and not args.requests:
        parser.error("give --seconds or --requests (the load is bounded)")
    if args.pixels:
        rng = np.random.default_rng(0)
        inputs = [pixels_input(rng.standard_normal((1, *args.pixels), dtype=np.float32))
                  for _ in range(args.distinct)]
    elif args.images:
        inputs = [image_input(p) for p in args.images]
    else:
        parser.error("give --images or --pixels")
    reference = reference_answers(args.host, args.port, args.model, inputs) if args.check else None
    figures = run(args.host, args.port, args.model, inputs, args.clients, args.seconds,
                  args.requests, reference, args.tolerance, rss_pid=args.rss)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>16}: {value}")
    return 1 if figures["errors"] or figures["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
