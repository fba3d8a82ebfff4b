"""Reference ViTs from timm with random weights (seeded), for tests/models/test_vit.cpp.

For each case writes CASE.weights.safetensors (timm's state_dict) and CASE.io.safetensors
(the input "pixels", timm's "features" = forward_features and "logits").

usage: make_vit_reference.py OUT_DIR
"""
import sys
from pathlib import Path

import timm
import torch
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from state_dict import save_state_dict  # noqa: E402


def cases():
    # The timm zoo entry itself (architecture from timm's registry).
    yield "vit_tiny", timm.create_model("vit_tiny_patch16_224", pretrained=False), (2, 3, 224, 224)
    # The options users rely on, all at once.
    yield "vit_options", VisionTransformer(
        img_size=64, patch_size=16, embed_dim=96, depth=3, num_heads=4, num_classes=10,
        reg_tokens=2, no_embed_class=True, global_pool="avg", qk_norm=True, init_values=0.1,
    ), (2, 3, 64, 64)
    # Another input size than the config's: timm resamples the position embedding each forward.
    yield "vit_resized", VisionTransformer(
        img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=2, num_classes=7,
        dynamic_img_size=True,
    ), (2, 3, 96, 80)
    # Patch 14 (ViT-H's), max pooling, no class token, tanh GELU, no qkv bias.
    yield "vit_variant", VisionTransformer(
        img_size=56, patch_size=14, embed_dim=48, depth=2, num_heads=3, num_classes=5,
        class_token=False, global_pool="max", qkv_bias=False,
        act_layer=lambda: torch.nn.GELU(approximate="tanh"),
    ), (1, 3, 56, 56)


def distilled():
    """DeiT's distilled model (timm's VisionTransformerDistilled): class and distillation tokens,
    two heads whose logits are averaged."""
    from timm.models.deit import VisionTransformerDistilled
    yield "deit_distilled", VisionTransformerDistilled(
        img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=5,
    ), (2, 3, 32, 32)


def other_layouts():
    """(name, model, input shape, forward) for the torchvision and Hugging Face layouts."""
    import torchvision
    from transformers import ViTConfig, ViTForImageClassification

    tv = torchvision.models.vit_b_16(weights=None)
    yield "torchvision_vit_b_16", tv, (1, 3, 224, 224), lambda m, x: m(x)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=96, num_labels=6)
    hf = ViTForImageClassification(config)
    yield "hf_vit", hf, (2, 3, 32, 32), lambda m, x: m(pixel_values=x).logits


def resolution_changes(out: Path) -> None:
    """Checkpoints trained at 64x64 loaded into models configured for 96x96: timm resamples the
    position embedding in checkpoint_filter_fn (bicubic, antialiased), torchvision in
    interpolate_embeddings (bicubic, align_corners=True)."""
    import torchvision
    from timm.models.vision_transformer import checkpoint_filter_fn

    small = VisionTransformer(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=2,
                              num_classes=7)
    large = VisionTransformer(img_size=96, patch_size=16, embed_dim=64, depth=2, num_heads=2,
                              num_classes=7)
    tv_small = torchvision.models.VisionTransformer(image_size=64, patch_size=16, num_layers=2,
                                                    num_heads=2, hidden_dim=32, mlp_dim=64,
                                                    num_classes=5)
    tv_large = torchvision.models.VisionTransformer(image_size=96, patch_size=16, num_layers=2,
                                                    num_heads=2, hidden_dim=32, mlp_dim=64,
                                                    num_classes=5)
    with torch.no_grad():
        for model in (small, tv_small):
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        large.load_state_dict(checkpoint_filter_fn(small.state_dict(), large))
        tv_state = torchvision.models.vision_transformer.interpolate_embeddings(
            96, 16, tv_small.state_dict())
        tv_large.load_state_dict(tv_state)
        pixels = torch.randn(2, 3, 96, 96)
        for name, source, target in (("timm_64_to_96", small, large),
                                     ("torchvision_64_to_96", tv_small, tv_large)):
            target.eval()
            save_state_dict(source, out / f"{name}.weights.safetensors")
            save_file({"pixels": pixels, "logits": target(pixels)}, str(out / f"{name}.io.safetensors"))


def hf_v4_name(name: str) -> str:
    """transformers 5.x ViT state_dict name -> the 4.x name used by checkpoint files."""
    import re

    rules = [
        (r"vit\.layers\.(\d+)\.attention\.(q|k|v)_proj\.",
         lambda m: f"vit.encoder.layer.{m[1]}.attention.attention."
                   f"{ {'q': 'query', 'k': 'key', 'v': 'value'}[m[2]] }."),
        (r"vit\.layers\.(\d+)\.attention\.o_proj\.",
         lambda m: f"vit.encoder.layer.{m[1]}.attention.output.dense."),
        (r"vit\.layers\.(\d+)\.mlp\.fc1\.", lambda m: f"vit.encoder.layer.{m[1]}.intermediate.dense."),
        (r"vit\.layers\.(\d+)\.mlp\.fc2\.", lambda m: f"vit.encoder.layer.{m[1]}.output.dense."),
        (r"vit\.layers\.(\d+)\.", lambda m: f"vit.encoder.layer.{m[1]}."),
    ]
    for pattern, replacement in rules:
        new, n = re.subn("^" + pattern, replacement, name)
        if n:
            return new
    return name


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for name, model, shape in [*cases(), *distilled()]:
        model.eval()
        with torch.no_grad():
            # timm's init leaves norms at 1/0 and tokens near 0; perturb everything so that a
            # swapped or ignored tensor shows in the outputs.
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
            pixels = torch.randn(shape)
            features = model.forward_features(pixels)
            logits = model.forward_head(features)
        save_state_dict(model, out / f"{name}.weights.safetensors", metadata={"source": "timm"})
        save_file({"pixels": pixels, "features": features.contiguous(), "logits": logits},
                  str(out / f"{name}.io.safetensors"))
    resolution_changes(out)
    for name, model, shape, forward in other_layouts():
        model.eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
            pixels = torch.randn(shape)
            logits = forward(model, pixels)
        save_state_dict(model, out / f"{name}.weights.safetensors", metadata={"source": name})
        save_file({"pixels": pixels, "logits": logits}, str(out / f"{name}.io.safetensors"))
        if name == "hf_vit":
            # The Hub's files keep the transformers 4.x names; transformers >= 5 renames on load.
            save_state_dict({hf_v4_name(k): v for k, v in model.state_dict().items()},
                            out / "hf_vit_v4.weights.safetensors")


if __name__ == "__main__":
    main()
