"""Helpers shared by the peer benchmarks (tools/bench/bench_*_cpu.py): timing attnzoo through
`attnzoo bench model` (every timed call, from its JSON), timing a Python callable the same way,
and naming the CPU."""
import json
import subprocess
import tempfile
import time
from pathlib import Path


def attnzoo_times(binary, model, iterations, warmup, threads, extra=()):
    """Every timed call (ms) of `attnzoo bench model --model MODEL ...EXTRA`."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "bench.json"
        cmd = [str(binary), "bench", "model", "--model", model, "--threads", str(threads),
               "--iterations", str(iterations), "--warmup", str(warmup), "--json", str(report),
               *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads(report.read_text())["times_ms"]


def python_times(call, iterations, warmup):
    """Every timed call (ms) of `call()` after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def alternate(runners: dict, rounds: int) -> dict:
    """Runs each runner (a callable returning a list of times) once per round, in an order that
    rotates from round to round, and gathers every time per runner."""
    order = list(runners)
    times = {k: [] for k in order}
    for r in range(rounds):
        shift = r % len(order)
        for k in order[shift:] + order[:shift]:
            times[k] += runners[k]()
    return times


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
