#!/usr/bin/env python3
"""Extract the handwritten digits of OpenCV's digits.png into an image-folder dataset.

digits.png (Debian's opencv-doc package) is a 2000x1000 grayscale sheet of 5000 digits, each in a
20x20 cell: 50 rows of 100 cells, five rows per digit 0..9 in order. The fixed split of the zoo's
vit_digits model: for each digit, the first 400 cells in reading order train, the last 100 test.

    make_digits.py [--source digits.png] OUTPUT_DIR

writes OUTPUT_DIR/{train,test}/<digit>/<index>.png (20x20, 8-bit gray; index = position among the
digit's 500 cells) and OUTPUT_DIR/{train,test}.txt lists. Idempotent: a complete OUTPUT_DIR made
from the same source (its size and SHA-256 in OUTPUT_DIR/SOURCE) is left as it is.
"""
import argparse
import hashlib
import os
import sys

import numpy as np
from PIL import Image

DEFAULT_SOURCE = "/usr/share/doc/opencv-doc/examples/data/digits.png"
CELL = 20
PER_CLASS = 500
TRAIN_PER_CLASS = 400


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="the dataset folder to write")
    parser.add_argument("--source", default=DEFAULT_SOURCE, help="digits.png (opencv-doc)")
    args = parser.parse_args()

    if not os.path.isfile(args.source):
        print(f"make_digits.py: {args.source}: not found (Debian package opencv-doc)",
              file=sys.stderr)
        return 1
    with open(args.source, "rb") as f:
        blob = f.read()
    stamp = f"{len(blob)} {hashlib.sha256(blob).hexdigest()}\n"
    stamp_path = os.path.join(args.output, "SOURCE")
    if os.path.isfile(stamp_path) and open(stamp_path).read() == stamp:
        return 0

    sheet = np.asarray(Image.open(args.source).convert("L"))
    if sheet.shape != (50 * CELL, 100 * CELL):
        print(f"make_digits.py: {args.source}: expected a 2000x1000 sheet, got "
              f"{sheet.shape[1]}x{sheet.shape[0]}", file=sys.stderr)
        return 1
    cells = sheet.reshape(50, CELL, 100, CELL).transpose(0, 2, 1, 3).reshape(5000, CELL, CELL)
    lists = {"train": [], "test": []}
    for digit in range(10):
        for index in range(PER_CLASS):
            split = "train" if index < TRAIN_PER_CLASS else "test"
            folder = os.path.join(args.output, split, str(digit))
            os.makedirs(folder, exist_ok=True)
            name = f"{index:03d}.png"
            Image.fromarray(cells[digit * PER_CLASS + index]).save(os.path.join(folder, name))
            lists[split].append(f"{split}/{digit}/{name} {digit}\n")
    for split, lines in lists.items():
        with open(os.path.join(args.output, f"{split}.txt"), "w") as f:
            f.writelines(lines)
    with open(stamp_path, "w") as f:
        f.write(stamp)
    print(f"make_digits.py: {len(lists['train'])} training and {len(lists['test'])} test digits "
          f"in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
