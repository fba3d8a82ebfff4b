"""Speech recognition on the CPU, end to end: attnzoo (`attnzoo transcribe` on a .nemo file)
against NeMo's own `transcribe()` (eager PyTorch) on the same file and the same WAV files,
measured side by side in one session (alternating rounds, every timed call kept, medians
compared as ratios, the same thread count).

The model is parakeet-tdt-0.6b-v2's architecture (configs/conformer/parakeet-tdt-0.6b-v2.yaml:
a FastConformer of 24 x 1024 on 128 log-mel bins, no biases in the blocks, a TDT transducer),
built with random weights by NeMo 3.0.0's own class (tools/scripts/nemo_architecture_sizes.py's
config, a character vocabulary of 1024) and saved with `.save_to()`; the joint's blank bias is
raised until greedy decoding gives about 4 tokens per second of audio, as speech does (random
weights emit a token on most frames). The audio: noise shaped like speech (bursts of a few
hundred ms), 16 kHz.

Both run NeMo's greedy TDT decoding (`strategy: greedy_batch` for NeMo; attnzoo's greedy
search), batch 1, one utterance per call. attnzoo's time per call is the recognizer's own
(`ms` of `transcribe --json`: features, encoder and decoding, the model loaded once per round);
NeMo's is the wall time of `model.transcribe([wav], batch_size=1)`, which also builds its data
loader each call, and, for the forward alone, of preprocessor + encoder + decoding on the
samples as a tensor. Before timing, the two transcripts of the first file are compared.

usage: tools/bench/bench_nemo_cpu.py [--seconds 10,60] [--threads 2] [--rounds 3]
                                     [--iterations 2] [--warmup 1] [--tokens-per-second 4]
                                     [--json FILE]
Run from the repository root after tools/setup.sh (uses build/bin/attnzoo and the venv, with
NeMo's imports from <venv>/nemo-asr). Memory: about 6 GB (the model twice).
"""
import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

for extra in ("nemo-asr", "espnet-inference"):
    sys.path.insert(0, str(Path(sys.prefix) / extra))
logging.disable(logging.WARNING)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_common import alternate, cpu_model, python_times  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "scripts"))
from nemo_architecture_sizes import ARCHITECTURES, config  # noqa: E402

RATE = 16000
ARCHITECTURE = "parakeet-tdt-0.6b-v2"


def write_speech_like(path, seconds, seed):
    """Noise in bursts of 150-600 ms with short pauses, at speech-like levels, 16 bit."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    envelope = np.zeros(n)
    at = 0
    while at < n:
        burst = int(rng.uniform(0.15, 0.6) * RATE)
        envelope[at:at + burst] = rng.uniform(0.05, 0.3)
        at += burst + int(rng.uniform(0.05, 0.3) * RATE)
    x = np.convolve(rng.standard_normal(n), np.ones(8) / 8, mode="same") * envelope
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float32) / 32768.0


def nemo_model(waves, tokens_per_second):
    """parakeet-tdt-0.6b-v2's architecture, random weights, its blank bias raised until greedy
    decoding of the first wave gives about `tokens_per_second` (speech gives 3 to 5 of its
    1024 SentencePiece tokens a second; random weights give many times more)."""
    from nemo.collections.asr.models import EncDecRNNTModel
    from omegaconf import OmegaConf

    torch.manual_seed(0)
    model = EncDecRNNTModel(cfg=OmegaConf.create(config(*ARCHITECTURES[ARCHITECTURE])),
                            trainer=None)
    model.eval()
    bias = model.joint.joint_net[-1].bias
    blank = model.decoder.blank_idx
    start = float(bias[blank])
    with torch.inference_mode():
        x = torch.from_numpy(waves[0])[None]
        features, length = model.preprocessor(input_signal=x, length=torch.tensor([x.shape[1]]))
        encoded, encoded_length = model.encoder(audio_signal=features, length=length)
        seconds = x.shape[1] / RATE
        # The rate falls with the bias, though not smoothly (a token changes the prediction
        # network's state): bisect, and keep the bias whose rate came closest.
        low, high, best = 0.0, 64.0, (float("inf"), 0.0)
        for _ in range(12):
            middle = (low + high) / 2
            bias[blank] = start + middle
            (hypothesis,) = model.decoding.rnnt_decoder_predictions_tensor(
                encoded, encoded_length, return_hypotheses=True)
            rate = len(hypothesis.y_sequence) / seconds
            if rate > 0:
                best = min(best, (abs(rate - tokens_per_second), middle))
            low, high = (middle, high) if rate > tokens_per_second else (low, middle)
        bias[blank] = start + best[1]
    return model


def run_attnzoo(cmd):
    """stdout's lines of an attnzoo command; its error message if it fails."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(str(c) for c in cmd)} failed:\n{done.stderr}")
    return done.stdout.splitlines()


def attnzoo_times(binary, model, wav, threads, iterations, warmup):
    """The recognizer's ms per call over `iterations` calls after `warmup`, in one process."""
    cmd = [str(binary), "transcribe", "--model", str(model), "--threads", str(threads),
           "--batch-size", "1", "--json"] + [str(wav)] * (warmup + iterations)
    lines = run_attnzoo(cmd)
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    return [row["ms"] for row in rows[warmup:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", default="10,60")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--tokens-per-second", type=float, default=4.0)
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import nemo

    seconds = [float(s) for s in args.seconds.split(",")]
    results = {"cpu": cpu_model(), "threads": args.threads, "nemo_toolkit": nemo.__version__,
               "torch": torch.__version__, "model": ARCHITECTURE, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"speech_{int(s)}s.wav" for s in seconds]
        waves = [write_speech_like(p, s, i) for i, (p, s) in enumerate(zip(paths, seconds))]
        print(f"building {ARCHITECTURE} in NeMo {nemo.__version__} ...", flush=True)
        model = nemo_model(waves, args.tokens_per_second)
        nemo_file = Path(tmp) / f"{ARCHITECTURE}.nemo"
        model.save_to(str(nemo_file))

        # The same computation: the transcripts of the first file.
        theirs = model.transcribe([str(paths[0])], batch_size=1, verbose=False)[0]
        ours = json.loads(run_attnzoo(
            [args.binary, "transcribe", "--model", nemo_file, "--json", paths[0]])[0])
        same = ours["text"] == theirs.text
        print(f"same transcript of {seconds[0]:g} s: {same} ({len(ours['tokens'])} tokens)",
              flush=True)
        results["same_transcript"] = same

        def forward(x):
            signal = torch.from_numpy(x)[None]
            with torch.inference_mode():
                features, length = model.preprocessor(input_signal=signal,
                                                      length=torch.tensor([signal.shape[1]]))
                encoded, encoded_length = model.encoder(audio_signal=features, length=length)
                model.decoding.rnnt_decoder_predictions_tensor(encoded, encoded_length)

        for s, path, x in zip(seconds, paths, waves):
            runners = {
                "attnzoo": lambda: attnzoo_times(args.binary, nemo_file, path, args.threads,
                                                 args.iterations, args.warmup),
                "nemo_transcribe": lambda: python_times(
                    lambda: model.transcribe([str(path)], batch_size=1, verbose=False),
                    args.iterations, args.warmup),
                "nemo_forward": lambda: python_times(lambda: forward(x), args.iterations,
                                                     args.warmup),
            }
            times = alternate(runners, args.rounds)
            med = {k: statistics.median(v) for k, v in times.items()}
            row = {"seconds": s, "median_ms": med, "runs": {k: len(v) for k, v in times.items()},
                   "rtf": {k: m / (1000.0 * s) for k, m in med.items()},
                   "ratio_vs_nemo_transcribe": med["attnzoo"] / med["nemo_transcribe"],
                   "ratio_vs_nemo_forward": med["attnzoo"] / med["nemo_forward"]}
            results["rows"].append(row)
            print(f"{s:g} s: attnzoo {med['attnzoo']:.0f} ms (RTF {row['rtf']['attnzoo']:.3f}), "
                  f"NeMo transcribe() {med['nemo_transcribe']:.0f} ms, NeMo forward "
                  f"{med['nemo_forward']:.0f} ms; attnzoo / transcribe() "
                  f"{row['ratio_vs_nemo_transcribe']:.2f}x, / forward "
                  f"{row['ratio_vs_nemo_forward']:.2f}x", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
