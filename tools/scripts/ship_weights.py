#!/usr/bin/env python3
"""Write a training run's model.safetensors as shippable weights: floating-point tensors in
float16 (or bfloat16), everything else and the metadata (the run's class names) unchanged.

    ship_weights.py RUN/model.safetensors assets/weights/vit_digits.safetensors [--dtype fp16]

Refuses a tensor whose values do not fit the target type (float16 overflows above 65504).
attnzoo loads such weights into its float32 models (the values are widened on load).
"""
import argparse
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    args = parser.parse_args()
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    limit = torch.finfo(dtype).max
    tensors = {}
    with safe_open(args.source, framework="pt") as f:
        metadata = f.metadata() or {}
        for name in f.keys():
            t = f.get_tensor(name)
            if t.is_floating_point():
                if t.abs().max().item() > limit:
                    print(f"ship_weights.py: {args.source}: {name} exceeds {args.dtype}'s range",
                          file=sys.stderr)
                    return 1
                t = t.to(dtype)
            tensors[name] = t.contiguous()
    save_file(tensors, args.target, metadata=metadata)
    count = sum(t.numel() for t in tensors.values())
    print(f"ship_weights.py: {len(tensors)} tensors, {count} values, {args.dtype} -> {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
