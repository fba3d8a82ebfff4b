"""Reads a safetensors file written by attnzoo with the reference implementation and prints it as
JSON ({"metadata": ..., "tensors": {name: {"dtype", "shape", "sum"}}}), for the C++ tests to compare.

usage: check_file.py FILE
"""
import json
import sys

from safetensors import safe_open


def main() -> None:
    result = {"tensors": {}}
    with safe_open(sys.argv[1], framework="pt") as f:
        result["metadata"] = f.metadata() or {}
        for name in f.keys():
            t = f.get_tensor(name)
            result["tensors"][name] = {
                "dtype": str(t.dtype),
                "shape": list(t.shape),
                "sum": float(t.double().sum()) if t.numel() else 0.0,
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
