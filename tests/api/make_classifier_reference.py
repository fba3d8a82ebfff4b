"""Reference files for tests/api/test_image_classifier.cpp: timm's VisionTransformer built from the
`architecture:` of a YAML config (random weights, seeded and perturbed), images written with PIL,
and timm's own classification of them: its eval transform for the config's preprocessing
(timm.data.create_transform) and softmax probabilities.

Writes into OUT_DIR: weights.safetensors, images (a.png 50x40 RGB, b.jpg 64x48, c.png 33x90
grayscale, d.png 40x40 RGBA), probabilities.safetensors ("a.png" ... -> [classes] float64),
not_an_image.png (text), empty.jpg.

usage: make_classifier_reference.py CONFIG.yaml OUT_DIR
"""
import sys
from pathlib import Path

import numpy as np
import timm.data
import torch
import yaml
from PIL import Image
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from make_forward_reference import perturbed_vit  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from state_dict import save_state_dict  # noqa: E402


def main() -> None:
    config_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(config_path.read_text())
    model = perturbed_vit(config["architecture"], 0.2)
    save_state_dict(model.state_dict(), out / "weights.safetensors")

    rng = np.random.default_rng(0)
    images = {
        "a.png": Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)),
        "b.jpg": Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)),
        "c.png": Image.fromarray(rng.integers(0, 256, (90, 33), dtype=np.uint8)),
        "d.png": Image.fromarray(rng.integers(0, 256, (40, 40, 4), dtype=np.uint8)),
    }
    pre = config["preprocess"]
    transform = timm.data.create_transform(
        input_size=tuple(pre["input_size"]), crop_pct=pre["crop_pct"],
        interpolation=pre["interpolation"], mean=tuple(pre["mean"]), std=tuple(pre["std"]))
    probabilities = {}
    for name, image in images.items():
        path = out / name
        image.save(path, quality=95) if name.endswith(".jpg") else image.save(path)
        with Image.open(path) as reread:
            x = transform(reread.convert("RGB")).unsqueeze(0)
        with torch.no_grad():
            probabilities[name] = torch.softmax(model(x).double(), -1)[0].contiguous()
    save_file(probabilities, str(out / "probabilities.safetensors"))
    (out / "not_an_image.png").write_text("this is text, not a PNG\n")
    (out / "empty.jpg").write_bytes(b"")
    print(f"classifier reference: {len(images)} images -> {out}")


if __name__ == "__main__":
    main()
