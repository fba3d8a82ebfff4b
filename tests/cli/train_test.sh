#!/usr/bin/env bash
# train_test.sh CASE ATTNZOO_BINARY PYTHON TRAIN_DATA_DIR: `attnzoo train` and `attnzoo eval` on a
# small image folder made here (striped images, the class is the direction): the run folder, the
# plain progress lines, the plot, evaluation agreeing with the run's last validation, and the
# refusals of bad input.
set -u
case_name=$1
bin=$2
py=$3
data=$4
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$py" - "$out" <<'PY' || exit 1
import math, random, sys
from PIL import Image
root = sys.argv[1]
rng = random.Random(4)
import os
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
PY
cat >"$out/train.yaml" <<EOF
model: $data/vit_train_micro.yaml
data: {kind: image_folder, train: train, val: val, workers: 1}
augment: {crop_scale: [0.5, 1.0]}
optimizer: {lr: 3.0e-3}
schedule: {warmup_steps: 3}
train: {epochs: 6, batch_size: 6, log_every: 3, seed: 2, threads: 1, output: $out/run}
EOF

case "$case_name" in
  train_eval)
    run 0 train --config "$out/train.yaml" --plot "$out/curves.png"
    expect stderr '^training vit_train_micro: 36 examples, 3 classes, 36 steps of 1 x 6, output '
    expect stderr '^step 3/36 epoch 0.50 loss [0-9.]+ lr [0-9.e+-]+ grad [0-9.]+ [0-9.]+ ex/s$'
    expect stderr '^step 36: val loss [0-9.]+, top-1 [0-9.]+%, top-5 100.00% \(18 examples\)$'
    expect stderr '^done: 36 steps; '
    for f in metrics.csv model.safetensors checkpoint.safetensors; do
      [ -s "$out/run/$f" ] || { echo "FAIL: no run/$f"; exit 1; }
    done
    head -c 8 "$out/curves.png" | od -An -tx1 | tr -d ' \n' | grep -q '^89504e470d0a1a0a' ||
      { echo "FAIL: curves.png is not a PNG"; exit 1; }
    run 0 eval --model "$data/vit_train_micro.yaml" --weights "$out/run/model.safetensors" \
      --data "$out/val" --json --workers 0
    lines stdout 1
    "$py" - "$out/stdout" "$out/run/metrics.csv" <<'PY' || exit 1
import csv, json, sys
result = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 12 and rows[-1]["step"] == "36", rows[-1]
last = rows[-1]
assert result["examples"] == 18 and result["classes"] == ["diagonal", "horizontal", "vertical"]
assert abs(result["top1"] - float(last["val_top1"])) < 1e-7, (result["top1"], last["val_top1"])
assert abs(result["loss"] - float(last["val_loss"])) < 1e-4, (result["loss"], last["val_loss"])
assert sum(map(sum, result["confusion"])) == 18 and [sum(r) for r in result["confusion"]] == [6, 6, 6]
first = float(rows[0]["loss"])
assert float(last["loss"]) < first, (first, last["loss"])
print("eval agrees with the run: top-1", result["top1"])
PY
    run 0 eval --model "$data/vit_train_micro.yaml" --weights "$out/run/model.safetensors" \
      --data "$out/val"
    expect stdout '^top-1 [0-9.]+%  top-5 100.00%  loss [0-9.]+$'
    expect stdout '^confusion matrix \(rows: true class, columns: predicted\)$'
    expect stdout '^ *horizontal +[0-9]+ +[0-9]+ +[0-9]+$'
    # Resuming the finished run's checkpoint with more steps continues from step 36.
    run 0 train --config "$out/train.yaml" --set train.steps=39 \
      --resume "$out/run/checkpoint.safetensors"
    expect stderr 'resumed at step 36'
    expect stderr '^step 39/39 '
    ;;
  train_bad)
    run 1 train --config "$out/missing.yaml"
    expect stderr 'missing.yaml: no such training config'
    run 1 train --config "$out/train.yaml" --set train.epoch=3
    expect stderr "override 'train.epoch=3'.*unknown key 'epoch'"
    run 1 train --config "$out/train.yaml" --resume "$out/nothing.safetensors"
    expect stderr 'nothing.safetensors'
    echo "not a checkpoint" >"$out/bad.safetensors"
    run 1 train --config "$out/train.yaml" --resume "$out/bad.safetensors"
    expect stderr 'bad.safetensors'
    run 2 train
    expect stderr '--config'
    run 1 eval --model "$data/vit_train_micro.yaml" --weights "$out/missing.safetensors" \
      --data "$out/val"
    expect stderr 'missing.safetensors'
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
