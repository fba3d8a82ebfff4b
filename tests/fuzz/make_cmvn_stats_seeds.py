"""The seed corpus of fuzz_cmvn_stats, each form the readers take, of 3 features:

  kaldi.txt        Kaldi's text matrix, as WeNet's tools/compute_cmvn_stats.py writes global_cmvn
  wenet.json       WeNet's JSON form (mean_stat, var_stat, frame_num)
  feats_stats.npz  ESPnet's collect_stats output (np.savez: count, sum, sum_square)
  compressed.npz   the same through np.savez_compressed (deflated entries)
  kaldi.npy        the Kaldi matrix [2, 4] as float64 .npy
  fortran_i4.npy   an int32 matrix in Fortran order (the .npy reader's other branches)

Run once with the venv's Python when the forms change; the output is committed.
usage: make_cmvn_stats_seeds.py OUT_DIR
"""
import argparse
import json
from pathlib import Path

import numpy as np

SUM = np.array([10.5, -3.25, 7.0])
SUM_SQUARE = np.array([60.0, 12.5, 30.0])
COUNT = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    row0 = " ".join(str(v) for v in [*SUM, COUNT])
    row1 = " ".join(str(v) for v in [*SUM_SQUARE, 0])
    (out / "kaldi.txt").write_text(f" [\n  {row0}\n  {row1} ]\n")
    (out / "wenet.json").write_text(json.dumps(
        {"mean_stat": SUM.tolist(), "var_stat": SUM_SQUARE.tolist(), "frame_num": COUNT}))
    np.savez(out / "feats_stats.npz", count=np.array(COUNT), sum=SUM, sum_square=SUM_SQUARE)
    np.savez_compressed(out / "compressed.npz", count=np.array(COUNT), sum=SUM,
                        sum_square=SUM_SQUARE)
    np.save(out / "kaldi.npy", np.array([[*SUM, COUNT], [*SUM_SQUARE, 0]]))
    np.save(out / "fortran_i4.npy", np.asfortranarray(np.arange(8, dtype=np.int32).reshape(2, 4)))


if __name__ == "__main__":
    main()
