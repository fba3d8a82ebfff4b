#!/usr/bin/env bash
# attention_map_test.sh CASE ATTNZOO_BINARY PYTHON CONFIGS_DATA_DIR: `attnzoo attention-map` on a
# PNG and WAV files made here, with the small ViT and Conformer configs of tests/configs/data and
# random weights: the PNG's signature, size (from the layout rules of command_attention_map.cpp)
# and content (tiles that differ where the maps differ), and the refusals of bad input.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 data=$4
vit=$data/vit_micro_test.yaml
conformer=$data/conformer_micro_stream.yaml
# A 40 x 48 RGB PNG (gradients and a bright square), written with zlib alone; a chirp of 1.2 s and
# one of 0.04 s (too short for the subsampling), 16-bit mono WAV at 16 kHz; a PNG that is not one.
python3 - "$out" <<'PY'
import math, struct, sys, wave, zlib
d = sys.argv[1]
w, h = 48, 40
rows = b""
for y in range(h):
    row = b"\x00"
    for x in range(w):
        bright = 12 <= x < 24 and 10 <= y < 22
        row += bytes((255, 255, 255) if bright else (x * 5, y * 6, 128))
    rows += row
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
open(f"{d}/image.png", "wb").write(png)
open(f"{d}/bad.png", "wb").write(b"\x89PNG\r\n\x1a\nnot really a png")
for name, seconds in (("a.wav", 1.2), ("short.wav", 0.04)):
    n = int(16000 * seconds)
    with wave.open(f"{d}/{name}", "wb") as f:
        f.setnchannels(1); f.setsampwidth(2); f.setframerate(16000)
        f.writeframes(b"".join(struct.pack("<h", int(9000 * math.sin(2 * math.pi * (220 + 400 * i / n) * i / 16000)))
                               for i in range(n)))
PY

# check_png FILE WIDTH HEIGHT: a PNG (signature, IHDR) of that size, and the size the command printed.
check_png() {
  python3 - "$1" "$2" "$3" <<'PY' || exit 1
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
assert data[12:16] == b"IHDR", "no IHDR chunk first"
w, h = struct.unpack(">II", data[16:24])
assert (w, h) == (int(sys.argv[2]), int(sys.argv[3])), f"{w} x {h}, expected {sys.argv[2]} x {sys.argv[3]}"
PY
  expect stdout "-> $1 \($2 x $3\)$"
}

# ViT layout: tiles are the 32 x 32 preprocessed image scaled by 5 (to >= 160 px); the input, one
# per head (3) and the rollout: 5 tiles, 4 per row. Width 4·160 + 5·8 gaps = 680; height: title 28
# + 2 rows × (label 22 + 160 + gap 8) + gap 8 = 416.
# check_vit_tiles PNG: the head tiles and the rollout differ from the input and from each other
# (each overlays its own map), and none is blank.
check_vit_tiles() {
  "$py" - "$1" <<'PY' || exit 1
import sys
import numpy as np
from PIL import Image
a = np.asarray(Image.open(sys.argv[1]).convert("RGB")).astype(np.int32)
def tile(i):
    x = 8 + (i % 4) * 168
    y = 28 + (i // 4) * 190 + 22
    return a[y:y + 160, x:x + 160]
tiles = [tile(i) for i in range(5)]
for i, t in enumerate(tiles):
    assert t.std() > 5, f"tile {i} is flat"
for i in range(5):
    for j in range(i + 1, 5):
        assert np.abs(tiles[i] - tiles[j]).mean() > 1, f"tiles {i} and {j} are the same"
assert (a[:28] != 255).any(), "no title"
print("tiles ok")
PY
}

case "$case_name" in
  attention_map_vit)
    # vit_micro_test pools by the mean (global_pool avg): the mean attention of all tokens.
    run 0 attention-map --model "$vit" "$out/image.png" --out "$out/vit.png"
    expect stdout '^vit_micro_test \(.*\), random weights \(seed 0\)$'
    expect stdout "image.png: 32 x 32 pixels, 4 x 4 patches; layer 1 of 2, 3 heads, mean attention of all tokens"
    check_png "$out/vit.png" 680 416
    check_vit_tiles "$out/vit.png"
    # --layer 0 and --layer -2 are the same layer: the same picture.
    run 0 attention-map --model "$vit" --layer 0 "$out/image.png" --out "$out/l0.png"
    expect stdout "layer 0 of 2"
    run 0 attention-map --model "$vit" --layer -2 "$out/image.png" --out "$out/m2.png"
    cmp -s "$out/l0.png" "$out/m2.png" || { echo "FAIL: --layer 0 and --layer -2 differ"; exit 1; }
    cmp -s "$out/l0.png" "$out/vit.png" && { echo "FAIL: layers 0 and 1 give the same map"; exit 1; }
    ;;
  attention_map_cls)
    # With the class token pooling, its row of the attention; weights from a checkpoint file.
    "$py" - "$out/w.safetensors" "$vit" <<'PY' || exit 1
import sys, torch, yaml
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer
architecture = dict(yaml.safe_load(open(sys.argv[2]))["architecture"], global_pool="token")
torch.manual_seed(1)
model = VisionTransformer(**architecture)
with torch.no_grad():
    for p in model.parameters():
        p.add_(torch.randn_like(p) * 0.2)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, sys.argv[1])
PY
    run 0 attention-map --model "$vit" --set architecture.global_pool=token \
      --weights "$out/w.safetensors" "$out/image.png" --out "$out/cls.png"
    expect stdout "w.safetensors \(timm layout\)$"
    expect stdout "CLS token's attention -> "
    check_png "$out/cls.png" 680 416
    check_vit_tiles "$out/cls.png"
    ;;
  attention_map_conformer)
    # 1.2 s: 118 fbank frames of 20 bins -> 28 encoder frames (conv2d4). Width: labels 90 + 28
    # frames × 23 px (the whole number making >= 640) + gap 8 = 742; height: title 28 + log-mel
    # 80 (2 px per bin, at least 80) + gap 8 + 4 heads × 24 + gap 8 = 220.
    run 0 attention-map --model "$conformer" "$out/a.wav" --out "$out/conformer.png"
    expect stdout "a.wav: 118 x 20 features -> 28 encoder frames; layer 1 of 2, 4 heads"
    check_png "$out/conformer.png" 742 220
    "$py" - "$out/conformer.png" <<'PY' || exit 1
import sys
import numpy as np
from PIL import Image
a = np.asarray(Image.open(sys.argv[1]).convert("RGB")).astype(np.int32)
mel = a[28:108, 90:734]
rows = [a[116 + 24 * h:140 + 24 * h, 90:734] for h in range(4)]
assert mel.std() > 5, "flat features"
for h, r in enumerate(rows):
    # One colour per encoder frame (23 px wide), constant down the row, varying along time.
    assert (r == r[:1]).all(), f"head {h}: not one row"
    assert r[0].std() > 5, f"head {h}: flat over time"
assert any(np.abs(rows[0] - r).mean() > 1 for r in rows[1:]), "all heads the same"
print("conformer map ok")
PY
    ;;
  attention_map_bad)
    refused 1 'missing.png: no such file' attention-map --model "$vit" "$out/missing.png" \
      --out "$out/x.png"
    refused 1 '--layer 2: out of range, the model has 2 layers \(0 to 1, or -1 for the last\)' \
      attention-map --model "$vit" --layer 2 "$out/image.png" --out "$out/x.png"
    refused 1 '--layer -3: out of range' attention-map --model "$conformer" --layer -3 \
      "$out/a.wav" --out "$out/x.png"
    refused 1 'a.wav: an audio file, but vit_micro_test is a vit model, which takes images' \
      attention-map --model "$vit" "$out/a.wav" --out "$out/x.png"
    refused 1 'image.png: an image, but conformer_micro_stream is a conformer model, which takes audio' \
      attention-map --model "$conformer" "$out/image.png" --out "$out/x.png"
    refused 1 'bad.png' attention-map --model "$vit" "$out/bad.png" --out "$out/x.png"
    refused 1 'short.wav: too short' attention-map --model "$conformer" "$out/short.wav" \
      --out "$out/x.png"
    refused 1 'nothing.safetensors' attention-map --model "$vit" --weights "$out/nothing.safetensors" \
      "$out/image.png" --out "$out/x.png"
    refused 1 '--out .*x.jpg: must name a .png file' attention-map --model "$vit" "$out/image.png" \
      --out "$out/x.jpg"
    refused 1 '--out .*no/such/dir/x.png: cannot write \(No such file' attention-map --model "$vit" \
      "$out/image.png" --out "$out/no/such/dir/x.png"
    refused 1 'no_such_model' attention-map --model no_such_model "$out/image.png" --out "$out/x.png"
    refused 2 '--out' attention-map --model "$vit" "$out/image.png"
    refused 2 '--layer' attention-map --model "$vit" --layer one "$out/image.png" --out "$out/x.png"
    not_written "$out/x.png"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "ok: $case_name"
