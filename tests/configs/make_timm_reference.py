"""timm's view of every model of the zoo, for tests/configs/test_zoo.cpp.

For each YAML file of family vit under CONFIGS_DIR (its `name:` is a timm model name, or else its
architecture section gives timm's VisionTransformer keyword arguments: our own vit_digits) writes,
into OUT_DIR/timm_zoo.json, what timm says about that model with no weights downloaded:
  parameters   sum(p.numel() for p in model.parameters())
  shapes       {parameter name: shape}: the checkpoint layout the model must load
  flops        torch.utils.flop_counter's count for one image at the pretrained cfg's input size
               (convolutions, matmuls, attention: 2 x multiply-accumulates)
  architecture the options that leave no trace in the shapes (pooling, norm eps, activation, ...)
  data_config  timm.data.resolve_data_config({}, model=model): input_size, crop_pct,
               interpolation, mean, std

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
    zoo = {name: describe(name, vits[name]) for name in sorted(vits)}
    (out / "timm_zoo.json").write_text(json.dumps(zoo, indent=1))
    print(f"timm {timm.__version__}: {len(zoo)} models -> {out / 'timm_zoo.json'}")


if __name__ == "__main__":
    main()
