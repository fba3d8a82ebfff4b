#!/usr/bin/env python3
"""ViT-B/16 bf16 inference on a GPU: attnzoo (tools/bench/bench_vit_cuda.cpp) against PyTorch eager and
torch.compile of timm's VisionTransformer, in one run, alternating round by round.

The peer is timm's vit_base_patch16_224 when timm can be imported (the lent GPU machine's image
has it); without timm, the peer is `TimmViT` below: timm's module structure and
forward, op for op (fused qkv Linear, F.scaled_dot_product_attention as timm's fused_attn path,
LayerNorm eps 1e-6, exact GELU, class token, pre-logits from the token). `--check-replica`
(CTest bench.vit_replica_equals_timm) loads timm's weights into it and compares the outputs.

    bench_vit_cuda.py --ours build/bin/bench_vit_cuda [--batches 1,64,256]
                      [--compile-batches 256] [--rounds 3] [--iterations 20] [--json FILE]
    bench_vit_cuda.py --check-replica
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class TimmViT(nn.Module):
    """timm's VisionTransformer (class token, global_pool='token'), with timm's parameter names."""

    def __init__(self, img_size=224, patch=16, dim=768, depth=12, heads=12, mlp_ratio=4.0,
                 classes=1000):
        super().__init__()
        self.patch_embed = PatchEmbed(patch, dim)
        tokens = (img_size // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def peer_model(**kwargs):
    try:
        import timm  # noqa: F401

        model = timm.create_model("vit_base_patch16_224", pretrained=False, **kwargs)
        return model, "timm " + timm.__version__
    except ImportError:
        return TimmViT(), "TimmViT (timm's structure; timm is not installed here)"


def check_replica():
    import timm

    torch.manual_seed(0)
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64,
                                  num_classes=7, depth=3).eval()
    replica = TimmViT(img_size=64, dim=192, depth=3, heads=3, classes=7).eval()
    missing, unexpected = replica.load_state_dict(reference.state_dict(), strict=True)
    assert not missing and not unexpected
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        diff = (reference(x) - replica(x)).abs().max().item()
    print(f"TimmViT against timm {timm.__version__} vit_tiny (3 blocks, 64 px): max |diff| {diff:.3g}")
    return 0 if diff <= 1e-5 else 1


def time_ms(fn, x, iterations):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn(x)
    start.record()
    for _ in range(iterations):
        fn(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iterations


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", help="the bench_vit_cuda binary")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--compile-batches", default="256",
                        help="batches also timed under torch.compile (each compiles once)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--check-replica", action="store_true")
    args = parser.parse_args()
    if args.check_replica:
        return check_replica()
    if not args.ours:
        parser.error("--ours is required")
    if not torch.cuda.is_available():
        print("bench_vit_cuda.py: no CUDA device", file=sys.stderr)
        return 1
    batches = [int(b) for b in args.batches.split(",")]
    compiled_batches = {int(b) for b in args.compile_batches.split(",") if b}
    torch.manual_seed(0)
    model, peer_name = peer_model()
    model = model.eval().to("cuda", torch.bfloat16)
    compiled = torch.compile(model) if compiled_batches else None
    times = {}  # (configuration, batch) -> [ms per round]
    with torch.inference_mode():
        for round_index in range(args.rounds):
            # Ours: one round of every configuration and batch, in its own process.
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run([args.ours, "--batches", args.batches, "--rounds", "1",
                                "--iterations", str(args.iterations), "--json", out.name],
                               check=True, stdout=subprocess.DEVNULL)
                for r in json.load(open(out.name))["results"]:
                    times.setdefault((r["configuration"], r["batch"]), []).append(r["median_ms"])
            for batch in batches:
                x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
                times.setdefault(("PyTorch eager", batch), []).append(
                    time_ms(model, x, args.iterations))
                if batch in compiled_batches:
                    times.setdefault(("torch.compile", batch), []).append(
                        time_ms(compiled, x, args.iterations))
            print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    rows = []
    for (configuration, batch), values in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ms = statistics.median(values)
        rows.append({"configuration": configuration, "batch": batch, "median_ms": ms,
                     "images_per_second": 1000.0 * batch / ms, "rounds_ms": values})
    print(f"peer: {peer_name}; {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"{'configuration':28} {'batch':>6} {'median ms':>10} {'images/s':>10} {'vs eager':>9}")
    for row in rows:
        eager = next(r for r in rows if r["batch"] == row["batch"] and
                     r["configuration"] == "PyTorch eager")
        ratio = row["images_per_second"] / eager["images_per_second"]
        print(f"{row['configuration']:28} {row['batch']:6d} {row['median_ms']:10.3f} "
              f"{row['images_per_second']:10.1f} {ratio:8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peer": peer_name, "device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
