#!/usr/bin/env bash
# forward_test.sh CASE ATTNZOO_BINARY PYTHON REFERENCE_DIR CONFIG_YAML: `attnzoo forward` against
# timm (reference files from make_forward_reference.py, a CTest fixture) and its refusals of bad
# input; `attnzoo models` on the zoo.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 ref=$4 yaml=$5
compare() { # compare OUTPUT TENSOR TOLERANCE: OUTPUT holds only TENSOR, within TOLERANCE of timm's
  "$py" - "$1" "$ref/expected.safetensors" "$2" "$3" <<'EOF' || exit 1
import sys
from safetensors.torch import load_file

path, reference, name, tolerance = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ours, theirs = load_file(path), load_file(reference)
if list(ours) != [name]:
    sys.exit(f"FAIL: {path} holds {list(ours)}, expected ['{name}']")
x, y = ours[name].double(), theirs[name].double()
if x.shape != y.shape:
    sys.exit(f"FAIL: {name} {tuple(x.shape)}, timm {tuple(y.shape)}")
diff = (x - y).abs().max().item()
print(f"max |{name} - timm| = {diff:.3g} (tolerance {tolerance:g})")
if not diff <= tolerance:
    sys.exit(f"FAIL: {name} differs from timm's by {diff:.3g}")
EOF
}

weights=$ref/weights.safetensors
input=$ref/input.safetensors

case "$case_name" in
  forward_timm)
    run 0 forward --model "$yaml" --weights "$weights" --input "$input" --output "$out/o.safetensors"
    expect stdout "^vit_micro_test \(.*vit_micro_test.yaml\), .*weights.safetensors \(timm layout, the config\)$"
    expect stdout '^pixels \[2, 3, 32, 32\] on cpu in fp32 -> logits \[2, 7\] -> '
    compare "$out/o.safetensors" logits 1e-4
    # The layout named on the command line; an override that changes nothing in the weights.
    run 0 forward --model "$yaml" --weights "$weights" --format timm --set attention.backend=sdpa \
      --input "$input" --output "$out/o2.safetensors"
    expect stdout '\(timm layout, --format\)'
    compare "$out/o2.safetensors" logits 1e-4
    ;;
  forward_features)
    # No classifier: the pooled, normalised features (timm's forward_head(pre_logits=True)).
    run 0 forward --model "$yaml" --set architecture.num_classes=0 \
      --weights "$ref/weights_nohead.safetensors" --input "$input" --output "$out/f.safetensors"
    expect stdout '-> features \[2, 48\] -> '
    compare "$out/f.safetensors" features 1e-4
    ;;
  forward_bf16)
    run 0 forward --model "$yaml" --weights "$weights" --input "$input" --output "$out/b.safetensors" \
      --dtype bf16
    expect stdout ' in bf16 -> logits \[2, 7\]'
    # bfloat16 keeps 8 bits of mantissa: close to timm's float32 logits, not equal.
    compare "$out/b.safetensors" logits 0.05
    ;;
  forward_zoo_name)
    # A registered name, random weights (seed 0): the same numbers twice.
    run 0 forward --model vit_tiny_patch16_224 --input "$ref/input_224.safetensors" \
      --output "$out/z1.safetensors"
    expect stdout '^vit_tiny_patch16_224 \(.*/vit/vit_tiny_patch16_224.yaml\), random weights \(seed 0\)$'
    expect stdout '-> logits \[1, 1000\] -> '
    run 0 forward --model vit_tiny_patch16_224 --input "$ref/input_224.safetensors" \
      --output "$out/z2.safetensors"
    cmp -s "$out/z1.safetensors" "$out/z2.safetensors" || { echo "FAIL: two runs differ"; exit 1; }
    ;;
  forward_bad_input)
    o=$out/o.safetensors
    refused 1 "^attnzoo forward: .*/no_pixels.safetensors: no tensor 'pixels' \(the file has: images\)$" \
      forward --model "$yaml" --input "$ref/no_pixels.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/rank3.safetensors: tensor 'pixels' must be \[B, 3, H, W\] with B >= 1, got \[3, 32, 32\]$" \
      forward --model "$yaml" --input "$ref/rank3.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/channels.safetensors: tensor 'pixels' must be \[B, 3, H, W\] with B >= 1, got \[2, 1, 32, 32\]$" \
      forward --model "$yaml" --input "$ref/channels.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/int_pixels.safetensors: tensor 'pixels' must be floating point, got Long$" \
      forward --model "$yaml" --input "$ref/int_pixels.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/missing.safetensors: no such file$" \
      forward --model "$yaml" --input "$ref/missing.safetensors" --output "$o"
    # The patch size of the model: 36 is not a multiple of 8.
    refused 1 "^attnzoo forward: .*/input.safetensors: tensor 'pixels' \[2, 3, 32, 32\]: H and W must be positive multiples of the patch size 12$" \
      forward --model "$yaml" --set architecture.patch_size=12 --set architecture.img_size=36 \
      --set preprocess.input_size=[3,36,36] --input "$input" --output "$o"
    not_written "$o"
    ;;
  forward_bad_model)
    o=$out/o.safetensors
    refused 1 "^attnzoo forward: unknown model 'vit_nope'; the zoo \\(.*share/attnzoo\\) has: ast_audioset, conformer_digits_ctc, conformer_kws, conformer_l, .*, vit_digits, " \
      forward --model vit_nope --input "$input" --output "$o"
    refused 1 "^attnzoo forward: .*/nope.yaml: no such config file$" \
      forward --model "$out/nope.yaml" --input "$input" --output "$o"
    refused 1 "^attnzoo forward: .*vit_micro_test.yaml: override 'architecture.depth=0': architecture.depth: expected an integer in \[1, 1000\], got '0'$" \
      forward --model "$yaml" --set architecture.depth=0 --input "$input" --output "$o"
    refused 1 "^attnzoo forward: .*vit_micro_test.yaml: override 'architecture.dept=3': architecture.dept: unknown key 'dept'" \
      forward --model "$yaml" --set architecture.dept=3 --input "$input" --output "$o"
    ;;
  forward_bad_weights)
    o=$out/o.safetensors
    refused 1 "^attnzoo forward: .*/missing.safetensors: no such file$" \
      forward --model "$yaml" --weights "$ref/missing.safetensors" --input "$input" --output "$o"
    # Strict loading: every mis-shaped tensor listed (one per line after the first).
    run 1 forward --model "$yaml" --set architecture.num_classes=6 --weights "$weights" \
      --input "$input" --output "$o"
    expect stderr "^attnzoo forward: .*/weights.safetensors: the weights do not fit the model$"
    expect stderr '^    head.weight \(checkpoint \[7, 48\], model \[6, 48\]\)$'
    expect stderr '^    head.bias '
    run 1 forward --model "$yaml" --set architecture.num_classes=0 --weights "$weights" \
      --input "$input" --output "$o"
    expect stderr '^  unexpected \(2\):$'
    not_written "$o"
    ;;
  forward_bad_flags)
    o=$out/o.safetensors
    if "$bin" version | grep -q 'CUDA devices: none'; then
      refused 1 '^attnzoo forward: --device cuda: no CUDA device is available to this process$' \
        forward --model "$yaml" --input "$input" --output "$o" --device cuda
    fi
    refused 2 '^attnzoo: .*--dtype' forward --model "$yaml" --input "$input" --output "$o" --dtype fp64
    refused 2 '^attnzoo: .*--format' forward --model "$yaml" --input "$input" --output "$o" --format onnx
    refused 2 '^attnzoo: .*--input' forward --model "$yaml" --output "$o"
    ;;
  models_list)
    run 0 models
    for name in vit_tiny_patch16_224 vit_small_patch16_224 vit_base_patch16_224 \
      vit_large_patch16_224 vit_base_patch16_384 vit_base_patch32_224 vit_huge_patch14_224 \
      deit_tiny_patch16_224 deit_small_patch16_224 deit_base_patch16_224; do
      expect stdout "^$name +vit +[0-9]+ +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +3x[0-9]+x[0-9]+ image$"
    done
    expect stdout '^vit_base_patch16_224 +vit +86567656 +86\.57 +35\.13 +3x224x224 image$'
    expect stdout '^vit_base_patch16_384 +vit +86859496 +86\.86 +[0-9.]+ +3x384x384 image$'
    for name in conformer_s conformer_m conformer_l wenet_conformer_librispeech \
      wenet_u2pp_conformer_librispeech; do
      expect stdout "^$name +conformer +[0-9]+ +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +1 s audio \(10 s utterance\)$"
    done
    # torchaudio's and ESPnet's own counts (tests/configs/test_conformer_zoo.cpp checks them).
    expect stdout '^conformer_torchaudio_base +conformer +24367104 +24\.37 +[0-9.]+ +100 input frames \(of 1000\)$'
    expect stdout '^espnet_conformer_librispeech +conformer +85796744 +85\.80 +'
    # No features section (NeMo's own log-mel): the cost is per 100 input frames.
    expect stdout '^fastconformer_large +conformer +[0-9]+ +[0-9.]+ +[0-9.]+ +100 input frames \(of 1000\)$'
    expect stdout '^# GFLOPs: 2 x multiply-accumulates of matrix products and convolutions'
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
