#!/usr/bin/env bash
# shipped_models_test.sh CASE ATTNZOO_BINARY PYTHON REPO_ROOT DATA_DIR: the zoo's shipped trained
# models (configs/vit/vit_digits*, configs/conformer/conformer_kws*) as the README's main command
# uses them, and their test accuracies against the training report (docs/training/results.json):
# `attnzoo eval` must reproduce each within 0.5 points; with inference.quantize=int8, within 0.2
# points (vit_digits) and 0.5 (conformer_kws) of the fp32 figure, and the logits of the shipped
# samples within 0.05 of fp32's. DATA_DIR holds the test sets, made by
# tools/data/ (a CTest fixture; tools/setup.sh makes the same ones).
set -u
case_name=$1
bin=$2
py=$3
root=$4
data=$5
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
vit=$root/configs/vit/vit_digits.yaml
vit_w=$root/assets/weights/vit_digits.safetensors
kws=$root/configs/conformer/conformer_kws.yaml
kws_w=$root/assets/weights/conformer_kws.safetensors
digit=$root/assets/samples/digit_7.png
word=$root/assets/samples/keyword_stop.wav

# check_accuracy MODEL [POINTS]: top1 of $out/stdout (attnzoo eval --json) within POINTS (0.5)
# points of the report's fp32 figure
check_accuracy() {
  "$py" - "$out/stdout" "$root/docs/training/results.json" "$1" "${2:-0.5}" <<'PY' || exit 1
import json
import sys

got = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))[sys.argv[3]]
points = float(sys.argv[4])
print(f"{sys.argv[3]}: eval top-1 {100 * got['top1']:.2f}%, report {100 * report['test_top1']:.2f}%"
      f" ({got['examples']} examples)")
assert got["examples"] == report["test_examples"], (got["examples"], report["test_examples"])
assert abs(got["top1"] - report["test_top1"]) <= points / 100 + 1e-9, \
    f"more than {points} points from the report"
PY
}

# check_logits FLOAT INT8 KEY BOUND: the int8 model's logits (KEY of attnzoo forward's output)
# within BOUND of the float model's, and the same class first
check_logits() {
  "$py" - "$@" <<'PY' || exit 1
import sys

from safetensors.torch import load_file

fp32, int8 = (load_file(f)[sys.argv[3]] for f in sys.argv[1:3])
bound = float(sys.argv[4])
diff = (fp32 - int8).abs().max().item()
print(f"{sys.argv[3]}: max |int8 - fp32| {diff:.4f} (logits span {fp32.min():.2f} .. "
      f"{fp32.max():.2f}), bound {bound}")
assert diff <= bound, diff
assert (fp32.argmax(-1) == int8.argmax(-1)).all()
assert diff > 0, "int8 gave the float logits exactly: was it used?"
PY
}

case "$case_name" in
  shipped_digits_eval)
    run 0 eval --model "$vit" --weights "$vit_w" --data "$data/digits/test.txt" --json
    check_accuracy vit_digits
    ;;
  shipped_keywords_eval)
    run 0 eval --model "$kws" --weights "$kws_w" --data "$data/keywords/test.txt" --json
    check_accuracy conformer_kws
    ;;
  shipped_digits_eval_int8)
    run 0 eval --model "$vit" --weights "$vit_w" --data "$data/digits/test.txt" --json \
      --set inference.quantize=int8
    check_accuracy vit_digits 0.2
    ;;
  shipped_keywords_eval_int8)
    run 0 eval --model "$kws" --weights "$kws_w" --data "$data/keywords/test.txt" --json \
      --set inference.quantize=int8
    check_accuracy conformer_kws 0.5
    ;;
  shipped_int8_logits)
    run 0 preprocess --model "$vit" --out "$out/pixels.safetensors" "$digit"
    run 0 features --model "$kws" --out "$out/features.safetensors" "$word"
    for q in none int8; do
      run 0 forward --model "$vit" --weights "$vit_w" --input "$out/pixels.safetensors" \
        --set inference.quantize=$q --output "$out/vit_$q.safetensors"
      run 0 forward --model "$kws" --weights "$kws_w" --input "$out/features.safetensors" \
        --set inference.quantize=$q --output "$out/kws_$q.safetensors"
    done
    check_logits "$out/vit_none.safetensors" "$out/vit_int8.safetensors" logits 0.05
    check_logits "$out/kws_none.safetensors" "$out/kws_int8.safetensors" class_logits 0.05
    ;;
  shipped_classify_digit)
    run 0 classify --model "$vit" --weights "$vit_w" --topk 3 "$digit"
    expect stdout '^vit_digits \(.*vit_digits.yaml\), .*vit_digits.safetensors \(timm layout.*\), cpu, fp32$'
    # The most probable class first: the digit 7, confidently.
    sed -n 3p "$out/stdout" >"$out/first"
    expect first '^ +(9[0-9]|100)\.[0-9]{2}% +7  7$'
    lines stdout 5
    ;;
  shipped_classify_keyword)
    # The wav is classified; the PNG is not audio and gets its own error entry: exit status 1.
    run 1 classify --model "$kws" --weights "$kws_w" --topk 3 --json "$word" "$digit"
    lines stdout 2
    expect stderr '^attnzoo classify: 1 of 2 audio files failed$'
    "$py" - "$out/stdout" "$word" "$digit" <<'PY' || exit 1
import json
import sys

first, second = [json.loads(l) for l in open(sys.argv[1])]
assert first["audio"] == sys.argv[2] and "error" not in first, first
assert [p["label"] for p in first["top"]][0] == "stop", first
assert first["top"][0]["index"] == 8 and len(first["top"]) == 3, first
probs = [p["prob"] for p in first["top"]]
assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-9, probs
assert first["ms"] > 0, first
assert second["audio"] == sys.argv[3] and sys.argv[3] in second["error"], second
PY
    ;;
  shipped_classify_keyword_table)
    run 0 classify --model "$kws" --weights "$kws_w" --topk 2 "$word"
    expect stdout '^conformer_kws \(.*conformer_kws.yaml\), .*conformer_kws.safetensors'
    sed -n 3p "$out/stdout" >"$out/first"
    expect first '^ +(9[0-9]|100)\.[0-9]{2}% +8  stop$'
    lines stdout 4
    ;;
  shipped_encode_keyword)
    run 0 encode --model "$kws" --weights "$kws_w" --json --out "$out/encoded.safetensors" "$word"
    "$py" - "$out/stdout" "$out/encoded.safetensors" <<'PY' || exit 1
import json
import sys

import torch
from safetensors.torch import load_file

line = json.loads(open(sys.argv[1]).read())
assert abs(line["seconds"] - 1.0) < 1e-6, line
assert line["feature_frames"] == 98 and line["encoder_frames"] == 23, line  # conv2d4: (98 - 3) // 2 + 1 = 48, then 23
saved = load_file(sys.argv[2])
assert saved["encoded_0"].shape == (23, 96), saved["encoded_0"].shape
# The classification head's logits come with the encoding: "stop" (class 8) wins.
assert saved["logits_0"].shape == (12,) and int(saved["logits_0"].argmax()) == 8, saved["logits_0"]
assert torch.allclose(saved["embedding_0"], saved["encoded_0"].mean(0), atol=1e-6)
PY
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "PASS $case_name"
