#!/usr/bin/env bash
# encode_test.sh CASE ATTNZOO_BINARY PYTHON CONFIGS_DATA_DIR EXAMPLES_DIR: `attnzoo encode` on WAV
# files made here: per-file lines and JSON, the safetensors output, streaming against the offline
# chunk mask, error entries for bad files; the README's example program, encode_audio, built
# against an install in EXAMPLES_DIR (tests/install/).
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 data=$4 examples=$5
yaml=$data/conformer_micro_stream.yaml
# Two chirps (1.2 s at 16 kHz, 0.9 s at 8 kHz) and one too short (0.04 s), 16-bit mono WAV.
python3 - "$out" <<'PY'
import math, struct, sys, wave
for name, rate, seconds in (("a.wav", 16000, 1.2), ("b.wav", 8000, 0.9), ("short.wav", 16000, 0.04)):
    n = int(rate * seconds)
    with wave.open(f"{sys.argv[1]}/{name}", "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(9000 * math.sin(2 * math.pi * (220 + 200 * i / n) * i / rate)))
                               for i in range(n)))
PY

case "$case_name" in
  encode_files)
    run 1 encode --model "$yaml" --out "$out/e.safetensors" "$out/a.wav" "$out/missing.wav" \
      "$out/b.wav" "$out/short.wav"
    expect stdout '^conformer_micro_stream \(.*\), random weights \(seed 0\), cpu, fp32$'
    expect stdout "^$out/a.wav: 1.20 s, 118 feature frames -> 28 x 16 encoded, [0-9.]+ ms, RTF [0-9.]+$"
    expect stdout "^$out/b.wav: 0.90 s, 88 feature frames -> 21 x 16 encoded, "
    expect stdout "^$out/missing.wav: error: .*missing.wav"
    expect stdout "^$out/short.wav: error: .*short.wav: too short: 0.040 s gives 2 feature frames; conformer_micro_stream needs at least 7"
    expect stderr '^attnzoo encode: 2 of 4 files failed$'
    "$py" - "$out/e.safetensors" <<'PY' || exit 1
import sys
from safetensors.torch import load_file
t = load_file(sys.argv[1])
assert sorted(t) == ["embedding_0", "embedding_2", "encoded_0", "encoded_2", "log_probs_0",
                     "log_probs_2"], sorted(t)
assert list(t["encoded_0"].shape) == [28, 16] and list(t["log_probs_2"].shape) == [21, 7]
assert (t["embedding_0"] - t["encoded_0"].mean(0)).abs().max() < 1e-6
print("encode output ok")
PY
    # Batched (the default, 8 per pass: a.wav and b.wav together) equals one file per pass.
    run 1 encode --model "$yaml" --batch-size 1 --out "$out/one.safetensors" "$out/a.wav" \
      "$out/missing.wav" "$out/b.wav" "$out/short.wav"
    same "$out/e.safetensors" "$out/one.safetensors" 1e-5
    run 2 encode --model "$yaml" --batch-size 0 "$out/a.wav"
    expect stderr '--batch-size'
    ;;
  encode_example)
    # tools/examples/encode_audio, the README's example: the shapes the CLI reports.
    run 0 encode --model "$yaml" --json "$out/a.wav"
    expect stdout '"encoder_frames":28'
    example=$examples/encode_audio
    "$example" "$yaml" - "$out/a.wav" >"$out/example" 2>&1 || { cat "$out/example"; exit 1; }
    grep -Eq "^$out/a.wav: 1.20 s -> 28 x 16 encoded frames every 40 ms" "$out/example" ||
      { echo "FAIL: example output"; cat "$out/example"; exit 1; }
    grep -Eq "^  streamed in chunks of 4: 28 frames, max difference [0-9.e-]+$" "$out/example" ||
      { echo "FAIL: example stream"; cat "$out/example"; exit 1; }
    "$example" "$yaml" - "$out/missing.wav" >/dev/null 2>&1 && { echo "FAIL: missing file not reported"; exit 1; }
    ;;
  encode_stream)
    # Chunk by chunk through the caches equals the config's chunk-masked offline forward.
    run 0 encode --model "$yaml" --json --out "$out/offline.safetensors" "$out/a.wav"
    lines stdout 1
    expect stdout '"encoder_frames":28'
    expect stdout '"rtf":'
    run 0 encode --model "$yaml" --stream --out "$out/stream.safetensors" "$out/a.wav"
    expect stdout 'streaming in chunks of 4 encoder frames$'
    run 0 encode --model "$yaml" --stream --chunk-ms 80 --out "$out/s80.safetensors" "$out/a.wav"
    expect stdout 'streaming in chunks of 2 encoder frames$'
    same "$out/offline.safetensors" "$out/stream.safetensors" 1e-5 encoded_0
    ;;
  encode_bad)
    run 1 encode --model vit_tiny_patch16_224 "$out/a.wav"
    expect stderr 'is a vit model, which takes images; a speech encoder needs audio$'
    run 1 encode --model conformer_torchaudio_base "$out/a.wav"
    expect stderr 'has no features section'
    run 1 encode --model "$yaml" --stream --set streaming.chunk_size=0 "$out/a.wav"
    expect stderr '^attnzoo encode: --stream: give --chunk-ms or a config with streaming.chunk_size$'
    run 2 encode --model "$yaml"
    run 2 encode --model "$yaml" --format timm "$out/a.wav"
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
