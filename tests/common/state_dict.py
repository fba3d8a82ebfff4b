"""A module's (or a state dict's) tensors as a safetensors file, for the reference scripts of the
tests: detached, on the CPU, contiguous, each with its own storage (safetensors forbids aliasing,
so tied weights are written as copies), and non-tensor entries left out.

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
    from state_dict import save_state_dict
    save_state_dict(model, out / "weights.safetensors", metadata={"source": "timm"})
"""
from pathlib import Path
from typing import Mapping, Optional, Union

import torch
from safetensors.torch import save_file


def plain_state_dict(state: Union[torch.nn.Module, Mapping[str, object]]) -> dict:
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    return {name: value.detach().to("cpu").contiguous().clone()
            for name, value in state.items() if isinstance(value, torch.Tensor)}


def save_state_dict(state: Union[torch.nn.Module, Mapping[str, object]], path: Union[str, Path],
                    metadata: Optional[Mapping[str, str]] = None) -> None:
    save_file(plain_state_dict(state), str(path), metadata=dict(metadata or {}))
