"""long_audio_test.py ATTNZOO_BINARY: an hour of audio streams through `attnzoo encode --stream`
in bounded memory. The file is read, featurised and encoded block by block, with a bounded
history (streaming.num_left_chunks); what grows with the length is only the encoder's output
(kept, as the command reports on it: 96 floats per 40 ms frame for conformer_kws, 35 MB an hour),
and twice that while its pieces are joined. Neither the samples (230 MB an hour as float32) nor
the features (58 MB) are ever held whole.

The model is conformer_kws made causal (architecture.causal_conv, so that it can stream; its
weights are then not the trained ones, which does not matter here), in chunks of 640 ms with 4
chunks of history.

Runs the same command on 6 minutes and on 60 minutes of a 16 kHz WAV it writes, and checks:
  - both succeed, with the duration and the frame counts of the files;
  - peak RSS grows from the short file to the long one by at most twice the growth of the
    encoder output plus 15 MB (holding the features as well would exceed it);
  - the time is linear in the length: the hour takes at most 15x the 6 minutes (10x is linear).
Prints the figures (docs/reliability.md's "Long audio")."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RATE = 16000
FRAME_MS = 40.0  # conformer_kws: 10 ms features, subsampled 4x
DIM = 96  # conformer_kws's encoder_dim
SLACK_MB = 15.0


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def write_wav(path: Path, seconds: int) -> None:
    """16-bit mono: a tone sweeping under noise, written 10 s at a time."""
    block_seconds = 10
    t = np.arange(block_seconds * RATE) / RATE
    rng = np.random.default_rng(0)
    block = (0.3 * np.sin(2 * np.pi * (300 + 200 * t) * t) + 0.05 * rng.standard_normal(t.size))
    block = (np.clip(block, -1, 1) * 32767).astype("<i2").tobytes()
    data_bytes = 2 * RATE * seconds
    with path.open("wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt " +
                struct.pack("<IHHIIHH", 16, 1, 1, RATE, 2 * RATE, 2, 16) + b"data" +
                struct.pack("<I", data_bytes))
        for _ in range(seconds // block_seconds):
            f.write(block)


def peak_rss_mb(binary: str, wav: Path) -> tuple:
    """The JSON line, wall seconds and peak RSS (MB) of one streamed encode of `wav`."""
    command = [binary, "encode", "--model", "conformer_kws", "--set",
               "architecture.causal_conv=true", "--set", "streaming.num_left_chunks=4", "--stream",
               "--chunk-ms", "640", "--threads", "1", "--json", str(wav)]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = process.stdout.read()
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        fail(f"{' '.join(command)} exited with {code}: {err.decode()[-2000:]}")
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    if len(lines) != 1 or "error" in lines[0]:
        fail(f"expected one result for {wav}, got: {out.decode()[-2000:]}")
    return lines[0], seconds, usage.ru_maxrss / 1024.0


def main() -> None:
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for minutes in (6, 60):
            wav = Path(tmp) / f"{minutes}min.wav"
            write_wav(wav, minutes * 60)
            result, seconds, rss = peak_rss_mb(binary, wav)
            wav.unlink()
            expected_frames = minutes * 60 * 1000 / FRAME_MS
            if abs(result["seconds"] - minutes * 60) > 1e-6:
                fail(f"{minutes} min: reported {result['seconds']} s")
            if abs(result["encoder_frames"] - expected_frames) > 2:
                fail(f"{minutes} min: {result['encoder_frames']} encoder frames, "
                     f"expected about {expected_frames:.0f}")
            results[minutes] = (result, seconds, rss)
            print(f"{minutes} min: {result['encoder_frames']} encoder frames in {seconds:.1f} s "
                  f"(RTF {result['rtf']:.4f}), peak RSS {rss:.0f} MB")
    (short, t_short, rss_short), (long, t_long, rss_long) = results[6], results[60]
    output_growth_mb = (long["encoder_frames"] - short["encoder_frames"]) * DIM * 4 / 2**20
    allowed = 2 * output_growth_mb + SLACK_MB
    growth = rss_long - rss_short
    print(f"RSS growth from 6 to 60 min: {growth:.0f} MB (encoder output growth "
          f"{output_growth_mb:.0f} MB; allowed {allowed:.0f} MB); time ratio {t_long / t_short:.1f}")
    if growth > allowed:
        fail(f"peak RSS grew by {growth:.0f} MB from 6 to 60 minutes of audio, more than "
             f"{allowed:.0f} MB (twice the output's growth + {SLACK_MB:.0f} MB)")
    if t_long > 15 * t_short:
        fail(f"60 minutes took {t_long:.1f} s, more than 15x the {t_short:.1f} s of 6 minutes")
    print("OK")


if __name__ == "__main__":
    main()
