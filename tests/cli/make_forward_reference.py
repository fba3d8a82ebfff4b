"""Reference files for tests/cli/forward_test.sh: timm's VisionTransformer built from the
`architecture:` section of a YAML config (its keys are timm's keyword arguments), with random
weights (seeded), and the files `attnzoo forward` reads and is compared with.

Writes into OUT_DIR:
  weights.safetensors         timm's state_dict
  weights_nohead.safetensors  the same without the classifier (for num_classes 0)
  input.safetensors           "pixels" [2, C, H, W] at the config's input size
  expected.safetensors        timm's "logits" and "features" (forward_head(pre_logits=True))
  input_224.safetensors       "pixels" [1, 3, 224, 224], for a zoo model
  no_pixels.safetensors, rank3.safetensors, channels.safetensors, int_pixels.safetensors
                              inputs that `attnzoo forward` must refuse

usage: make_forward_reference.py CONFIG.yaml OUT_DIR
"""
import functools
import sys
from pathlib import Path

import torch
import yaml
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from state_dict import save_state_dict  # noqa: E402


def timm_kwargs(architecture: dict) -> dict:
    kwargs = dict(architecture)
    if "norm_eps" in kwargs:
        kwargs["norm_layer"] = functools.partial(torch.nn.LayerNorm, eps=kwargs.pop("norm_eps"))
    if kwargs.pop("activation", "gelu") == "gelu_tanh":
        kwargs["act_layer"] = functools.partial(torch.nn.GELU, approximate="tanh")
    return kwargs


def perturbed_vit(architecture: dict, scale: float) -> VisionTransformer:
    """timm's VisionTransformer of a config's `architecture:` in eval mode, seeded (0), with every
    parameter moved by `scale` times a standard normal draw: timm's init leaves norms at 1/0 and
    tokens near 0, and a swapped or ignored tensor must show in the outputs."""
    torch.manual_seed(0)
    model = VisionTransformer(**timm_kwargs(architecture)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model


def main() -> None:
    config_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(config_path.read_text())
    model = perturbed_vit(config["architecture"], 0.05)
    _, height, width = config["preprocess"]["input_size"]
    with torch.no_grad():
        pixels = torch.randn(2, model.patch_embed.proj.in_channels, height, width)
        tokens = model.forward_features(pixels)
        logits = model.forward_head(tokens)
        features = model.forward_head(tokens, pre_logits=True)
    save_state_dict(model, out / "weights.safetensors", metadata={"source": "timm"})
    save_state_dict(
        {k: v for k, v in model.state_dict().items() if not k.startswith("head.")},
        out / "weights_nohead.safetensors",
    )
    save_file({"pixels": pixels}, str(out / "input.safetensors"))
    save_file({"logits": logits, "features": features.contiguous()}, str(out / "expected.safetensors"))
    save_file({"pixels": torch.randn(1, 3, 224, 224)}, str(out / "input_224.safetensors"))
    save_file({"images": pixels}, str(out / "no_pixels.safetensors"))
    save_file({"pixels": pixels[0].contiguous()}, str(out / "rank3.safetensors"))
    save_file({"pixels": pixels[:, :1].contiguous()}, str(out / "channels.safetensors"))
    save_file({"pixels": (pixels * 100).to(torch.int64)}, str(out / "int_pixels.safetensors"))
    print(f"timm VisionTransformer from {config_path} -> {out}")


if __name__ == "__main__":
    main()
