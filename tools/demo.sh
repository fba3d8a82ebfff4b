#!/usr/bin/env bash
# Sets everything up (tools/setup.sh) and runs the main job on what the repository ships: the three
# trained models of the zoo. vit_digits classifies a handwritten digit (assets/samples/
# digit_7.png, from the test split of opencv-doc's digits.png); conformer_kws classifies a spoken
# keyword synthesized with a voice it never heard in training (assets/samples/keyword_stop.wav),
# and `attnzoo encode` encodes the same clip; conformer_digits_ctc transcribes spoken digits by a
# voice it never heard (assets/samples/digits_417.wav), offline with each word's times, and live
# in chunks of 640 ms with its partial results. Then the attention layer's self-checking demo,
# which writes its per-head attention maps as a PNG.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Only what the demo runs: the CLI and its libraries. The test binaries build, and the shipped
# models' test sets are made, when tools/test.sh (or a plain tools/setup.sh) runs.
"$ROOT/tools/setup.sh" --target attnzoo --no-data
az="$ROOT/build/bin/attnzoo"
cd "$ROOT"
"$az" version
echo
echo "== attnzoo classify: a handwritten digit (vit_digits) =="
"$az" classify --model configs/vit/vit_digits.yaml \
  --weights assets/weights/vit_digits.safetensors --topk 3 assets/samples/digit_7.png
echo
echo "== attnzoo classify: a spoken keyword (conformer_kws) =="
"$az" classify --model configs/conformer/conformer_kws.yaml \
  --weights assets/weights/conformer_kws.safetensors --topk 3 assets/samples/keyword_stop.wav
echo
echo "== attnzoo encode: the same clip through the Conformer encoder =="
"$az" encode --model configs/conformer/conformer_kws.yaml \
  --weights assets/weights/conformer_kws.safetensors assets/samples/keyword_stop.wav
echo
echo "== attnzoo transcribe: spoken digits (conformer_digits_ctc), offline, then live =="
"$az" transcribe --model configs/conformer/conformer_digits_ctc.yaml \
  --weights assets/weights/conformer_digits_ctc.safetensors --times assets/samples/digits_417.wav
"$az" transcribe --model configs/conformer/conformer_digits_ctc.yaml \
  --weights assets/weights/conformer_digits_ctc.safetensors --live --chunk 16 \
  assets/samples/digits_417.wav
echo
echo "== attnzoo demo: the attention layer's backends checked against each other =="
"$az" demo --png "$ROOT/build/attention_demo.png"
