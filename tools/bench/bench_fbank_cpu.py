"""Kaldi fbank speed on the CPU: attnzoo's FeatureExtractor (C++, `attnzoo bench features`)
against kaldi-native-fbank (its C++ library, timed by a small harness compiled here against the
pinned wheel's headers and module, and through its Python binding) and
torchaudio.compliance.kaldi.fbank, on one 60 s 16 kHz file of speech, side by side in one
session: alternating rounds, every timed call kept, medians compared.

The features are those of conformer_s (80 bins, 25 ms / 10 ms, povey, snip_edges, dither 0), on
the decoded samples in memory for everyone; attnzoo's time from the file (read + features) is
reported too. Speed ratios are the peer's median time over attnzoo's (> 1: attnzoo faster).
kaldi-native-fbank is single-threaded; attnzoo and torchaudio run on --threads threads.

usage: tools/bench/bench_fbank_cpu.py [--seconds 60] [--threads N] [--rounds 5] [--iterations 10]
                                [--json FILE]
Run from the repository root after tools/setup.sh (uses build/bin/attnzoo, the venv's packages,
espeak-ng and g++).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import wave
from pathlib import Path

import numpy as np
import torch
import torchaudio

from bench_common import alternate, cpu_model, python_times

ROOT = Path(__file__).resolve().parents[2]
TEXT = ("The quick brown fox jumps over the lazy dog. A speech encoder turns sound into "
        "numbers, one frame every ten milliseconds, and a conformer reads them. ")


def speech(seconds: float, rate: int, work: Path) -> np.ndarray:
    """`seconds` of espeak-ng speech at `rate` Hz as int16-valued float32 samples."""
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng not found (tools/setup.sh installs it)")
    raw = work / "espeak.wav"
    subprocess.run(["espeak-ng", "-s", "160", "-w", str(raw), TEXT * 6], check=True)
    with wave.open(str(raw)) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32)
        source_rate = w.getframerate()
    x = torchaudio.functional.resample(torch.from_numpy(x), source_rate, rate).numpy()
    need = int(seconds * rate)
    x = np.tile(x, need // len(x) + 1)[:need]
    x += np.random.default_rng(0).normal(0.0, 30.0, need).astype(np.float32)  # room noise
    return np.clip(np.round(x), -32768, 32767).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype(np.int16).tobytes())


def build_knf_timer(work: Path) -> Path:
    """Compiles tools/bench/peers/knf_fbank_timer.cpp against the installed kaldi-native-fbank."""
    import kaldi_native_fbank
    package = Path(kaldi_native_fbank.__file__).parent
    module = next((package / "lib").glob("_kaldi_native_fbank*.so"))
    binary = work / "knf_fbank_timer"
    libdir = sysconfig.get_config_var("LIBDIR")
    version = sysconfig.get_config_var("LDVERSION")
    # The wheel is a manylinux build: the pre-C++11 std::string ABI of its options structs.
    subprocess.run(["g++", "-O2", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0",
                    f"-I{package / 'include'}", str(ROOT / "tools/bench/peers/knf_fbank_timer.cpp"),
                    str(module), f"-L{libdir}", f"-lpython{version}",
                    f"-Wl,-rpath,{module.parent}", "-o", str(binary)], check=True)
    return binary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--binary", default=str(ROOT / "build" / "bin" / "attnzoo"))
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import kaldi_native_fbank as knf

    rate = 16000
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        samples = speech(args.seconds, rate, work)
        audio = work / "speech.wav"
        write_wav(audio, samples, rate)
        raw = work / "speech.f32"
        samples.tofile(raw)
        knf_timer = build_knf_timer(work)
        file_times = []

        def run_attnzoo():
            report = work / "attnzoo.json"
            subprocess.run([args.binary, "bench", "features", str(audio), "--model",
                            "conformer_s", "--threads", str(args.threads), "--iterations",
                            str(args.iterations), "--warmup", str(args.warmup), "--json",
                            str(report)], check=True, stdout=subprocess.DEVNULL)
            result = json.loads(report.read_text())
            file_times.extend(result["file_ms"])
            return result["memory_ms"]

        def run_knf_cpp():
            out = subprocess.run([str(knf_timer), str(raw), str(args.warmup),
                                  str(args.iterations)], check=True, capture_output=True,
                                 text=True).stdout
            return [float(line) for line in out.split()]

        options = knf.FbankOptions()
        options.frame_opts.dither = 0.0
        options.frame_opts.snip_edges = True
        options.mel_opts.num_bins = 80

        def knf_python():
            fbank = knf.OnlineFbank(options)
            fbank.accept_waveform(rate, samples)  # converted to a sequence by the binding
            fbank.input_finished()
            return np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])

        waveform = torch.from_numpy(samples)[None]

        def torchaudio_fbank():
            return torchaudio.compliance.kaldi.fbank(waveform, num_mel_bins=80, dither=0.0,
                                                     energy_floor=0.0)

        runners = {
            "attnzoo": run_attnzoo,
            "knf (C++)": run_knf_cpp,
            "knf (Python)": lambda: python_times(knf_python, args.iterations, args.warmup),
            "torchaudio": lambda: python_times(torchaudio_fbank, args.iterations, args.warmup),
        }
        times = alternate(runners, args.rounds)

        # The numbers must agree, or the times compare different work.
        features = work / "attnzoo.safetensors"
        subprocess.run([args.binary, "bench", "features", str(audio), "--iterations", "1",
                        "--warmup", "0", "--output", str(features)], check=True,
                       stdout=subprocess.DEVNULL)
        from safetensors.numpy import load_file
        ours = load_file(str(features))["features"]
        knf_out = knf_python()
        ta_out = torchaudio_fbank().numpy()
        diff_knf = float(np.abs(ours - knf_out).max())
        diff_ta = float(np.abs(ours - ta_out).max())

    medians = {k: statistics.median(v) for k, v in times.items()}
    ours_ms = medians["attnzoo"]
    print(f"# {args.seconds:g} s of 16 kHz speech, 80-bin Kaldi fbank; {cpu_model()}; "
          f"{args.threads} threads for attnzoo and torchaudio (knf: 1); {args.rounds} rounds x "
          f"{args.iterations} calls, alternating; torch {torch.__version__}, torchaudio "
          f"{torchaudio.__version__}")
    print(f"{'implementation':16} {'median ms':>10} {'min ms':>8} {'RTF':>9} {'attnzoo speed':>14}")
    for name, values in times.items():
        print(f"{name:16} {medians[name]:10.2f} {min(values):8.2f} "
              f"{medians[name] / 1e3 / args.seconds:9.6f} {medians[name] / ours_ms:13.2f}x")
    file_ms = statistics.median(file_times)
    print(f"{'attnzoo, file':16} {file_ms:10.2f} {min(file_times):8.2f} "
          f"{file_ms / 1e3 / args.seconds:9.6f}   (read + features)")
    print(f"# max |attnzoo - knf| {diff_knf:.2e}, max |attnzoo - torchaudio| {diff_ta:.2e} "
          "(log mel; see preprocess/audio/fbank.h on float32 rounding)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"seconds": args.seconds, "threads": args.threads, "rounds": args.rounds,
             "iterations": args.iterations, "cpu": cpu_model(), "torch": torch.__version__,
             "times_ms": times, "attnzoo_file_ms": file_times, "medians_ms": medians,
             "max_diff": {"kaldi-native-fbank": diff_knf, "torchaudio": diff_ta}}, indent=1))


if __name__ == "__main__":
    main()
