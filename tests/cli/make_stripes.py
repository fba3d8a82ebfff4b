"""Writes ROOT/{train,val}/{diagonal,horizontal,vertical}/NNN.png: 40x40 striped images whose
class is the stripes' direction (random period, phase, brightness, noise), 12 per class for
training and 6 for validation. The data of the CLI's training tests (train_test.sh)."""
import math
import os
import random
import sys

from PIL import Image


def main(root: str) -> None:
    rng = random.Random(4)
    for split, count in (("train", 12), ("val", 6)):
        for label, name in enumerate(("diagonal", "horizontal", "vertical")):
            os.makedirs(f"{root}/{split}/{name}", exist_ok=True)
            for i in range(count):
                period, phase = rng.uniform(5, 11), rng.uniform(0, 6.3)
                light, dark = rng.uniform(170, 255), rng.uniform(0, 60)
                image = Image.new("RGB", (40, 40))
                for y in range(40):
                    for x in range(40):
                        t = (x + y) / math.sqrt(2) if label == 0 else (y if label == 1 else x)
                        w = 0.5 + 0.5 * math.sin(2 * math.pi * t / period + phase)
                        v = int(w * light + (1 - w) * dark + rng.gauss(0, 10))
                        image.putpixel((x, y), (max(0, min(255, v)),) * 3)
                image.save(f"{root}/{split}/{name}/{i:03d}.png")


if __name__ == "__main__":
    main(sys.argv[1])
