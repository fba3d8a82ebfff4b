#!/usr/bin/env bash
# install_test.sh CASE BUILD_DIR SOURCE_DIR WORK_DIR: attnzoo as another project uses it.
#   prefix            `cmake --install` into WORK_DIR/staging, then moved to WORK_DIR/prefix; the
#                     layout: libraries with their SONAME, public headers only, the CMake package,
#                     attnzoo.pc, the CLI, the zoo
#   examples          tools/examples/ (its CMakeLists.txt is the README's, word for word) built
#                     against the moved prefix alone, into WORK_DIR/examples
#   cmake_consumer    those examples on the shipped models: the predictions of `attnzoo classify`
#   pkg_config        the README's one-file program, built with the README's g++ line
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

# readme_block MARKER: the fenced code block that follows the line "<!-- MARKER -->" in README.md.
readme_block() {
  awk -v marker="<!-- $1 -->" '
    $0 == marker { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$source/README.md"
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
      include/attnzoo/preprocess/audio/features.h share/attnzoo/vit/vit_digits.yaml \
      share/attnzoo/weights/vit_digits.safetensors share/attnzoo/weights/conformer_kws.safetensors \
      share/attnzoo/labels/imagenet1k.txt share/attnzoo/samples/digit_7.png; do
      [ -e "$prefix/$f" ] || fail "$f is not installed"
    done
    # Internal headers, test and tool headers, sources and training runs stay out.
    for f in include/attnzoo/configs/yaml_reader.h include/attnzoo/kernels/common \
      include/attnzoo/preprocess/image/internal.h \
      include/attnzoo/kernels/flash_attn/flash_fwd_params.h include/attnzoo/tests \
      include/attnzoo/tools share/attnzoo/train share/attnzoo/CMakeLists.txt \
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
    launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    rm -rf "$work/examples"
    cmake -S "$source/tools/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >"$out/configure.log" 2>&1 ||
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
