"""timm's (or torchvision's) view of every model of the zoo, for tests/configs/test_zoo.cpp.

For each YAML file of family vit under CONFIGS_DIR (its `name:` is a timm model name, or a
torchvision one (vit_b_16, ...: its checkpoint.format is torchvision), or else its architecture
section gives timm's VisionTransformer keyword arguments: our own vit_digits) writes,
into OUT_DIR/timm_zoo.json, what timm says about that model with no weights downloaded:
  parameters   sum(p.numel() for p in model.parameters())
  shapes       {parameter name: shape}: the checkpoint layout the model must load
  flops        torch.utils.flop_counter's count for one image at the pretrained cfg's input size
               (convolutions, matmuls, attention: 2 x multiply-accumulates)
  architecture the options that leave no trace in the shapes (pooling, norm eps, activation, ...)
  data_config  timm.data.resolve_data_config({}, model=model): input_size, crop_pct,
               interpolation, mean, std
For torchvision's models: its parameter count and flops, its parameters under timm's names (the
renaming attnzoo's torchvision layout makes), the same architecture keys read off torchvision's
module, and the eval transform of the weights the YAML names (crop_pct = crop / resize).

Models are built on the meta device: shapes and counts without allocating ViT-H's 2.5 GB.

usage: make_timm_reference.py CONFIGS_DIR OUT_DIR
"""
import json
import sys
from pathlib import Path

import timm
import torch
import yaml
from timm.layers import LayerScale, set_fused_attn
from timm.models.vision_transformer import VisionTransformer
from torch.utils.flop_counter import FlopCounterMode


def is_identity(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Identity)


def activation_name(act: torch.nn.Module) -> str:
    if isinstance(act, torch.nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    return type(act).__name__


def describe(name: str, document: dict) -> dict:
    with torch.device("meta"):
        if name in timm.list_models():
            model = timm.create_model(name, pretrained=False)
        else:
            # A model of our own (the shipped vit_digits): timm's VisionTransformer built from the
            # YAML's architecture (its keys are timm's keyword arguments), with the YAML's
            # preprocessing as its pretrained cfg.
            model = VisionTransformer(**document["architecture"])
            pre = document["preprocess"]
            model.pretrained_cfg = {
                "input_size": tuple(pre["input_size"]), "crop_pct": pre["crop_pct"],
                "interpolation": pre["interpolation"], "mean": tuple(pre["mean"]),
                "std": tuple(pre["std"])}
    model.eval()
    data_config = timm.data.resolve_data_config({}, model=model)
    block = model.blocks[0]
    final_norm = model.fc_norm if not is_identity(model.fc_norm) else model.norm
    architecture = {
        "img_size": list(model.patch_embed.img_size),
        "patch_size": list(model.patch_embed.patch_size),
        "in_chans": model.patch_embed.proj.in_channels,
        "embed_dim": model.embed_dim,
        "depth": len(model.blocks),
        "num_heads": block.attn.num_heads,
        "mlp_hidden": block.mlp.fc1.out_features,
        "num_classes": model.num_classes,
        "global_pool": model.global_pool,
        "class_token": model.cls_token is not None,
        "reg_tokens": model.num_reg_tokens,
        "no_embed_class": model.no_embed_class,
        "qkv_bias": block.attn.qkv.bias is not None,
        "qk_norm": not is_identity(block.attn.q_norm),
        "layer_scale": isinstance(block.ls1, LayerScale),
        "pre_norm": not is_identity(model.norm_pre),
        "fc_norm": not is_identity(model.fc_norm),
        "final_norm": not is_identity(final_norm),
        "norm_eps": getattr(final_norm, "eps", None),
        "activation": activation_name(block.mlp.act),
    }
    with FlopCounterMode(display=False) as counter:
        model(torch.empty((1, *data_config["input_size"]), device="meta"))
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "shapes": {k: list(p.shape) for k, p in model.named_parameters()},
        "flops": counter.get_total_flops(),
        "architecture": architecture,
        "data_config": {
            "input_size": list(data_config["input_size"]),
            "crop_pct": data_config["crop_pct"],
            "interpolation": data_config["interpolation"],
            "mean": list(data_config["mean"]),
            "std": list(data_config["std"]),
        },
    }


# The torchvision weights whose eval transform each zoo model takes (the default ones at 224).
TORCHVISION_WEIGHTS = {
    "vit_b_16": "ViT_B_16_Weights.IMAGENET1K_V1",
    "vit_b_32": "ViT_B_32_Weights.IMAGENET1K_V1",
    "vit_l_16": "ViT_L_16_Weights.IMAGENET1K_V1",
    "vit_l_32": "ViT_L_32_Weights.IMAGENET1K_V1",
    "vit_h_14": "ViT_H_14_Weights.IMAGENET1K_SWAG_LINEAR_V1",
}


def timm_name(name: str) -> str:
    """A torchvision ViT parameter under timm's name."""
    import re
    rules = [
        (r"class_token", "cls_token"),
        (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
        (r"encoder\.pos_embedding", "pos_embed"),
        (r"encoder\.layers\.encoder_layer_(\d+)\.ln_1\.(\w+)", r"blocks.\1.norm1.\2"),
        (r"encoder\.layers\.encoder_layer_(\d+)\.ln_2\.(\w+)", r"blocks.\1.norm2.\2"),
        (r"encoder\.layers\.encoder_layer_(\d+)\.self_attention\.in_proj_(\w+)",
         r"blocks.\1.attn.qkv.\2"),
        (r"encoder\.layers\.encoder_layer_(\d+)\.self_attention\.out_proj\.(\w+)",
         r"blocks.\1.attn.proj.\2"),
        (r"encoder\.layers\.encoder_layer_(\d+)\.mlp\.0\.(\w+)", r"blocks.\1.mlp.fc1.\2"),
        (r"encoder\.layers\.encoder_layer_(\d+)\.mlp\.3\.(\w+)", r"blocks.\1.mlp.fc2.\2"),
        (r"encoder\.ln\.(\w+)", r"norm.\1"),
        (r"heads\.head\.(\w+)", r"head.\1"),
    ]
    for pattern, replacement in rules:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    return name


def describe_torchvision(name: str) -> dict:
    import torchvision
    weights = eval(f"torchvision.models.{TORCHVISION_WEIGHTS[name]}")  # noqa: S307 - our table
    transform = weights.transforms()
    with torch.device("meta"):
        model = getattr(torchvision.models, name)()
    model.eval()
    layer = model.encoder.layers[0]
    architecture = {
        "img_size": [model.image_size, model.image_size],
        "patch_size": [model.patch_size, model.patch_size],
        "in_chans": model.conv_proj.in_channels,
        "embed_dim": model.hidden_dim,
        "depth": len(model.encoder.layers),
        "num_heads": layer.num_heads,
        "mlp_hidden": layer.mlp[0].out_features,
        "num_classes": model.num_classes,
        "global_pool": "token",
        "class_token": True,
        "reg_tokens": 0,
        "no_embed_class": False,
        "qkv_bias": layer.self_attention.in_proj_bias is not None,
        "qk_norm": False,
        "layer_scale": False,
        "pre_norm": False,
        "fc_norm": False,
        "final_norm": True,
        "norm_eps": model.encoder.ln.eps,
        "activation": activation_name(layer.mlp[1]),
    }
    crop, resize = transform.crop_size[0], transform.resize_size[0]
    with FlopCounterMode(display=False) as counter:
        model(torch.empty((1, 3, crop, crop), device="meta"))
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "shapes": {timm_name(k): list(p.shape) for k, p in model.named_parameters()},
        "flops": counter.get_total_flops(),
        "architecture": architecture,
        "data_config": {
            "input_size": [3, crop, crop],
            "crop_pct": crop / resize,
            "interpolation": transform.interpolation.value,
            "mean": list(transform.mean),
            "std": list(transform.std),
        },
    }


def main() -> None:
    # Attention as explicit matmuls, which the flop counter sees on every device (a fused kernel
    # may have no flop formula); the count is the same either way.
    set_fused_attn(False)
    configs, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    documents = [
        yaml.safe_load(path.read_text())
        for path in list(configs.rglob("*.yaml")) + list(configs.rglob("*.yml"))
    ]
    vits = {d["name"]: d for d in documents if isinstance(d, dict) and d.get("family") == "vit"}
    zoo = {name: describe_torchvision(name)
           if vits[name].get("checkpoint", {}).get("format") == "torchvision"
           else describe(name, vits[name]) for name in sorted(vits)}
    (out / "timm_zoo.json").write_text(json.dumps(zoo, indent=1))
    print(f"timm {timm.__version__}: {len(zoo)} models -> {out / 'timm_zoo.json'}")


if __name__ == "__main__":
    main()
