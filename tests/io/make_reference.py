"""Writes safetensors files with the reference implementation (the `safetensors` package) for
tests/io/test_safetensors.cpp: every dtype it supports, odd shapes, metadata.

usage: make_reference.py OUT_DIR
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file


def every_dtype(g: torch.Generator) -> dict:
    """A tensor of every dtype both formats hold, a scalar and an empty one (also the PyTorch
    checkpoints' tests: make_checkpoint_reference.py)."""
    return {
        "f32": torch.randn(3, 5, generator=g),
        "f64": torch.randn(2, 2, 2, generator=g, dtype=torch.float64),
        "f16": torch.randn(7, generator=g).half(),
        "bf16": torch.randn(4, 3, generator=g).bfloat16(),
        "i64": torch.arange(-5, 5, dtype=torch.int64),
        "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "i16": torch.tensor([-3, 0, 3], dtype=torch.int16),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    tensors = {**every_dtype(g), "blocks.0.attn.qkv.weight": torch.randn(12, 4, generator=g)}
    metadata = {"format": "pt", "note": "made by tests/io/make_reference.py"}
    save_file(tensors, str(out / "reference.safetensors"), metadata=metadata)
    # The expected values, as plain JSON (float64 values, exact for every dtype above).
    expected = {
        name: {"dtype": str(t.dtype), "shape": list(t.shape), "values": t.double().flatten().tolist()}
        for name, t in tensors.items()
    }
    (out / "reference.json").write_text(json.dumps({"tensors": expected, "metadata": metadata}))


if __name__ == "__main__":
    main()
