#!/usr/bin/env python3
"""Word error rates of a U2 / U2++ model's decodings on one data split, to choose the attention
rescoring weights on a validation split.

    rescoring_grid.py ATTNZOO MODEL WEIGHTS LIST [--ctc-weights 0,0.3,0.5,1]
                      [--reverse-weights 0,0.3,0.5] [--set K=V ...]

Runs `attnzoo eval --json` on LIST once with `decoding.mode=ctc` (the CTC prefix beam search
alone) and once per pair of decoding.ctc_weight and decoding.reverse_weight with
`decoding.mode=attention_rescoring`, and prints one markdown table: the word error rate, the
errors and the character error rate of each, the lowest rescoring WER marked. Progress goes to
stderr, one line a run.
"""
import argparse
import json
import subprocess
import sys
import time


def evaluate(args, overrides):
    command = [args.attnzoo, "eval", "--model", args.model, "--weights", args.weights,
               "--data", args.list, "--json"]
    for o in args.overrides + overrides:
        command += ["--set", o]
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr}")
    got = json.loads(result.stdout)
    errors = got["word_counts"]["errors"]
    print(f"  {' '.join(overrides)}: WER {100 * got['wer']:.2f}% "
          f"({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
    return got["wer"], errors, got["cer"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attnzoo")
    parser.add_argument("model")
    parser.add_argument("weights")
    parser.add_argument("list")
    parser.add_argument("--ctc-weights", default="0,0.3,0.5,1")
    parser.add_argument("--reverse-weights", default="0,0.3,0.5")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    ctc_weights = [float(w) for w in args.ctc_weights.split(",")]
    reverse_weights = [float(w) for w in args.reverse_weights.split(",")]

    rows = [("ctc prefix beam", "", "", *evaluate(args, ["decoding.mode=ctc"]))]
    for ctc in ctc_weights:
        for reverse in reverse_weights:
            overrides = ["decoding.mode=attention_rescoring", f"decoding.ctc_weight={ctc}",
                         f"decoding.reverse_weight={reverse}"]
            rows.append(("attention_rescoring", ctc, reverse, *evaluate(args, overrides)))
    best = min(range(1, len(rows)), key=lambda i: rows[i][3])
    print("| decoding | ctc_weight | reverse_weight | WER | errors | CER |")
    print("|---|---|---|---|---|---|")
    for i, (mode, ctc, reverse, wer, errors, cer) in enumerate(rows):
        mark = "**" if i == best else ""
        print(f"| {mode} | {ctc} | {reverse} | {mark}{100 * wer:.2f}%{mark} | {errors} | "
              f"{100 * cer:.2f}% |")


if __name__ == "__main__":
    main()
