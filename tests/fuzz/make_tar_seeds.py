"""The seed corpus of fuzz_tar, each form the reader takes, written by Python's tarfile:

  nemo.tar        a folder added as NeMo adds it (arcname "./": a directory entry, "./" names)
  nemo.tar.gz     the same, gzipped
  gnu.tar         GNU format: a long name (././@LongLink), a symlink, an empty file
  ustar.tar       POSIX ustar: a path split into prefix and name
  pax.tar         pax: a non-ASCII name, a long one

Run once with the venv's Python when the forms change; the output is committed.
usage: make_tar_seeds.py OUT_DIR
"""
import argparse
import io
import tarfile
from pathlib import Path


def add(tar, name, data, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, mode in (("nemo.tar", "w:"), ("nemo.tar.gz", "w:gz")):
        with tarfile.open(out / name, mode, format=tarfile.PAX_FORMAT) as tar:
            add(tar, "./", b"", tarfile.DIRTYPE)
            add(tar, "./model_config.yaml", b"sample_rate: 16000\n")
            add(tar, "./model_weights.ckpt", bytes(range(256)) * 3)
    with tarfile.open(out / "gnu.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "d/" + "n" * 120, b"long")
        add(tar, "link", b"", tarfile.SYMTYPE, "d")
        add(tar, "empty", b"")
    with tarfile.open(out / "ustar.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        add(tar, "p" * 110 + "/" + "f" * 20, b"xyz")
    with tarfile.open(out / "pax.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "modèle.txt", b"unicode")
        add(tar, "x" * 200, b"long")


if __name__ == "__main__":
    main()
