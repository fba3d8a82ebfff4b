"""Writes configs/labels/imagenet1k.txt: the 1000 ImageNet-1k class names, one per line in class
index order, as torchvision's pretrained-weights metadata lists them (names made unique, e.g. the
two "crane" synsets). Run once; the file is committed so that C++ users need no Python.

usage: make_imagenet_labels.py OUT_FILE
"""
import sys

from torchvision.models import ViT_B_16_Weights


def main() -> None:
    categories = ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"]
    assert len(categories) == 1000 and len(set(categories)) == 1000
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write("\n".join(categories) + "\n")


if __name__ == "__main__":
    main()
