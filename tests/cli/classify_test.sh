#!/usr/bin/env bash
# classify_test.sh CASE ATTNZOO_BINARY PYTHON REFERENCE_DIR CONFIG_YAML EXAMPLES_DIR: `attnzoo
# classify` on the images and timm weights of tests/api/make_classifier_reference.py (a CTest
# fixture): the table, JSON lines checked against timm's probabilities, error entries for bad
# images, bad flags; the README's example program, classify_image, built against an install in
# EXAMPLES_DIR (tests/install/).
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 ref=$4 yaml=$5 examples=$6
w=$ref/weights.safetensors

case "$case_name" in
  classify_table)
    run 0 classify --model "$yaml" --weights "$w" --topk 3 "$ref/a.png" "$ref/b.jpg"
    expect stdout '^vit_micro_classifier \(.*vit_micro_classifier.yaml\), .*weights.safetensors \(timm layout\), cpu, fp32$'
    expect stdout "^$ref/a.png \([0-9.]+ ms\)$"
    expect stdout "^$ref/b.jpg \([0-9.]+ ms\)$"
    expect stdout '^ +[0-9]+\.[0-9]{2}% +[0-6]  (red|green|blue|cyan|magenta|yellow|grey cat)$'
    lines stdout 9
    # --dtype auto: bf16 where the kernel lists avx512_bf16 or amx_bf16 for this CPU, else fp32;
    # the config's inference.dtype where no --dtype is given.
    auto=fp32
    grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && auto=bf16
    run 0 classify --model "$yaml" --weights "$w" --topk 1 --dtype auto "$ref/a.png"
    expect stdout "^vit_micro_classifier .*, cpu, $auto\$"
    run 0 classify --model "$yaml" --weights "$w" --topk 1 --set inference.dtype=bf16 "$ref/a.png"
    expect stdout '^vit_micro_classifier .*, cpu, bf16$'
    run 0 classify --model "$yaml" --weights "$w" --topk 1 --set inference.dtype=bf16 \
      --dtype fp32 "$ref/a.png"
    expect stdout '^vit_micro_classifier .*, cpu, fp32$'
    ;;
  classify_json)
    # Bad images get an error entry, the others are classified; exit status 1.
    run 1 classify --model "$yaml" --weights "$w" --json --batch 2 --topk 7 "$ref/a.png" \
      "$ref/missing.png" "$ref/c.png" "$ref/not_an_image.png" "$ref/d.png"
    lines stdout 5
    expect stderr '^attnzoo classify: 2 of 5 images failed$'
    "$py" - "$out/stdout" "$ref/probabilities.safetensors" "$ref" <<'PY' || exit 1
import json
import sys
from safetensors.torch import load_file

lines = [json.loads(l) for l in open(sys.argv[1])]
timm, ref = load_file(sys.argv[2]), sys.argv[3]
assert [l["image"] for l in lines] == [f"{ref}/{n}" for n in
        ["a.png", "missing.png", "c.png", "not_an_image.png", "d.png"]], lines
for line, name in zip(lines, ["a.png", None, "c.png", None, "d.png"]):
    if name is None:
        assert set(line) == {"image", "error"} and line["image"] in line["error"], line
        continue
    assert set(line) == {"image", "top", "ms"} and line["ms"] >= 0, line
    probs = timm[name]
    assert len(line["top"]) == 7
    for entry in line["top"]:
        assert abs(entry["prob"] - probs[entry["index"]].item()) < 2e-3, (name, entry)
    assert [e["index"] for e in line["top"]] == probs.argsort(descending=True).tolist(), name
print("json lines match timm's probabilities")
PY
    ;;
  classify_bad)
    run 2 classify --model "$yaml" --topk 0 "$ref/a.png"
    expect stderr '--topk'
    run 2 classify --model "$yaml" --dtype fp64 "$ref/a.png"
    expect stderr '--dtype'
    run 2 classify --model "$yaml"
    expect stderr 'inputs is required'
    run 1 classify --model conformer_s "$ref/a.png"
    expect stderr '^attnzoo classify: ImageClassifier: .*conformer_s.yaml is a conformer model, which takes audio; an image classifier needs images$'
    run 1 classify --model "$yaml" --set architecture.num_classes=5 "$ref/a.png"
    expect stderr 'micro_labels.txt: 7 labels for a model of 5 classes$'
    ;;
  classify_ast)
    # The Audio Spectrogram Transformer on a WAV (tests/api/make_ast_reference.py's random model
    # and clip): the probabilities transformers gives from ASTFeatureExtractor's features.
    ast=$(dirname "$yaml")/ast_micro.yaml
    "$py" - "$ref/ast_features.io.safetensors" "$out/clip.wav" <<'PY' || exit 1
import sys
import wave
from safetensors.torch import load_file
samples = load_file(sys.argv[1])["waveform"]
pcm = (samples * 32767).round().clamp(-32768, 32767).short()
with wave.open(sys.argv[2], "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(pcm.numpy().tobytes())
PY
    run 0 classify --model "$ast" --weights "$ref/ast.weights.safetensors" --json --topk 5 \
      "$out/clip.wav"
    "$py" - "$out/stdout" "$ref" "$out/clip.wav" <<'PY' || exit 1
import json
import sys
import wave
import numpy as np
import torch
from safetensors.torch import load_file
from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification
line = json.loads(open(sys.argv[1]).read())
with wave.open(sys.argv[3]) as w:
    samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
config = ASTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=96, patch_size=16, frequency_stride=10, time_stride=10,
                   max_length=64, num_mel_bins=32, num_labels=5)
model = ASTForAudioClassification(config).eval()
model.load_state_dict(load_file(sys.argv[2] + "/ast.weights.safetensors"))
extractor = ASTFeatureExtractor(num_mel_bins=32, max_length=64)
features = extractor(samples, sampling_rate=16000, return_tensors="pt").input_values
with torch.no_grad():
    probs = model(input_values=features).logits.softmax(-1)[0]
assert [e["index"] for e in line["top"]] == probs.argsort(descending=True).tolist(), line
for entry in line["top"]:
    assert abs(entry["prob"] - probs[entry["index"]].item()) < 1e-4, entry
print("classify on a WAV matches transformers' AST")
PY
    ;;
  classify_example)
    # tools/examples/classify_image, the README's example: the same classes as the CLI.
    example=$examples/classify_image
    "$example" "$yaml" "$w" "$ref/a.png" >"$out/example" 2>&1 || { cat "$out/example"; exit 1; }
    run 0 classify --model "$yaml" --weights "$w" --topk 5 "$ref/a.png"
    diff <(sed -n '2,6s/^ *[0-9.]*% *//p' "$out/example") \
      <(sed -n '3,7s/^ *[0-9.]*% *[0-9]*  //p' "$out/stdout") || { echo "FAIL: example differs"; exit 1; }
    [ "$(grep -c '%' "$out/example")" -eq 5 ] || { echo "FAIL: no 5 classes"; cat "$out/example"; exit 1; }
    "$example" "$yaml" >/dev/null 2>&1 && { echo "FAIL: usage error not reported"; exit 1; }
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
