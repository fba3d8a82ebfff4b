"""PyTorch checkpoints written by torch itself, for tests/io/test_torch_checkpoint.cpp, with what
each holds as a safetensors file (contiguous copies, written by the `safetensors` package) to
compare against:

  dtypes.pth           every dtype the reader takes, scalars and empty tensors (zip format)
  views.pth            tensors sharing storages: tied weights, slices with offsets, a transpose,
                       an expanded (stride 0) tensor
  legacy.pth           dtypes and views in the legacy format (_use_new_zipfile_serialization=False)
  protocol4.pth, protocol5.pth   the same state dict pickled with protocols 4 and 5
  deflated.pth         dtypes.pth re-zipped with every entry deflated (zipfile)
  big_endian.pth       dtypes.pth with its byteorder record "big" and every storage byte-swapped
  training.pth         a timm-style training checkpoint: epoch, arch, state_dict,
                       state_dict_ema, optimizer, args (argparse.Namespace), metric (numpy
                       float64), best epoch (numpy int64)
  wrapped.pth          {"model": state dict, "epoch": 7}
  ddp.pth              DistributedDataParallel's names ("module.<name>")
  nested.pth           {"checkpoint": {"weights": state dict}, "step": 1}
  sharded/             model.safetensors.index.json and pytorch_model.bin.index.json over two
                       shards each (safetensors and torch.save), as transformers writes them
  module.pth           torch.save of an nn.Linear itself (a pickled object: refused)
  scripted.pt          torch.jit.save of a scripted nn.Linear (TorchScript: refused)
  evil.pth             torch.save of an object whose __reduce__ calls os.system (refused)
  hostile/*.pth        tests/io/hostile_checkpoints.py's files

usage: make_checkpoint_reference.py OUT_DIR
"""
import argparse
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_checkpoints  # noqa: E402
from make_reference import every_dtype  # noqa: E402


def expected(out: Path, name: str, state: dict) -> None:
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(out / f"{name}.expected.safetensors"))


def dtypes_state(g: torch.Generator) -> dict:
    return {**every_dtype(g), "param": torch.nn.Parameter(torch.randn(2, 2, generator=g))}


def views_state(g: torch.Generator) -> dict:
    base = torch.randn(6, 8, generator=g)
    embedding = torch.randn(10, 4, generator=g)
    return {
        "base": base,
        "row_slice": base[2:4],               # offset 16
        "column": base[:, 3],                 # offset 3, stride 8
        "transposed": base.t(),               # strides (1, 8)
        "embed.weight": embedding,
        "head.weight": embedding,             # tied: the same tensor twice
        "expanded": torch.randn(1, 3, generator=g).expand(4, 3),  # stride 0
        "tail": base.view(-1)[40:],           # a view reaching the storage's last element
    }


def rezip(source: Path, target: Path, transform=None, compression=zipfile.ZIP_DEFLATED) -> None:
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", compression) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if transform:
                data = transform(info.filename, data)
            zout.writestr(info.filename, data)


def main() -> None:
    out = Path(sys.argv[1])
    (out / "sharded").mkdir(parents=True, exist_ok=True)
    (out / "hostile").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)

    dtypes = dtypes_state(g)
    torch.save(dtypes, out / "dtypes.pth")
    expected(out, "dtypes", {k: v.detach() for k, v in dtypes.items()})

    views = views_state(g)
    torch.save(views, out / "views.pth")
    expected(out, "views", views)

    legacy = {**{k: v.detach() for k, v in dtypes.items()}, **views}
    torch.save(legacy, out / "legacy.pth", _use_new_zipfile_serialization=False)
    expected(out, "legacy", legacy)
    for protocol in (4, 5):
        torch.save(views, out / f"protocol{protocol}.pth", pickle_protocol=protocol)

    rezip(out / "dtypes.pth", out / "deflated.pth")

    # Big-endian storages: every data/N swapped by its dtype's width, the byteorder record "big".
    # torch.save numbers storages in the order it meets them: here one per tensor, in dict order.
    widths = {str(i): t.element_size() for i, t in enumerate(dtypes.values())}

    def swap(filename, data):
        if filename.endswith("/byteorder"):
            return b"big"
        if "/data/" in filename and widths[filename.rsplit("/", 1)[-1]] > 1:
            width = widths[filename.rsplit("/", 1)[-1]]
            return np.frombuffer(data, dtype=np.dtype(f"u{width}")).byteswap().tobytes()
        return data

    rezip(out / "dtypes.pth", out / "big_endian.pth", swap, zipfile.ZIP_STORED)

    # Training checkpoints.
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    ema = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4, generator=g)).sum().backward()
    optimizer.step()
    args = argparse.Namespace(model="vit_small_patch16_224", lr=1e-3, epochs=300, amp=True,
                              mean=[0.5, 0.5, 0.5], output=None, aa="rand-m9-mstd0.5")
    torch.save({"epoch": 12, "arch": "vit_small_patch16_224", "state_dict": model.state_dict(),
                "optimizer": optimizer.state_dict(), "version": 2, "args": args,
                "state_dict_ema": ema, "metric": np.float64(81.25), "best_epoch": np.int64(9)},
               out / "training.pth")
    expected(out, "training_state_dict", model.state_dict())
    expected(out, "training_state_dict_ema", ema)
    torch.save({"model": model.state_dict(), "epoch": 7}, out / "wrapped.pth")
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, out / "ddp.pth")
    torch.save({"checkpoint": {"weights": model.state_dict()}, "step": 1}, out / "nested.pth")

    # Sharded, as transformers' save_pretrained writes them: an index and its shards.
    state = model.state_dict()
    names = list(state)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    st_map, bin_map = {}, {}
    for i, part in enumerate(halves):
        st_file = f"model-{i + 1:05d}-of-00002.safetensors"
        bin_file = f"pytorch_model-{i + 1:05d}-of-00002.bin"
        save_file({k: state[k].contiguous() for k in part}, str(out / "sharded" / st_file),
                  metadata={"format": "pt"})
        torch.save({k: state[k] for k in part}, out / "sharded" / bin_file)
        st_map.update({k: st_file for k in part})
        bin_map.update({k: bin_file for k in part})
    for index, weight_map in (("model.safetensors.index.json", st_map),
                              ("pytorch_model.bin.index.json", bin_map)):
        (out / "sharded" / index).write_text(json.dumps(
            {"metadata": {"total_size": 64}, "weight_map": weight_map}, indent=2))

    # Files that must be refused.
    torch.save(torch.nn.Linear(2, 2), out / "module.pth")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(out / "scripted.pt"))

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo this must never run",))

    torch.save({"weight": Evil()}, out / "evil.pth")
    for name, make in hostile_checkpoints.ALL.items():
        make(out / "hostile" / f"{name}.pth")


if __name__ == "__main__":
    main()
