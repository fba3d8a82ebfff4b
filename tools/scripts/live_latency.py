#!/usr/bin/env python3
"""How early live transcription shows each word, and what it costs the final text.

    live_latency.py ATTNZOO LIST MODEL WEIGHTS [--chunk 16] [--block-ms 100] [--set K=V ...]

Feeds every file of LIST (an audio list, lines "PATH<TAB>TRANSCRIPT", paths relative to the
list) to `attnzoo transcribe --live --json` and reads the partial results it prints. A word's
lag is the audio received when it first appeared in the stable text (or the whole file, when it
appeared only in the final result) minus the end time the final result gives it. Prints the
median and 90th percentile lag, the share of words shown before the end of their file, and the
word error rate of the final results (jiwer's definition) against the transcripts.
"""
import argparse
import json
import os
import subprocess
import sys

import jiwer
import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attnzoo")
    parser.add_argument("list")
    parser.add_argument("model")
    parser.add_argument("weights")
    parser.add_argument("--chunk", default="16")
    parser.add_argument("--block-ms", default="100")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()

    folder = os.path.dirname(os.path.abspath(args.list))
    rows = [line.rstrip("\n").split("\t") for line in open(args.list) if line.strip()]
    paths = [os.path.join(folder, r[0]) for r in rows]
    truth = {p: r[1] for p, r in zip(paths, rows)}
    command = [args.attnzoo, "transcribe", "--model", args.model, "--weights", args.weights,
               "--live", "--chunk", args.chunk, "--block-ms", args.block_ms, "--json"]
    for o in args.overrides:
        command += ["--set", o]
    lines = subprocess.run(command + paths, check=True, capture_output=True,
                           text=True).stdout.splitlines()

    shown = {}  # path -> [(at, stable text)]
    lags, early, words = [], 0, 0
    references, hypotheses = [], []
    for line in lines:
        entry = json.loads(line)
        path = entry["audio"]
        if "error" in entry:
            sys.exit(f"live_latency.py: {path}: {entry['error']}")
        if not entry.get("final"):
            shown.setdefault(path, []).append((entry["at"], entry["partial"].split()))
            continue
        for i, token in enumerate(entry["tokens"]):
            at = next((t for t, stable in shown.get(path, []) if len(stable) > i),
                      entry["seconds"])
            lags.append(at - token["end"])
            early += at < entry["seconds"]
            words += 1
        references.append(truth[path])
        hypotheses.append(entry["text"])
    if len(references) != len(paths):
        sys.exit(f"live_latency.py: {len(references)} final results for {len(paths)} files")
    lags = np.array(lags)
    print(f"{len(paths)} files, {words} words: lag median {np.median(lags):.3f} s, "
          f"p90 {np.percentile(lags, 90):.3f} s; shown before the end of the file: "
          f"{100 * early / max(words, 1):.1f}%; final WER "
          f"{100 * jiwer.wer(references, hypotheses):.2f}%")


if __name__ == "__main__":
    main()
