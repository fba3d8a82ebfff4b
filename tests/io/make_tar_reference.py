"""tar archives as Python's tarfile writes them (what NeMo's .nemo files are), for io/'s tar
reader (a CTest fixture).

    make_tar_reference.py OUT_DIR

Writes into OUT_DIR/tar/:
  nemo.tar, nemo.tar.gz    a folder added as NeMo's SaveRestoreConnector adds it
                           (tarfile.open(path, "w:" or "w:gz"), tar.add(folder, arcname="./")):
                           model_config.yaml, model_weights.ckpt (torch.save of a small state
                           dict), a tokenizer.model and vocab.txt
  gnu.tar                  GNU format: a 150-character name (a ././@LongLink entry), a 10 kB
                           file, a directory, a symlink and an empty file
  ustar.tar                POSIX ustar: a 180-character path split into prefix and name
  pax.tar                  pax: a non-ASCII name and a 300-character one
  two_members.tar.gz       one tar compressed as two concatenated gzip members
  empty.tar                no files at all
  duplicate.tar            the same name twice
  bad_pax.tar              a pax header whose record length is wrong (made byte by byte)
and manifest.json: for each archive, the regular files as tarfile lists them (name without "./",
size, CRC-32 of the bytes), or the error expected; and the checkpoint's tensors.
"""
import gzip
import io
import json
import sys
import tarfile
import zlib
from pathlib import Path

import torch


def pattern(n, seed):
    return bytes((i * 7 + seed) % 251 for i in range(n))


def files_of(path):
    """The regular files of an archive as Python's tarfile reads them."""
    with tarfile.open(path) as tar:
        out = []
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()
                name = member.name[2:] if member.name.startswith("./") else member.name
                out.append(dict(name=name, size=len(data), crc32=zlib.crc32(data)))
        return out


def nemo_folder(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_config.yaml").write_text(
        "sample_rate: 16000\npreprocessor:\n  sample_rate: ${sample_rate}\n")
    torch.manual_seed(0)
    state = {"encoder.weight": torch.randn(4, 3), "decoder.bias": torch.arange(5.0)}
    torch.save(state, folder / "model_weights.ckpt")
    (folder / "tokenizer.model").write_bytes(pattern(1000, 3))
    (folder / "vocab.txt").write_text("a\nb\n")
    return state


def header_block(name, size, type_flag):
    """A ustar header made byte by byte, its checksum filled in."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = type_flag
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def padded(data):
    return data + b"\0" * (-len(data) % 512)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1]) / "tar"
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"archives": {}, "errors": {}}

    state = nemo_folder(out / "nemo_folder")
    for name, mode in (("nemo.tar", "w:"), ("nemo.tar.gz", "w:gz")):
        with tarfile.open(out / name, mode) as tar:
            tar.add(out / "nemo_folder", arcname="./")
    manifest["checkpoint"] = {k: v.flatten().tolist() for k, v in state.items()}

    long_name = "d/" + "n" * 148
    with tarfile.open(out / "gnu.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((long_name, b"long"), ("big.bin", pattern(10000, 1)),
                           ("empty", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("a_dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        link = tarfile.TarInfo("a_link")
        link.type = tarfile.SYMTYPE
        link.linkname = "big.bin"
        tar.addfile(link)

    prefix_path = "p" * 120 + "/" + "f" * 59
    with tarfile.open(out / "ustar.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(prefix_path)
        info.size = 3
        tar.addfile(info, io.BytesIO(b"xyz"))

    with tarfile.open(out / "pax.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("modèle_ß.txt", b"unicode"), ("x" * 300, pattern(600, 2))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    plain = (out / "gnu.tar").read_bytes()
    half = len(plain) // 2
    (out / "two_members.tar.gz").write_bytes(gzip.compress(plain[:half]) +
                                             gzip.compress(plain[half:]))
    with tarfile.open(out / "empty.tar", "w"):
        pass

    for name in ("nemo.tar", "nemo.tar.gz", "gnu.tar", "ustar.tar", "pax.tar",
                 "two_members.tar.gz", "empty.tar"):
        manifest["archives"][name] = files_of(out / name)

    with tarfile.open(out / "duplicate.tar", "w") as tar:
        for data in (b"one", b"two"):
            info = tarfile.TarInfo("same.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    manifest["errors"]["duplicate.tar"] = "tar entry 'same.txt' appears twice"

    records = b"99 path=oops\n"
    (out / "bad_pax.tar").write_bytes(
        header_block(b"pax", len(records), b"x") + padded(records) +
        header_block(b"file", 1, b"0") + padded(b"z") + b"\0" * 1024)
    manifest["errors"]["bad_pax.tar"] = "pax header at byte 0: malformed record"

    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {len(manifest['archives']) + len(manifest['errors'])} tar archives to {out}")


if __name__ == "__main__":
    main()
