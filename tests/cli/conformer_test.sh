#!/usr/bin/env bash
# conformer_test.sh CASE ATTNZOO_BINARY PYTHON REFERENCE_DIR CONFIGS_DATA_DIR: `attnzoo forward`
# on Conformers against torchaudio and ESPnet (reference files from make_conformer_reference.py,
# a CTest fixture), streaming against the chunk-masked forward, and refusals of bad input.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 ref=$4 data=$5
# compare OUTPUT EXPECTED TOLERANCE: every utterance's valid frames of "encoded" (and "logits"
# when EXPECTED has ctc_b) within TOLERANCE of the reference's per-utterance outputs.
compare() {
  "$py" - "$1" "$2" "$3" <<'PY' || exit 1
import sys
from safetensors.torch import load_file

ours, theirs, tolerance = load_file(sys.argv[1]), load_file(sys.argv[2]), float(sys.argv[3])
worst = 0.0
b = 0
while f"single_{b}" in theirs:
    for mine, key in (("encoded", "single"), ("logits", "ctc")):
        if f"{key}_{b}" not in theirs:
            continue
        ref = theirs[f"{key}_{b}"].double()
        if int(ours["lengths"][b]) != ref.shape[1]:
            sys.exit(f"FAIL: utterance {b}: length {int(ours['lengths'][b])}, expected {ref.shape[1]}")
        got = ours[mine][b : b + 1, : ref.shape[1]].double()
        worst = max(worst, (got - ref).abs().max().item())
    b += 1
print(f"max |ours - reference| on valid frames = {worst:.3g} over {b} utterances")
if not worst <= tolerance:
    sys.exit(f"FAIL: differs by {worst:.3g} > {tolerance:g}")
PY
}

case "$case_name" in
  conformer_torchaudio)
    run 0 forward --model "$data/conformer_micro_torchaudio.yaml" \
      --weights "$ref/torchaudio/weights.safetensors" --input "$ref/torchaudio/input.safetensors" \
      --output "$out/o.safetensors"
    expect stdout '^conformer_micro_torchaudio \(.*\), .*weights.safetensors \(torchaudio layout, the config\)$'
    expect stdout '^features \[3, 37, 16\] on cpu in fp32 -> encoded \[3, 37, 16\] -> '
    compare "$out/o.safetensors" "$ref/torchaudio/expected.safetensors" 1e-4
    ;;
  conformer_espnet)
    run 0 forward --model "$data/conformer_micro_espnet.yaml" \
      --weights "$ref/espnet/weights.safetensors" --input "$ref/espnet/input.safetensors" \
      --output "$out/o.safetensors"
    expect stdout '\(espnet layout, the config\)$'
    expect stdout '^features \[3, 37, 20\] on cpu in fp32 -> encoded \[3, 8, 16\], logits \[3, 8, 7\] -> '
    compare "$out/o.safetensors" "$ref/espnet/expected.safetensors" 1e-4
    # The same weights with the layout detected (GlobalMVN's statistics tell ESPnet).
    run 0 forward --model "$data/conformer_micro_espnet.yaml" --set checkpoint.format=attnzoo \
      --format espnet --weights "$ref/espnet/weights.safetensors" \
      --input "$ref/espnet/input.safetensors" --output "$out/o2.safetensors"
    expect stdout '\(espnet layout, --format\)$'
    compare "$out/o2.safetensors" "$ref/espnet/expected.safetensors" 1e-4
    ;;
  conformer_stream)
    yaml=$data/conformer_micro_stream.yaml
    run 0 forward --model "$yaml" --input "$ref/bad/stream.safetensors" --output "$out/mask.safetensors"
    expect stdout '-> encoded \[2, 20, 16\], logits \[2, 20, 7\] \(chunk mask, chunk 4, left chunks 2\)'
    run 0 forward --model "$yaml" --input "$ref/bad/stream.safetensors" --output "$out/s.safetensors" --stream
    expect stdout '\(streamed, chunk 4, left chunks 2\)'
    same "$out/mask.safetensors" "$out/s.safetensors" 1e-5 encoded logits
    # Without the chunk mask the model sees the future: another output.
    run 0 forward --model "$yaml" --set streaming.chunk_size=0 --input "$ref/bad/stream.safetensors" \
      --output "$out/full.safetensors"
    if "$py" - "$out/mask.safetensors" "$out/full.safetensors" <<'PY'; then
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1])["encoded"], load_file(sys.argv[2])["encoded"]
sys.exit(0 if (a - b).abs().max() > 1e-3 else 1)
PY
      :
    else
      echo "FAIL: the chunk mask changed nothing"; exit 1
    fi
    refused 1 '^attnzoo forward: --stream: the config has no streaming.chunk_size \(set one with --set streaming.chunk_size=16\)$' \
      forward --model "$yaml" --set streaming.chunk_size=0 --input "$ref/bad/stream.safetensors" \
      --output "$out/x.safetensors" --stream
    refused 1 '^attnzoo forward: --stream: the streams of a batch advance together; every length must be T = 30$' \
      forward --model "$yaml" --input "$ref/bad/unequal.safetensors" --output "$out/x.safetensors" --stream
    # Reported where streaming is asked for: the chunk size.
    refused 1 "^attnzoo forward: .*conformer_micro_stream.yaml:19:15: streaming.chunk_size: streaming \(chunk_size > 0\) needs architecture.causal_conv: true" \
      forward --model "$yaml" --set architecture.causal_conv=false --input "$ref/bad/stream.safetensors" \
      --output "$out/x.safetensors"
    ;;
  conformer_bad_input)
    yaml=$data/conformer_micro_espnet.yaml
    o=$out/o.safetensors
    refused 1 "^attnzoo forward: .*/short.safetensors: tensor 'features' \[2, 6, 20\]: too short, 6 frames; subsampling conv2d4 needs at least 7$" \
      forward --model "$yaml" --input "$ref/bad/short.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/width.safetensors: tensor 'features' must be \[B, T, 20\] with B >= 1, got \[2, 30, 19\]$" \
      forward --model "$yaml" --input "$ref/bad/width.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/float_lengths.safetensors: tensor 'lengths' must be integral, got Float$" \
      forward --model "$yaml" --input "$ref/bad/float_lengths.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/long_lengths.safetensors: tensor 'lengths' values must lie in \[0, T = 30\], got 20 ... 31$" \
      forward --model "$yaml" --input "$ref/bad/long_lengths.safetensors" --output "$o"
    refused 1 "^attnzoo forward: .*/input.safetensors: no tensor 'features' \(the file has: pixels\)$" \
      forward --model "$yaml" --input "$ref/bad/pixels/input.safetensors" --output "$o"
    refused 1 "^attnzoo forward: unknown ViT checkpoint format 'espnet'" \
      forward --model vit_tiny_patch16_224 --format espnet --weights "$ref/espnet/weights.safetensors" \
      --input "$ref/bad/pixels/input.safetensors" --output "$o"
    refused 1 '^attnzoo forward: --stream: a vit model does not stream$' \
      forward --model vit_tiny_patch16_224 --input "$ref/bad/pixels/input.safetensors" --output "$o" --stream
    # torchaudio weights into the ESPnet model: the strict loader lists what does not fit.
    run 1 forward --model "$yaml" --weights "$ref/torchaudio/weights.safetensors" \
      --input "$ref/espnet/input.safetensors" --output "$o"
    expect stderr "^attnzoo forward: .*torchaudio/weights.safetensors: the weights do not fit the model$"
    not_written "$o"
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
