#!/usr/bin/env bash
# classify_test.sh CASE ATTNZOO_BINARY PYTHON REFERENCE_DIR CONFIG_YAML EXAMPLES_DIR: `attnzoo
# classify` on the images and timm weights of tests/api/make_classifier_reference.py (a CTest
# fixture): the table, JSON lines checked against timm's probabilities, error entries for bad
# images, bad flags; the README's example program, classify_image, built against an install in
# EXAMPLES_DIR (tests/install/).
set -u
case_name=$1
bin=$2
py=$3
ref=$4
yaml=$5
examples=$6
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
w=$ref/weights.safetensors

case "$case_name" in
  classify_table)
    run 0 classify --model "$yaml" --weights "$w" --topk 3 "$ref/a.png" "$ref/b.jpg"
    expect stdout '^vit_micro_classifier \(.*vit_micro_classifier.yaml\), .*weights.safetensors \(timm layout\), cpu, fp32$'
    expect stdout "^$ref/a.png \([0-9.]+ ms\)$"
    expect stdout "^$ref/b.jpg \([0-9.]+ ms\)$"
    expect stdout '^ +[0-9]+\.[0-9]{2}% +[0-6]  (red|green|blue|cyan|magenta|yellow|grey cat)$'
    lines stdout 9
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
    expect stderr '^attnzoo classify: ImageClassifier: .*conformer_s.yaml is a conformer model; an image classifier needs family vit$'
    run 1 classify --model "$yaml" --set architecture.num_classes=5 "$ref/a.png"
    expect stderr 'micro_labels.txt: 7 labels for a model of 5 classes$'
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
