#!/usr/bin/env bash
# install_test.sh CASE BUILD_DIR SOURCE_DIR WORK_DIR: attnzoo as another project uses it.
#   prefix            `cmake --install` into WORK_DIR/staging, then moved to WORK_DIR/prefix; the
#                     layout: libraries with their SONAME, public headers only, the CMake package,
#                     attnzoo.pc, the CLI, the zoo
#   examples          tools/examples/ (its CMakeLists.txt is the README's, word for word) built
#                     against the moved prefix alone, into WORK_DIR/examples
#   cmake_consumer    those examples on the shipped models: the predictions of `attnzoo classify`
#   pkg_config        the README's one-file program, built with the README's g++ line
#   transcribe_consumer  the README's speech-to-text program, built the same way, on a randomly
#                     initialised WeNet-layout checkpoint (tests/api/make_wenet_ctc_checkpoint.py)
#                     and a units file made here: the text, scores and times of the installed
#                     `attnzoo transcribe`, offline and live
#   zoo_without_source  the moved prefix's CLI with the source tree hidden (a mount namespace
#                     over it, where unshare is allowed), another working folder and no
#                     ATTNZOO_ZOO_PATH: it lists and runs the zoo
#   cleanup           removes WORK_DIR
set -u
case_name=$1
build=$2
source=$3
work=$4
prefix=$work/prefix
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
unset ATTNZOO_ZOO_PATH
# Linked statically (BUILD_SHARED_LIBS=OFF), a program finds the zoo relative to itself, which
# these consumers, built outside the prefix, cannot: they are told where it is, as the README says.
consumer_env=()
if [ -d "$prefix" ] && ! ls "$prefix"/lib/libattnzoo_api.so* >/dev/null 2>&1; then
  consumer_env=(env "ATTNZOO_ZOO_PATH=$prefix/share/attnzoo")
fi

fail() {
  echo "FAIL: $*"
  exit 1
}

# readme_block MARKER [FILE]: the fenced code block that follows the line "<!-- MARKER -->" in
# FILE (relative to the repository; default README.md).
readme_block() {
  awk -v marker="<!-- $1 -->" '
    $0 == marker { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$source/${2:-README.md}"
}

# top_of_json FILE: "label probability" of the first prediction in attnzoo classify --json's line.
top_of_json() {
  sed -E 's/.*"top":\[\{"index":[0-9]+,"label":"([^"]*)","prob":([0-9.e-]+)\}.*/\1 \2/' "$1"
}

case "$case_name" in
  prefix)
    rm -rf "$work"
    mkdir -p "$work"
    cmake --install "$build" --prefix "$work/staging" >"$out/install.log" 2>&1 ||
      { cat "$out/install.log"; fail "cmake --install failed"; }
    # Another folder: nothing may point back to where it was installed.
    mv "$work/staging" "$prefix"
    for f in lib/cmake/attnzoo/attnzooConfig.cmake lib/cmake/attnzoo/attnzooConfigVersion.cmake \
      lib/cmake/attnzoo/attnzooTargets.cmake lib/pkgconfig/attnzoo.pc bin/attnzoo \
      include/attnzoo/api/image_classifier.h include/attnzoo/api/speech_encoder.h \
      include/attnzoo/layers/attention.h include/attnzoo/configs/registry.h \
      include/attnzoo/kernels/ops.h include/attnzoo/preprocess/image/decode.h \
      include/attnzoo/preprocess/audio/features.h include/attnzoo/serve/inference_server.h \
      share/attnzoo/vit/vit_digits.yaml \
      share/attnzoo/weights/vit_digits.safetensors share/attnzoo/weights/conformer_kws.safetensors \
      share/attnzoo/labels/imagenet1k.txt share/attnzoo/samples/digit_7.png \
      lib/libattnzoo_sentencepiece.so share/attnzoo/weights/conformer_digits_ctc.safetensors; do
      [ -e "$prefix/$f" ] || fail "$f is not installed"
    done
    # Internal headers, test and tool headers, sources and training runs stay out.
    for f in include/attnzoo/configs/yaml_reader.h include/attnzoo/kernels/common \
      include/attnzoo/preprocess/image/internal.h \
      include/attnzoo/kernels/flash_attn/flash_fwd_params.h include/attnzoo/tests \
      include/attnzoo/tools share/attnzoo/train share/attnzoo/serve share/attnzoo/CMakeLists.txt \
      share/attnzoo/registry.cpp; do
      [ ! -e "$prefix/$f" ] || fail "$f is installed"
    done
    stray=$(find "$prefix/include" -type f ! -name '*.h')
    [ -z "$stray" ] || fail "not headers in include/: $stray"
    # Shared libraries carry the version and a SONAME of major.minor.
    lib=$(ls "$prefix"/lib/libattnzoo_api.so.* 2>/dev/null | head -n 1)
    if [ -n "$lib" ]; then
      soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
      [[ "$soname" =~ ^libattnzoo_api\.so\.[0-9]+\.[0-9]+$ ]] || fail "SONAME of $lib: $soname"
      # The relative RPATH that lets the prefix move.
      objdump -p "$prefix/bin/attnzoo" | grep -Eq 'R(UN)?PATH.*\$ORIGIN' ||
        fail "bin/attnzoo has no \$ORIGIN in its RPATH"
    fi
    echo "installed into $work/staging and moved to $prefix: $(find "$prefix" -type f | wc -l) files"
    ;;

  examples)
    # The README's consumer CMakeLists.txt is tools/examples/CMakeLists.txt, word for word.
    readme_block "tools/examples/CMakeLists.txt" >"$out/readme_cmake"
    [ -s "$out/readme_cmake" ] || fail "README.md has no block marked tools/examples/CMakeLists.txt"
    diff -u "$out/readme_cmake" "$source/tools/examples/CMakeLists.txt" ||
      fail "README.md's consumer CMakeLists.txt differs from tools/examples/CMakeLists.txt"
    # CMAKE_PREFIX_PATH is the prefix and nothing else: LibTorch comes from the recorded hint.
    # The compiler that built attnzoo (clang where tools/setup.sh chose it: the faster one here).
    compiler_args=("-DCMAKE_CXX_COMPILER=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")")
    command -v ccache >/dev/null && compiler_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    rm -rf "$work/examples"
    cmake -S "$source/tools/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" "${compiler_args[@]}" >"$out/configure.log" 2>&1 ||
      { cat "$out/configure.log"; fail "configuring tools/examples against $prefix failed"; }
    grep -E "Torch|attnzoo" "$out/configure.log" | head -5
    cmake --build "$work/examples" >"$out/build.log" 2>&1 ||
      { cat "$out/build.log"; fail "building tools/examples failed"; }
    [ -x "$work/examples/classify_image" ] && [ -x "$work/examples/encode_audio" ] ||
      fail "the examples were not built"
    ;;

  cmake_consumer)
    zoo=$prefix/share/attnzoo
    cd "$work"
    # classify_image on the shipped digit model, by its zoo name: the top-5 labels and
    # probabilities of the installed CLI's.
    "${consumer_env[@]}" "$work/examples/classify_image" vit_digits "$zoo/weights/vit_digits.safetensors" \
      "$zoo/samples/digit_7.png" >"$out/example" || fail "classify_image failed"
    "$prefix/bin/attnzoo" classify --model vit_digits --weights "$zoo/weights/vit_digits.safetensors" \
      --topk 5 --json "$zoo/samples/digit_7.png" >"$out/cli" || fail "attnzoo classify failed"
    python3 - "$out/example" "$out/cli" <<'PY' || fail "classify_image and attnzoo classify disagree"
import json
import sys

lines = open(sys.argv[1]).read().splitlines()[1:]
ours = [(l.split(None, 1)[1], float(l.split(None, 1)[0].rstrip("%")) / 100) for l in lines]
cli = [(p["label"], p["prob"]) for p in json.loads(open(sys.argv[2]).read())["top"]]
print("classify_image:", ours)
print("attnzoo classify:", cli)
assert len(ours) == 5 and [l for l, _ in ours] == [l for l, _ in cli], (ours, cli)
assert all(abs(a - b) <= 1e-6 for (_, a), (_, b) in zip(ours, cli)), (ours, cli)
assert ours[0][0] == "7", ours
PY
    # encode_audio on the shipped keyword model: the frames of the installed CLI's.
    "${consumer_env[@]}" "$work/examples/encode_audio" conformer_kws "$zoo/weights/conformer_kws.safetensors" \
      "$zoo/samples/keyword_stop.wav" >"$out/example" || fail "encode_audio failed"
    "$prefix/bin/attnzoo" encode --model conformer_kws \
      --weights "$zoo/weights/conformer_kws.safetensors" --json "$zoo/samples/keyword_stop.wav" \
      >"$out/cli" || fail "attnzoo encode failed"
    cat "$out/example" "$out/cli"
    frames=$(sed -E 's/.*"encoder_frames":([0-9]+).*/\1/' "$out/cli")
    grep -Eq -- "-> $frames x [0-9]+ encoded frames" "$out/example" ||
      fail "encode_audio's frames differ from attnzoo encode's ($frames)"
    ;;

  pkg_config)
    readme_block "tests/install: top1.cpp" >"$out/top1.cpp"
    readme_block "tests/install: pkg-config" >"$out/build_line"
    [ -s "$out/top1.cpp" ] && [ -s "$out/build_line" ] ||
      fail "README.md lacks the blocks marked tests/install: top1.cpp and pkg-config"
    line=$(grep -v '^#' "$out/build_line" | grep -v '^$')
    [[ "$line" == g++* ]] || fail "the README's pkg-config block is not one g++ line: $line"
    cd "$out"
    export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
    bash -c "$line" >"$out/build.log" 2>&1 || { cat "$out/build.log"; fail "$line failed"; }
    zoo=$prefix/share/attnzoo
    cd "$work"
    "${consumer_env[@]}" "$out/top1" "$zoo/samples/digit_7.png" >"$out/ours" || fail "top1 failed"
    "$prefix/bin/attnzoo" classify --model vit_digits --weights "$zoo/weights/vit_digits.safetensors" \
      --topk 1 --json "$zoo/samples/digit_7.png" >"$out/cli" || fail "attnzoo classify failed"
    cat "$out/ours"
    read -r label prob < <(top_of_json "$out/cli")
    python3 - "$out/ours" "$label" "$prob" <<'PY' || fail "top1 and attnzoo classify disagree"
import sys

name, label, prob = open(sys.argv[1]).read().split()
assert label == sys.argv[2] == "7", (label, sys.argv[2])
assert abs(float(prob) - float(sys.argv[3])) <= 1e-6, (prob, sys.argv[3])
PY
    ;;

  transcribe_consumer)
    readme_block "tests/install: transcribe.cpp" docs/speech.md >"$out/transcribe.cpp"
    [ -s "$out/transcribe.cpp" ] || fail "docs/speech.md lacks the block marked tests/install: transcribe.cpp"
    line=$(readme_block "tests/install: pkg-config" | grep -v '^#' | grep -v '^$')
    line=${line//top1/transcribe}
    cd "$out"
    export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
    bash -c "$line" >"$out/build.log" 2>&1 || { cat "$out/build.log"; fail "$line failed"; }
    py=${ATTNZOO_PYTHON:-python3}
    "$py" "$source/tests/api/make_wenet_ctc_checkpoint.py" "$out/wenet" || fail "no checkpoint"
    # WeNet's lang_char.txt layout (the YAML has no decoding section: characters, as WeNet's
    # character models); the YAML streams in chunks of 4.
    printf '<blank> 0\n<unk> 1\na 2\nb 3\nc 4\nd 5\ne 6\nf 7\ng 8\n<sos/eos> 9\n' \
      >"$out/wenet/units.txt"
    yaml=$source/tests/api/data/conformer_micro_wenet_ctc.yaml
    # Two utterances of noise and chirps, 16 kHz and 8 kHz.
    "$py" - "$out" <<'PY' || fail "no audio"
import sys, wave
import numpy as np
rng = np.random.default_rng(11)
for name, rate, seconds in (("a.wav", 16000, 1.9), ("b.wav", 8000, 1.3)):
    n = int(rate * seconds)
    t = np.arange(n) / rate
    x = 0.3 * np.sin(2 * np.pi * (300 + 400 * t) * t) * (np.sin(5 * t) > 0) + 0.1 * rng.standard_normal(n)
    with wave.open(f"{sys.argv[1]}/{name}", "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
PY
    weights=$out/wenet/wenet_ctc_micro.safetensors
    model=(--model "$yaml" --weights "$weights" --units "$out/wenet/units.txt")
    "${consumer_env[@]}" "$out/transcribe" "$yaml" "$weights" "$out/wenet/units.txt" \
      "$out/a.wav" "$out/b.wav" >"$out/ours" || fail "transcribe failed"
    "$prefix/bin/attnzoo" transcribe "${model[@]}" --json "$out/a.wav" "$out/b.wav" \
      >"$out/cli" || fail "attnzoo transcribe failed"
    for f in a b; do
      "$prefix/bin/attnzoo" transcribe "${model[@]}" --json --live --block-ms 100 "$out/$f.wav" \
        >"$out/live_$f" || fail "attnzoo transcribe --live failed"
    done
    cat "$out/ours"
    "$py" - "$out" <<'PY' || fail "the README's transcribe and attnzoo transcribe disagree"
import json, re, sys
out = sys.argv[1]
cli = [json.loads(l) for l in open(f"{out}/cli")]
blocks = open(f"{out}/ours").read().split(f"{out}/")[1:]
assert len(blocks) == 2, blocks
for block, ref, f in zip(blocks, cli, "ab"):
    head, *rest = block.splitlines()
    m = re.fullmatch(r"(\w\.wav): (.*) \(score (\S+), confidence (\S+)\)", head)
    assert m and m.group(1) == f"{f}.wav", head
    assert m.group(2) == ref["text"] and abs(float(m.group(3)) - ref["score"]) < 1e-3, (head, ref)
    tokens = [l.split() for l in rest if not l.startswith("  [") and not l.startswith("  live:")]
    assert [t[0] for t in tokens] == [t["token"] for t in ref["tokens"]], (tokens, ref["tokens"])
    for t, r in zip(tokens, ref["tokens"]):
        start, end = map(float, t[1].split("-"))
        assert abs(start - r["start"]) < 6e-3 and abs(end - r["end"]) < 6e-3, (t, r)
    partials = [l.split("] ", 1)[-1] if "] " in l else "" for l in rest if l.startswith("  [")]
    assert partials, "no live pass: the model streams"
    for a, b in zip(partials, partials[1:]):
        assert b.startswith(a), (a, b)
    live = [l for l in rest if l.startswith("  live:")][0].split(":", 1)[1].strip()
    final = [json.loads(l) for l in open(f"{out}/live_{f}")][-1]
    assert final["final"] and live == final["text"] == ref["text"], (live, final, ref)
    print(f"{f}.wav: '{ref['text']}', {len(partials)} partials, live final the same")
PY
    ;;

  zoo_without_source)
    # The source tree (and the build tree inside it) out of sight: an empty tmpfs mounted over
    # it in a mount namespace of this command alone.
    hide=()
    if unshare -m true 2>/dev/null; then
      hide=(unshare -m)
    elif unshare -r -m true 2>/dev/null; then
      hide=(unshare -r -m)
    fi
    cat >"$out/run.sh" <<EOF
set -e
if [ "\${1:-}" = hide ]; then
  mount -t tmpfs attnzoo-hidden "$source"
  [ -z "\$(ls -A "$source")" ] || { echo "the source tree is still visible"; exit 1; }
  [ "$build" = "\${build#$source/}" ] && mount -t tmpfs attnzoo-hidden "$build"
fi
cd "$work"
"$prefix/bin/attnzoo" version
"$prefix/bin/attnzoo" models
"$prefix/bin/attnzoo" classify --model vit_digits \
  --weights "$prefix/share/attnzoo/weights/vit_digits.safetensors" --topk 1 \
  "$prefix/share/attnzoo/samples/digit_7.png"
EOF
    if [ ${#hide[@]} -gt 0 ]; then
      "${hide[@]}" bash "$out/run.sh" hide >"$out/stdout" 2>&1 || { cat "$out/stdout"; fail "run failed"; }
      echo "source tree hidden with ${hide[*]} and a tmpfs"
    else
      echo "unshare is not allowed here: the source tree stays on disk (not hidden)"
      bash "$out/run.sh" >"$out/stdout" 2>&1 || { cat "$out/stdout"; fail "run failed"; }
    fi
    cat "$out/stdout"
    grep -Eq "^  installed: $prefix/share/attnzoo: [0-9]+ models$" "$out/stdout" ||
      fail "attnzoo version does not name the installed zoo"
    if grep -q "build tree" "$out/stdout"; then fail "the build tree's zoo was searched"; fi
    for name in vit_digits conformer_kws vit_base_patch16_224 conformer_s; do
      grep -Eq "^$name +(vit|conformer) " "$out/stdout" || fail "attnzoo models does not list $name"
    done
    grep -Eq "^ +(9[0-9]|100)\.[0-9]{2}% +7  7$" "$out/stdout" || fail "vit_digits did not say 7"
    ;;

  cleanup)
    rm -rf "$work"
    ;;

  *)
    fail "unknown case $case_name"
    ;;
esac
echo "ok: $case_name"
