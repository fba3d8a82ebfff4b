"""Writes a PyTorch state_dict as safetensors, the format attnzoo loads.

From the command line, for a checkpoint file:

    python tools/scripts/to_safetensors.py model.pth model.safetensors [--key state_dict] [--strip-prefix module.]

From Python (the parity tests use this), for any module or state_dict:

    from to_safetensors import save_state_dict
    save_state_dict(model, "model.safetensors", metadata={"source": "timm"})

.pth files are read with torch.load(weights_only=True): no pickled code is executed. Checkpoints
that wrap the weights ({"state_dict": ...}, {"model": ...}, {"module": ...}) are unwrapped; tensors
that share storage (tied weights) are written as separate copies, since safetensors forbids
aliasing; non-tensor entries (step counters, config dicts) are reported and skipped.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

import torch
from safetensors.torch import save_file

_WRAPPER_KEYS = ("state_dict", "model", "module", "model_state", "model_ema")


def _unwrap(checkpoint: object, key: str | None) -> Mapping[str, object]:
    if key is not None:
        if not isinstance(checkpoint, Mapping) or key not in checkpoint:
            raise SystemExit(f"to_safetensors: the checkpoint has no entry '{key}'")
        return checkpoint[key]
    if isinstance(checkpoint, Mapping):
        if any(isinstance(v, torch.Tensor) for v in checkpoint.values()):
            return checkpoint
        for k in _WRAPPER_KEYS:
            if isinstance(checkpoint.get(k), Mapping):
                return checkpoint[k]
    raise SystemExit(
        "to_safetensors: no state_dict found; name the entry that holds it with --key "
        f"(top-level keys: {sorted(checkpoint) if isinstance(checkpoint, Mapping) else type(checkpoint)})"
    )


def plain_state_dict(
    state: torch.nn.Module | Mapping[str, object], strip_prefix: str = ""
) -> dict[str, torch.Tensor]:
    """Tensors only, detached, contiguous, on the CPU, each with its own storage."""
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    out: dict[str, torch.Tensor] = {}
    skipped = []
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            skipped.append(name)
            continue
        if strip_prefix and name.startswith(strip_prefix):
            name = name[len(strip_prefix):]
        out[name] = value.detach().to("cpu").contiguous().clone()
    if skipped:
        print(f"to_safetensors: skipped {len(skipped)} non-tensor entries: {skipped[:5]}", file=sys.stderr)
    return out


def save_state_dict(
    state: torch.nn.Module | Mapping[str, object],
    path: str | Path,
    metadata: Mapping[str, str] | None = None,
    strip_prefix: str = "",
) -> None:
    save_file(plain_state_dict(state, strip_prefix), str(path), metadata=dict(metadata or {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="a .pth/.pt/.bin checkpoint")
    parser.add_argument("output", help="the .safetensors file to write")
    parser.add_argument("--key", help="the checkpoint entry holding the state_dict")
    parser.add_argument("--strip-prefix", default="", help="remove this prefix from names (e.g. module.)")
    args = parser.parse_args()
    checkpoint = torch.load(args.input, map_location="cpu", weights_only=True)
    tensors = plain_state_dict(_unwrap(checkpoint, args.key), args.strip_prefix)
    save_file(tensors, args.output, metadata={"source": Path(args.input).name})
    print(f"wrote {len(tensors)} tensors to {args.output}")


if __name__ == "__main__":
    main()
