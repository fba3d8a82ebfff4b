"""The seed corpus of fuzz_pickle: torch.save files of each reference library's own state dicts
(small instances), in the zip format and the legacy one, a training checkpoint, and the bare
data.pkl pickles of the zip files (the unpickler's own seeds):

  vit_timm.pth         timm VisionTransformer
  vit_torchvision.pth  torchvision VisionTransformer (fused in_proj, class_token)
  vit_hf.pth           transformers ViTForImageClassification
  conformer_wenet.pth  WeNet's names (tests/models/make_wenet_reference.py's synthetic state dict)
  conformer_espnet.pth ESPnet's Conformer Encoder (with GlobalMVN and CTC names)
  training.pth         timm-style: epoch, state_dict, optimizer, argparse args, numpy metric
  *_legacy.pth         the same in the legacy format; *_protocol4.pth with pickle protocol 4

Random weights, seeded. Run once with the venv's Python when the models change; the output is
committed.
usage: make_pickle_seeds.py OUT_DIR
"""
import argparse
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "models"))


def save(out: Path, name: str, state) -> None:
    torch.save(state, out / f"{name}.pth")
    with zipfile.ZipFile(out / f"{name}.pth") as z:
        pickle = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
        (out / f"{name}.pkl").write_bytes(z.read(pickle))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    import timm
    import torchvision
    from make_checkpoint_seeds import espnet_state_dict
    from make_wenet_reference import synthetic_state_dict
    from transformers import ViTConfig, ViTForImageClassification

    timm_vit = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0,
        num_classes=3)
    save(out, "vit_timm", timm_vit.state_dict())
    save(out, "vit_torchvision", torchvision.models.VisionTransformer(
        image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=3).state_dict())
    save(out, "vit_hf", ViTForImageClassification(ViTConfig(
        image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=3)).state_dict())
    save(out, "conformer_wenet", synthetic_state_dict())
    save(out, "conformer_espnet", espnet_state_dict(num_blocks=1))
    optimizer = torch.optim.AdamW(timm_vit.parameters())
    timm_vit(torch.randn(1, 3, 16, 16)).sum().backward()
    optimizer.step()
    save(out, "training", {
        "epoch": 3, "arch": "vit_tiny", "state_dict": timm_vit.state_dict(),
        "optimizer": optimizer.state_dict(),
        "args": argparse.Namespace(lr=1e-3, mean=[0.5, 0.5, 0.5], amp=True, output=None),
        "metric": np.float64(12.5)})
    torch.save(timm_vit.state_dict(), out / "vit_timm_legacy.pth",
               _use_new_zipfile_serialization=False)
    torch.save(synthetic_state_dict(), out / "conformer_wenet_legacy.pth",
               _use_new_zipfile_serialization=False)
    torch.save(timm_vit.state_dict(), out / "vit_timm_protocol4.pth", pickle_protocol=4)


if __name__ == "__main__":
    main()
