#!/usr/bin/env bash
# train_test.sh CASE ATTNZOO_BINARY PYTHON TRAIN_DATA_DIR: `attnzoo train` and `attnzoo eval` on a
# small image folder made here (striped images, the class is the direction) or, for the CTC cases,
# on transcribed tone sequences made here: the run folder, the plain progress lines, the plot,
# evaluation agreeing with the run's last validation, two data-parallel ranks ending as one
# process, and the refusals of bad input.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 data=$4

# The CTC cases' data: utterances of 1 to 3 tones of three pitches between silences, transcribed
# "high low mid" (36 to train, 12 to validate), a table of word units, and a small streaming
# Conformer with a CTC head over them.
make_tones() {
  "$py" - "$out" <<'PY' || exit 1
import os, sys, wave
import numpy as np
root = sys.argv[1]
rng = np.random.default_rng(7)
pitches = {"high": 2400.0, "low": 300.0, "mid": 900.0}
def noise(seconds):
    return rng.normal(0, 0.01, int(16000 * seconds))
for split, count in (("train", 36), ("val", 12)):
    os.makedirs(f"{root}/{split}", exist_ok=True)
    with open(f"{root}/{split}/list.txt", "w") as lines:
        lines.write("# PATH<TAB>TRANSCRIPT\n")
        for k in range(count):
            words = [str(w) for w in rng.choice(list(pitches), size=1 + k % 3)]
            parts = [noise(rng.uniform(0.1, 0.2))]
            for word in words:
                t = np.arange(int(16000 * rng.uniform(0.15, 0.25))) / 16000.0
                f = pitches[word] * rng.uniform(0.95, 1.05)
                parts.append(rng.uniform(0.2, 0.5) * np.sin(2 * np.pi * f * t) + noise(t.size / 16000))
                parts.append(noise(rng.uniform(0.1, 0.2)))
            pcm = (np.clip(np.concatenate(parts), -1, 1) * 32767).round().astype("<i2")
            with wave.open(f"{root}/{split}/{k:03d}.wav", "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(16000)
                w.writeframes(pcm.tobytes())
            # Two validation transcripts made wrong, so that even a model that hears every tone
            # has a word error rate to agree on: a word appended (a deletion), one dropped (an
            # insertion).
            if split == "val" and k == 1:
                words.append("high")
            if split == "val" and k == 2:
                words.pop()
            lines.write(f"{k:03d}.wav\t" + " ".join(words) + "\n")
PY
  printf '<blank> 0\n<unk> 1\nhigh 2\nlow 3\nmid 4\n<sos/eos> 5\n' >"$out/units.txt"
  cat >"$out/model.yaml" <<EOF
name: conformer_ctc_micro
family: conformer
architecture: {input_dim: 20, encoder_dim: 16, num_layers: 2, num_heads: 2, ffn_dim: 32,
  depthwise_conv_kernel_size: 5, causal_conv: true, subsampling: conv2d4,
  position: rel_pos_wenet, dropout: 0.1, vocab_size: 6}
features: {kind: fbank, num_mel_bins: 20}
decoding: {units: units.txt, text: words, search: prefix_beam, beam_size: 4}
EOF
  cat >"$out/train.yaml" <<EOF
model: model.yaml
data: {kind: audio_list, train: train/list.txt, val: val/list.txt, workers: 1}
augment: {spec_augment: true, freq_masks: 1, freq_width: 3, time_masks: 1, time_width: 5}
optimizer: {lr: 1.0e-2, weight_decay: 0.01}
schedule: {warmup_steps: 10, min_lr_ratio: 0.1}
train: {loss: ctc, epochs: 30, batch_size: 6, clip_grad_norm: 5.0, log_every: 30, seed: 5,
  threads: 1, output: $out/run}
EOF
}

# two_ranks FOLDER ARGS...: `attnzoo train --config $out/train.yaml ARGS` as two ranks on c10d
# Gloo over loopback, 3 examples each per step, writing FOLDER; fails when a rank fails or rank 1
# prints anything (rank 0 alone logs). Their output: $out/rank{0,1}.{out,err}.
two_ranks() {
  local folder=$1 rank port pids=()
  shift
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for rank in 0 1; do
    WORLD_SIZE=2 RANK=$rank LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$bin" train --config "$out/train.yaml" "$@" --set train.batch_size=3 \
      --output "$folder" >"$out/rank$rank.out" 2>"$out/rank$rank.err" &
    pids+=($!)
  done
  wait "${pids[0]}" || { echo "FAIL: rank 0 failed"; cat "$out/rank0.err"; exit 1; }
  wait "${pids[1]}" || { echo "FAIL: rank 1 failed"; cat "$out/rank1.err"; exit 1; }
  [ ! -s "$out/rank1.err" ] || { echo "FAIL: rank 1 printed:"; cat "$out/rank1.err"; exit 1; }
}

case "$case_name" in
  *ctc*) make_tones ;;
  *)
    "$py" "$(dirname "${BASH_SOURCE[0]}")/make_stripes.py" "$out" || exit 1
    cat >"$out/train.yaml" <<EOF
model: $data/vit_train_micro.yaml
data: {kind: image_folder, train: train, val: val, workers: 1}
augment: {crop_scale: [0.5, 1.0]}
optimizer: {lr: 3.0e-3}
schedule: {warmup_steps: 3}
train: {epochs: 6, batch_size: 6, log_every: 3, seed: 2, threads: 1, output: $out/run}
EOF
    ;;
esac

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
    is_png "$out/curves.png"
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
    set_ddp=(--set "model_set=[architecture.drop_rate=0, architecture.drop_path_rate=0]"
             --set train.epochs=3 --set train.log_every=1)
    two_ranks "$out/ddp" "${set_ddp[@]}"
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
# The ranks' averaged gradients and the one process's differ by float32 rounding, which Adam's
# normalisation can make a visible part of a step (lr 3e-3) over the 18 steps: measured 5.6e-5 on
# an AVX2 CPU, under 5e-5 on AVX-512 ones.
assert sorted(ddp) == sorted(single) and diff < 1e-4, diff
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
  train_ctc)
    # CTC over word units: the banner and validation lines, metrics.csv's error-rate columns, the
    # plot, and `attnzoo eval` of the run's weights agreeing with its last validation.
    run 0 train --config "$out/train.yaml" --plot "$out/curves.png"
    expect stderr '^training conformer_ctc_micro: 36 examples, CTC over 6 tokens, 180 steps of 1 x 6, output '
    expect stderr '^step 30/180 epoch 5.00 loss [0-9.]+ lr [0-9.e+-]+ grad [0-9.]+ [0-9.]+ ex/s$'
    expect stderr '^step 180: val CTC loss [0-9.]+, WER [0-9.]+%, CER [0-9.]+% \(12 utterances\)$'
    expect stderr '^done: 180 steps; '
    ! grep -q 'top-1' "$out/stderr" || { echo "FAIL: a classifier's accuracy in a CTC run"; exit 1; }
    is_png "$out/curves.png"
    run 0 eval --model "$out/model.yaml" --weights "$out/run/model.safetensors" \
      --data "$out/val/list.txt" --json --workers 0
    lines stdout 1
    "$py" - "$out/stdout" "$out/run/metrics.csv" "$out/val/list.txt" <<'PY' || exit 1
import csv, json, sys
result = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
assert list(rows[0])[-2:] == ["val_wer", "val_cer"], list(rows[0])
assert len(rows) == 30 and rows[-1]["step"] == "180", (len(rows), rows[-1])
last = rows[-1]
assert last["val_top1"] == "" and last["val_top5"] == "", last
assert result["examples"] == 12 and result["search"] == "prefix_beam", result
assert abs(result["wer"] - float(last["val_wer"])) < 1e-7, (result["wer"], last["val_wer"])
assert abs(result["cer"] - float(last["val_cer"])) < 1e-7, (result["cer"], last["val_cer"])
assert abs(result["loss"] - float(last["val_loss"])) < 1e-5, (result["loss"], last["val_loss"])
# The utterances: the list's transcripts as references, their counts summing to the corpus's.
transcripts = [l.rstrip("\n").split("\t")[1] for l in open(sys.argv[3]) if not l.startswith("#")]
utterances = result["utterances"]
assert [u["reference"] for u in utterances] == transcripts, utterances
assert all(u["audio"].endswith(f"{i:03d}.wav") for i, u in enumerate(utterances))
words = sum(u["words"] for u in utterances)
errors = sum(u["word_errors"] for u in utterances)
assert words == result["word_counts"]["reference"] == sum(len(t.split()) for t in transcripts)
assert errors == result["word_counts"]["errors"] and abs(result["wer"] - errors / words) < 1e-12
# The wrong transcripts: utterance 1 has a word its audio lacks, utterance 2 lacks one.
assert utterances[1]["word_errors"] >= 1 and utterances[2]["word_errors"] >= 1, utterances[1:3]
assert result["word_counts"]["deletions"] >= 1 and result["word_counts"]["insertions"] >= 1
first, final = float(rows[0]["loss"]), float(last["loss"])
assert final < 0.5 * first, (first, final)
print(f"eval agrees with the run: WER {result['wer']:.4f}, loss {first:.3f} -> {final:.3f}")
PY
    run 0 eval --model "$out/model.yaml" --weights "$out/run/model.safetensors" \
      --data "$out/val/list.txt"
    expect stdout '^WER [0-9.]+% \([0-9]+ of 24 words: [0-9]+ substituted, [0-9]+ deleted, [0-9]+ inserted\)  CER [0-9.]+%  loss [0-9.]+$'
    # A list of "PATH LABEL" lines is not a transcript list.
    sed 's/\t/ /' "$out/val/list.txt" >"$out/spaces.txt"
    run 1 eval --model "$out/model.yaml" --weights "$out/run/model.safetensors" \
      --data "$out/spaces.txt"
    expect stderr "spaces.txt:2: expected 'PATH<TAB>TRANSCRIPT'"
    ;;
  train_ddp_ctc)
    # Two ranks on c10d Gloo over loopback, 3 utterances each per step, end with the weights of
    # one process at 6 per step: each rank's CTC loss is the mean over its utterances, so with
    # equal shares the mean over the ranks is the one process's mean. No dropout (the ranks'
    # masks would differ from one process's), no batch norm in the convolution modules (each rank
    # normalises by its own batch's statistics); SpecAugment stays, as each example's generator
    # is its position's.
    "$bin" version | grep -q '^data-parallel: gloo' ||
      { echo "FAIL: no c10d Gloo in this build (tools/setup.sh installs libgloo-dev)"; exit 1; }
    # ddp_and_single NAME SETTINGS...: the run on 2 ranks into $out/NAME_ddp, on one process into
    # $out/NAME_single.
    ddp_and_single() {
      local name=$1
      shift
      two_ranks "$out/${name}_ddp" "$@"
      run 0 train --config "$out/train.yaml" "$@" --set train.batch_size=6 \
        --output "$out/${name}_single"
    }
    model_set=(--set "model_set=[architecture.dropout=0, architecture.conv_norm=layer_norm]")
    ddp_and_single full "${model_set[@]}" --set train.epochs=3 --set train.log_every=1
    grep -q '^training conformer_ctc_micro: 36 examples, CTC over 6 tokens, 18 steps of 1 x 6 (2 ranks x 3)' "$out/rank0.err" ||
      { echo "FAIL: rank 0's log"; cat "$out/rank0.err"; exit 1; }
    "$py" - "$out/full_ddp" "$out/full_single" <<'PY' || exit 1
import csv, sys
from safetensors.torch import load_file
ddp, single = (load_file(f"{d}/model.safetensors") for d in sys.argv[1:3])
assert sorted(ddp) == sorted(single)
# Left out: the attention's key bias (a softmax over keys is blind to it: its gradient is rounding
# noise, which Adam's normalisation turns into full steps) and the relative-position projection
# (nearly blind: the slow sinusoids barely change over 40 frames).
def compared(name, t):
    if name.endswith("attn.mha.qkv.bias"):
        d = t.numel() // 3
        return t[list(range(d)) + list(range(2 * d, 3 * d))]
    return None if name.endswith("attn.linear_pos.weight") else t
diffs = {k: (compared(k, ddp[k]) - compared(k, single[k])).abs().max().item()
         for k in single if compared(k, single[k]) is not None}
diff = max(diffs.values())
print(f"max |2 ranks - 1 process| over {len(diffs)} of {len(single)} weights: {diff:.2e}")
assert len(diffs) > 60 and diff < 5e-5, sorted(diffs.items(), key=lambda kv: kv[1])[-3:]
rows = [list(csv.DictReader(open(f"{d}/metrics.csv"))) for d in sys.argv[1:3]]
assert len(rows[0]) == len(rows[1]) == 18
def close(a, b):
    return abs(float(a) - float(b)) <= 1e-5 * max(1.0, abs(float(b)))
for a, b in zip(*rows):
    assert close(a["loss"], b["loss"]), (a, b)
    assert (a["val_loss"] == "") == (b["val_loss"] == ""), (a, b)
    if b["val_loss"]:
        assert close(a["val_loss"], b["val_loss"]) and a["val_wer"] == b["val_wer"], (a, b)
print("loss", rows[1][0]["loss"], "->", rows[1][-1]["loss"])
PY
    # And the two models transcribe the validation list alike.
    for run_dir in full_ddp full_single; do
      run 0 eval --model "$out/model.yaml" --set "architecture.conv_norm=layer_norm" \
        --weights "$out/$run_dir/model.safetensors" --data "$out/val/list.txt" --json --workers 0
      cp "$out/stdout" "$out/$run_dir.json"
    done
    "$py" - "$out/full_ddp.json" "$out/full_single.json" <<'PY' || exit 1
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"], (a["loss"], b["loss"])
assert [u["hypothesis"] for u in a["utterances"]] == [u["hypothesis"] for u in b["utterances"]]
PY
    # With dynamic chunks (all earlier chunks in view): every rank draws the step's chunk size
    # as one process does, so the losses stay the same.
    ddp_and_single chunks "${model_set[@]}" --set train.steps=8 --set train.log_every=1 \
      --set train.dynamic_chunk=4 --set train.full_context_prob=0.25
    run 0 train --config "$out/train.yaml" "${model_set[@]}" --set train.steps=8 \
      --set train.log_every=1 --set train.batch_size=6 --output "$out/no_chunks"
    "$py" - "$out/chunks_ddp" "$out/chunks_single" "$out/no_chunks" <<'PY' || exit 1
import csv, sys
rows = [list(csv.DictReader(open(f"{d}/metrics.csv"))) for d in sys.argv[1:]]
assert len(rows[0]) == len(rows[1]) == 8
for a, b in zip(rows[0], rows[1]):
    assert abs(float(a["loss"]) - float(b["loss"])) <= 1e-5 * float(b["loss"]), (a, b)
# The chunks changed the training (the run without them differs by step 8).
assert any(abs(float(a["loss"]) - float(b["loss"])) > 1e-3 for a, b in zip(rows[1], rows[2]))
PY
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
