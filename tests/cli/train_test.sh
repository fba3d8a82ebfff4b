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
"$py" "$(dirname "${BASH_SOURCE[0]}")/make_stripes.py" "$out" || exit 1
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
    # On a terminal (a pseudo-terminal from util-linux's script): a bar redrawn in place with the
    # loss, learning rate, throughput and ETA, instead of the plain lines.
    script -qec "$bin train --config $out/train.yaml --set train.epochs=1 --output $out/tty_run" \
      /dev/null >"$out/tty" 2>&1 || { echo "FAIL: train on a terminal"; cat "$out/tty"; exit 1; }
    grep -Eq $'\r\\[#+\\.*\\] 6/6 loss [0-9.]+ lr [0-9.e+-]+ [0-9.]+ ex/s ETA [0-9hms]+' "$out/tty" ||
      { echo "FAIL: no progress bar on a terminal"; cat -A "$out/tty" | head; exit 1; }
    ! grep -q '^step 6/6 epoch' "$out/tty" || { echo "FAIL: plain lines on a terminal"; exit 1; }
    # Resuming the finished run's checkpoint with more steps continues from step 36.
    run 0 train --config "$out/train.yaml" --set train.steps=39 \
      --resume "$out/run/checkpoint.safetensors"
    expect stderr 'resumed at step 36'
    expect stderr '^step 39/39 '
    ;;
  train_ddp)
    # Two ranks on c10d Gloo over loopback, 6 images each per step, end with the weights of one
    # process at 12 per step (no dropout: the ranks' dropout masks would differ from one
    # process's; the crops are the same, as each example's generator is its position's).
    "$bin" version | grep -q '^data-parallel: gloo' ||
      { echo "FAIL: no c10d Gloo in this build (tools/setup.sh installs libgloo-dev)"; exit 1; }
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    set_ddp=(--set "model_set=[architecture.drop_rate=0, architecture.drop_path_rate=0]"
             --set train.epochs=3 --set train.log_every=1)
    for rank in 0 1; do
      WORLD_SIZE=2 RANK=$rank LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$bin" train --config "$out/train.yaml" "${set_ddp[@]}" --set train.batch_size=3 \
        --output "$out/ddp" >"$out/rank$rank.out" 2>"$out/rank$rank.err" &
    done
    wait %1 || { echo "FAIL: rank 0 failed"; cat "$out/rank0.err"; exit 1; }
    wait %2 || { echo "FAIL: rank 1 failed"; cat "$out/rank1.err"; exit 1; }
    [ ! -s "$out/rank1.err" ] || { echo "FAIL: rank 1 printed:"; cat "$out/rank1.err"; exit 1; }
    grep -q '^training vit_train_micro: 36 examples, 3 classes, 18 steps of 1 x 6 (2 ranks x 3)' "$out/rank0.err" ||
      { echo "FAIL: rank 0's log"; cat "$out/rank0.err"; exit 1; }
    run 0 train --config "$out/train.yaml" "${set_ddp[@]}" --set train.batch_size=6 \
      --output "$out/single"
    "$py" - "$out/ddp" "$out/single" <<'PY' || exit 1
import csv, sys
from safetensors.torch import load_file
ddp, single = (load_file(f"{d}/model.safetensors") for d in sys.argv[1:])
diff = max((ddp[k] - single[k]).abs().max().item() for k in single)
print(f"max |2 ranks - 1 process| over the weights: {diff:.2e}")
assert sorted(ddp) == sorted(single) and diff < 5e-5, diff
rows = [list(csv.DictReader(open(f"{d}/metrics.csv"))) for d in sys.argv[1:]]
assert len(rows[0]) == len(rows[1]) == 18
for a, b in zip(*rows):
    assert abs(float(a["loss"]) - float(b["loss"])) < 1e-5, (a, b)
PY
    # A rank without RANK, and a WORLD_SIZE that is not a number.
    WORLD_SIZE=2 "$bin" train --config "$out/train.yaml" >"$out/stdout" 2>"$out/stderr" &&
      { echo "FAIL: WORLD_SIZE=2 without RANK ran"; exit 1; }
    expect stderr 'WORLD_SIZE=2 but RANK is not set'
    WORLD_SIZE=two "$bin" train --config "$out/train.yaml" >"$out/stdout" 2>"$out/stderr" &&
      { echo "FAIL: WORLD_SIZE=two ran"; exit 1; }
    expect stderr "WORLD_SIZE='two'"
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
