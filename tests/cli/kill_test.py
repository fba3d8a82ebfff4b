"""kill_test.py ATTNZOO_BINARY TRAIN_DATA_DIR: `attnzoo train` killed (SIGKILL) at 20 moments of a
short run, 7 of them inside a checkpoint save, each time resumed from what it left; the run then
ends with the weights, metrics.csv and diagnostics.jsonl of the same run never interrupted.

Saves are made observable by ATTNZOO_WRITE_PAUSE_MS (io/atomic_file.h): each write says on stderr
when it begins and pauses at three moments inside, and the test kills at a random time in that
window. The other kills land after a random step's progress line. After every kill the run
folder must hold only complete files under their final names: checkpoint.safetensors (when
present) and model.safetensors read whole, every line of metrics.csv and diagnostics.jsonl but a
torn last one complete."""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors import safe_open

PAUSE_MS = 240
KILLS = 20
IN_SAVE = {0, 3, 6, 9, 12, 15, 18}  # the kills inside a checkpoint save (7)
STEPS = 36


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def read_safetensors(path: Path) -> dict:
    with safe_open(str(path), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def check_lines(path: Path, complete) -> list:
    """The complete lines of an append-only file; only the last may be torn."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    lines.pop()  # "" when the file ends with a newline, else the torn last line
    for number, line in enumerate(lines, 1):
        if not complete(line):
            fail(f"{path.name}: line {number} is not complete: {line!r}")
    return lines  # a torn last line is what a kill may leave; a resume drops it


def metrics_row(line: str) -> bool:
    return line.startswith("step,") or (line.count(",") == 10 and line.split(",")[0].isdigit())


def json_line(line: str) -> bool:
    try:
        return isinstance(json.loads(line)["step"], int)
    except (ValueError, KeyError, TypeError):
        return False


def check_folder(run: Path) -> None:
    for name in ("checkpoint.safetensors", "model.safetensors"):
        if (run / name).exists():
            try:
                tensors = read_safetensors(run / name)
            except Exception as error:  # noqa: BLE001 - any failure to read is the finding
                fail(f"{name} after a kill cannot be read: {error}")
            if not tensors:
                fail(f"{name} after a kill holds no tensors")
    check_lines(run / "metrics.csv", metrics_row)
    check_lines(run / "diagnostics.jsonl", json_line)


def train_command(binary: str, config: Path, run: Path) -> list:
    command = [binary, "train", "--config", str(config), "--output", str(run)]
    if (run / "checkpoint.safetensors").exists():
        command += ["--resume", str(run / "checkpoint.safetensors")]
    return command


def killed_run(command: list, env: dict, in_save: bool, target_step: int, rng) -> str:
    """Starts the run and kills it at the moment asked; returns what the kill interrupted."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, bufsize=1)
    moment = None
    for line in process.stderr:
        if in_save and line.startswith("attnzoo: write begin: ") and \
                line.rstrip().endswith("checkpoint.safetensors"):
            time.sleep(rng.uniform(0.0, PAUSE_MS / 1000.0))
            moment = "inside a checkpoint save"
        elif not in_save and line.startswith("step ") and \
                int(line.split()[1].split("/")[0].rstrip(":")) >= target_step:
            time.sleep(rng.uniform(0.0, 0.15))
            moment = f"after step {target_step}"
        if moment:
            process.send_signal(signal.SIGKILL)
            break
    process.stderr.close()
    code = process.wait()
    if moment is None:
        return "finished" if code == 0 else f"failed ({code})"
    return moment if code == -signal.SIGKILL else f"{moment}, but it had exited ({code})"


def main() -> None:
    binary, data = sys.argv[1], Path(sys.argv[2])
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        subprocess.run([sys.executable, str(Path(__file__).with_name("make_stripes.py")),
                        str(root)], check=True)
        config = root / "train.yaml"
        config.write_text(
            f"model: {data}/vit_train_micro.yaml\n"
            "data: {kind: image_folder, train: train, val: val, workers: 1}\n"
            "augment: {crop_scale: [0.5, 1.0]}\n"
            "optimizer: {lr: 3.0e-3}\n"
            "schedule: {warmup_steps: 3}\n"
            "train: {epochs: 6, batch_size: 6, log_every: 1, checkpoint_every: 2,"
            " diagnostics_every: 3, seed: 2, threads: 1}\n")
        env = dict(os.environ, ATTNZOO_WRITE_PAUSE_MS=str(PAUSE_MS))
        reference = root / "reference"
        subprocess.run([binary, "train", "--config", str(config), "--output", str(reference)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        run = root / "run"
        inside = 0
        targets = sorted(rng.sample(range(1, STEPS - 4), KILLS - len(IN_SAVE)))
        for kill in range(KILLS):
            in_save = kill in IN_SAVE
            target = 0 if in_save else targets.pop(0)
            outcome = killed_run(train_command(binary, config, run), env, in_save, target, rng)
            print(f"kill {kill + 1:2d}: {outcome}", flush=True)
            if outcome.startswith("finished") or "exited" in outcome or "failed" in outcome:
                fail(f"kill {kill + 1} did not interrupt the run: {outcome}")
            inside += outcome == "inside a checkpoint save"
            check_folder(run)
        if inside < 5:
            fail(f"only {inside} kills landed inside a checkpoint save")

        finished = subprocess.run(train_command(binary, config, run), env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if finished.returncode != 0:
            fail(f"the last resume failed:\n{finished.stderr}")
        check_folder(run)

        ours, theirs = read_safetensors(run / "model.safetensors"), \
            read_safetensors(reference / "model.safetensors")
        if ours.keys() != theirs.keys():
            fail("model.safetensors: other tensor names than the uninterrupted run's")
        diff = max((ours[k].double() - theirs[k].double()).abs().max().item() for k in ours)
        if diff > 1e-6:
            fail(f"model.safetensors differs from the uninterrupted run's by {diff:.3g} (> 1e-6)")
        steps = [int(line.split(",")[0]) for line in check_lines(run / "metrics.csv", metrics_row)[1:]]
        if steps != list(range(1, STEPS + 1)):
            fail(f"metrics.csv steps: {steps}")
        reference_rows = (reference / "metrics.csv").read_text().splitlines()
        ours_rows = (run / "metrics.csv").read_text().splitlines()
        for a, b in zip(reference_rows[1:], ours_rows[1:]):
            if abs(float(a.split(",")[2]) - float(b.split(",")[2])) > 1e-6:
                fail(f"metrics.csv loss differs: {a} / {b}")
        def diagnosed(folder: Path) -> list:
            return [json.loads(line)["step"]
                    for line in check_lines(folder / "diagnostics.jsonl", json_line)]
        if diagnosed(run) != diagnosed(reference) or len(diagnosed(run)) < STEPS // 3 - 1:
            fail(f"diagnostics.jsonl steps: {diagnosed(run)}, uninterrupted: {diagnosed(reference)}")
        left = [p.name for p in run.iterdir() if ".tmp-" in p.name]
        if left:
            fail(f"temporaries left in the run folder: {left}")
        print(f"PASS: {KILLS} kills ({inside} inside a checkpoint save); the resumed run's weights "
              f"equal the uninterrupted run's within {diff:.3g}")


if __name__ == "__main__":
    main()
