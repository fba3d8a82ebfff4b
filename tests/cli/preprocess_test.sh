#!/usr/bin/env bash
# preprocess_test.sh CASE ATTNZOO_BINARY PYTHON REFERENCE_DIR MICRO_YAML: `attnzoo preprocess`
# against timm's eval transform (images and reference tensors written by
# tests/preprocess/make_preprocess_reference.py, a CTest fixture) and its refusals of bad input.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"
py=$3 ref=$4 yaml=$5
compare() { # compare OUTPUT REFERENCE NAME...: 'pixels' [i] against REFERENCE[NAME_i], mean <= 1/255
  "$py" - "$@" <<'EOF' || exit 1
import sys
from safetensors.torch import load_file

path, reference, names = sys.argv[1], sys.argv[2], sys.argv[3:]
ours, theirs = load_file(path), load_file(reference)
if list(ours) != ["pixels"]:
    sys.exit(f"FAIL: {path} holds {list(ours)}, expected ['pixels']")
pixels = ours["pixels"]
if pixels.shape[0] != len(names):
    sys.exit(f"FAIL: pixels {tuple(pixels.shape)} for {len(names)} images")
for i, name in enumerate(names):
    x, y = pixels[i].double(), theirs[name].double()
    if x.shape != y.shape:
        sys.exit(f"FAIL: {name}: {tuple(x.shape)}, timm {tuple(y.shape)}")
    d = (x - y).abs()
    print(f"{name}: max |pixels - timm| = {d.max().item() * 255:.3f}/255, mean {d.mean().item() * 255:.4f}/255")
    if not d.mean().item() <= 1 / 255:
        sys.exit(f"FAIL: {name} differs from timm's by a mean of {d.mean().item():.3g}")
EOF
}
shape() { # shape OUTPUT SHAPE: 'pixels' has SHAPE, e.g. 2,3,32,32
  "$py" -c "import sys; from safetensors.torch import load_file; \
s = ','.join(map(str, load_file(sys.argv[1])['pixels'].shape)); \
sys.exit(0 if s == sys.argv[2] else f'FAIL: pixels {s}, expected {sys.argv[2]}')" "$1" "$2" || exit 1
}

img=$ref/images
o=$out/pixels.safetensors
case "$case_name" in
  preprocess_zoo)
    # A registered name: timm's vit_base_patch16_224 preprocessing (bicubic, crop_pct 0.9).
    names=(png_37x53 jpeg_333x517 webp_lossy_211x300 exif_orientation_6)
    files=("$img/png_37x53.png" "$img/jpeg_333x517.jpg" "$img/webp_lossy_211x300.webp" "$img/exif_orientation_6.jpg")
    if [ -f "$img/baboon.jpg" ]; then
      names+=(baboon fruits)
      files+=("$img/baboon.jpg" "$img/fruits.jpg")
    fi
    run 0 preprocess --model vit_base_patch16_224 "${files[@]}" --out "$o"
    expect stdout "^.*/png_37x53.png: 53x37 -> resized 355x248 -> crop 224x224 at \(66, 12\)$"
    expect stdout "^.*/exif_orientation_6.jpg: 40x64 -> resized 248x396 -> crop 224x224 at \(12, 86\)$"
    expect stdout "^vit_base_patch16_224 \(.*vit_base_patch16_224.yaml\): bicubic antialiased resize \(crop_pct 0.9\), centre crop 224x224, mean \[0.5, 0.5, 0.5\], std \[0.5, 0.5, 0.5\]$"
    expect stdout "^pixels \[${#names[@]}, 3, 224, 224\] -> .*pixels.safetensors$"
    compare "$o" "$ref/timm_vit_base.safetensors" "${names[@]}"
    ;;
  preprocess_yaml)
    # A YAML file, and --set before the images (one value per --set).
    run 0 preprocess --model "$yaml" --set preprocess.interpolation=bicubic \
      "$img/png_wide_97x1000.png" "$img/one_pixel_png.png" "$img/png_2x3.png" --out "$o"
    expect stdout '^pixels \[3, 3, 32, 32\] -> '
    compare "$o" "$ref/timm_micro.safetensors" png_wide_97x1000 one_pixel_png png_2x3
    run 0 preprocess --model "$yaml" --set preprocess.input_size=[3,48,64] \
      --set preprocess.crop_pct=1.0 "$img/gray_png_90x120.png" --out "$o"
    expect stdout 'gray_png_90x120.png: 120x90 -> resized 64x48 -> crop 64x48 at \(0, 0\)$'
    shape "$o" 1,3,48,64
    ;;
  preprocess_bad_input)
    good=$img/png_37x53.png
    for bad in missing.jpg empty.jpg text.jpg truncated.jpg truncated.png huge_header.png; do
      case $bad in
        missing.jpg) why='no such file' ;;
        empty.jpg) why='empty file \(0 bytes\)' ;;
        text.jpg) why='not an image in a supported format \(JPEG, PNG, WebP, BMP, TIFF\); it starts with 54 68 69 73 20 69 73 20' ;;
        truncated.jpg) why='truncated JPEG \(the data ends before the end-of-image marker; was the download or copy interrupted\?\)' ;;
        truncated.png) why="truncated PNG \(the data ends inside chunk 'IDAT', before the IEND chunk\)" ;;
        huge_header.png) why='PNG of 50000x50000 = 2500000000 pixels, more than the limit of 100000000 pixels' ;;
      esac
      refused 1 "^attnzoo preprocess: .*/bad/$bad: $why$" \
        preprocess --model "$yaml" "$good" "$ref/bad/$bad" --out "$o"
    done
    refused 1 "^attnzoo preprocess: .*/bad: is a directory, not an image$" \
      preprocess --model "$yaml" "$ref/bad" --out "$o"
    refused 1 "^attnzoo preprocess: .*/png_37x53.png: PNG of 53x37 = 1961 pixels, more than the limit of 1000 pixels$" \
      preprocess --model "$yaml" --max-pixels 1000 "$good" --out "$o"
    not_written "$o"
    ;;
  preprocess_bad_args)
    refused 2 '^attnzoo: .*images' preprocess --model "$yaml" --out "$o"
    refused 2 '^attnzoo: .*--out' preprocess --model "$yaml" "$img/png_37x53.png"
    refused 2 '^attnzoo: .*--max-pixels' preprocess --model "$yaml" --max-pixels 0 "$img/png_37x53.png" --out "$o"
    refused 1 "^attnzoo preprocess: unknown model 'vit_nope'" \
      preprocess --model vit_nope "$img/png_37x53.png" --out "$o"
    refused 1 "^attnzoo preprocess: .*vit_micro_test.yaml: override 'preprocess.crop_pct=2': preprocess.crop_pct: " \
      preprocess --model "$yaml" --set preprocess.crop_pct=2 "$img/png_37x53.png" --out "$o"
    not_written "$o"
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
