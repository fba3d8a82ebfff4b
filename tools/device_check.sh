#!/usr/bin/env bash
# tools/device_check.sh: the GPU checks, in one call on the lent GPU machine (see the `run` tool).
#
#   tools/device_check.sh --prepare      # here: tools/device_bundle.py packs build-device/bundle.tar.xz
#   tools/device_check.sh                # there, carrying build-device/bundle.tar.xz; OUT=DIR
#
# The bundle holds the binaries built here with ATTNZOO_CUDA=ON (the whole of build/ that the
# checks run, and a kernels-only tree for plain sm_90), the Debian libraries they load, and their
# manifest; that machine has the same torch wheel (the manifest says which, and this checks it),
# so nothing is built there. When the binaries cannot load there (another torch, a missing
# library), it falls back to building kernels/, io/, layers/, models/ and their tests from source
# (ATTNZOO_KERNELS_ONLY, GoogleTest's sources from the bundle), and the CLI steps are skipped;
# ATTNZOO_DEVICE_BUILD=1 asks for that build.
#
# In order, each step within the time left (ATTNZOO_DEVICE_DEADLINE seconds from the start, 540 by
# default, so that one call stays under the tool's 10 minutes):
#   1. every *_CUDA test of the kernels, layers and models test binaries (sm_90a: wgmma);
#   2. the same tests of kernels/ and layers/ in the tree built for plain sm_90 (no wgmma: the flash
#      forward's score product takes the mma.sync path that sm_80 runs; an sm_80 cubin does not
#      load on a 9.x GPU, and compute_80 PTX would be JIT-compiled at first use);
#   3. compute-sanitizer's memcheck and racecheck on FlashAttention.SanitizerCase_CUDA;
#   4. bench_flash: the flash kernel against every SDPA backend LibTorch has there;
#   5. ViT-B/16 bf16 against timm eager and torch.compile (tools/bench/bench_vit_cuda.py);
#   6. the CLI: `attnzoo classify` of a digit on CUDA, `attnzoo bench model` ViT-B/16 bf16 at batch
#      256 eager, with CUDA graphs and with the fused epilogues, and 100 steps of `attnzoo train`
#      in bf16 on vit_digits' data (made from the bundle's digits.png), its loss falling, no NaN.
# A table of the steps is printed last and written to $OUT/summary.txt; $OUT also gets
# logs.tar.gz (every log and JSON) and the two benchmarks' JSON, a few files as `run` returns them.
# Without a GPU (a dry run here) the GPU steps are reported as skipped, and the CLI's run on the
# CPU at small sizes (batch 2, 10 training steps in fp32), to check the script itself.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE_DIR=$ROOT/build-device
if [ "${1:-}" = "--prepare" ]; then
  python=${ATTNZOO_DEVICE_PYTHON:-$("$ROOT/tools/requirements/venv_path.sh")/bin/python}
  exec "$python" "$ROOT/tools/device_bundle.py" --python "$python"
fi
OUT=${OUT:-$DEVICE_DIR/out}
LOGS=$DEVICE_DIR/logs
rm -rf "$LOGS" && mkdir -p "$OUT" "$LOGS"
PY=${ATTNZOO_DEVICE_PYTHON:-python3}
DEADLINE=${ATTNZOO_DEVICE_DEADLINE:-540}
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
say() { printf '[device_check %4ss] %s\n' "$(elapsed)" "$*"; }
rows=()
failed=0
# row NAME RESULT SECONDS
row() { rows+=("$(printf '%-48s %-36s %5s' "$1" "$2" "$3")"); }
skip() { row "$1" "skipped: $2" -; say "skipped: $1 ($2)"; }
# step NAME SECONDS LOG COMMAND...: COMMAND with its output in LOGS/LOG, stopped after SECONDS or
# at the deadline, whichever comes first; skipped when less than 10 s are left.
step() {
  local name=$1 want=$2 log=$3 left t0 rc
  shift 3
  left=$((DEADLINE - $(elapsed)))
  [ "$want" -lt "$left" ] || want=$left
  if [ "$want" -lt 10 ]; then skip "$name" "out of time"; return 1; fi
  say "$name (at most ${want} s)"
  t0=$(date +%s)
  if [ "$1" = with_libs ]; then
    shift
    set -- env LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
  fi
  timeout --kill-after=5 "$want" "$@" >"$LOGS/$log" 2>&1
  rc=$?
  local result="ok"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then result="timed out"; elif [ $rc -ne 0 ]; then result="FAILED (rc $rc)"; fi
  [ "$result" = ok ] || failed=1
  row "$name" "$result" $(($(date +%s) - t0))
  return $rc
}

if nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    >"$LOGS/gpu.txt" 2>/dev/null; then
  gpu=1
else
  gpu=0
  echo "no GPU (nvidia-smi failed): a dry run" >"$LOGS/gpu.txt"
fi
say "GPU: $(cat "$LOGS/gpu.txt")"
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
torch_lib=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
say "torch $torch_version ($PY)"
libs=$torch_lib
for dir in "$(dirname "$torch_lib")"/../nvidia/*/lib "$(dirname "$torch_lib")"/../nvidia/*/*/lib \
    /usr/local/cuda/lib64; do
  [ -d "$dir" ] && libs=$libs:$(cd "$dir" && pwd)
done

# The bundle: unpacked over the checkout (build/, build-device/mma, build-device/sysroot).
SYSROOT=$DEVICE_DIR/sysroot
prebuilt=0
if [ -f "$DEVICE_DIR/bundle.tar.xz" ]; then
  if [ ! -f "$DEVICE_DIR/manifest" ] || [ "$DEVICE_DIR/bundle.tar.xz" -nt "$DEVICE_DIR/manifest" ]; then
    say "unpacking build-device/bundle.tar.xz"
    tar -C "$ROOT" -xJf "$DEVICE_DIR/bundle.tar.xz" && touch "$DEVICE_DIR/manifest"
  fi
  manifest() { sed -n "s/^$1=//p" "$DEVICE_DIR/manifest"; }
  say "bundle: $(tr '\n' ' ' <"$DEVICE_DIR/manifest")"
  libs=$SYSROOT/lib:$ROOT/build/lib:$DEVICE_DIR/mma/lib:$libs
  prebuilt=1
  if [ "$(manifest torch)" != "$torch_version" ]; then
    say "the bundle's binaries link torch $(manifest torch), this machine has $torch_version"
    prebuilt=0
  fi
  # The binaries' compiled-in paths (configs, test data) name the folder they were built in.
  built_in=$(manifest source_root)
  if [ -n "$built_in" ] && [ "$built_in" != "$ROOT" ]; then
    if [ ! -e "$built_in" ]; then
      mkdir -p "$(dirname "$built_in")" && ln -s "$ROOT" "$built_in" &&
        say "$built_in -> $ROOT (the binaries' compiled-in source folder)"
    elif [ "$(readlink -f "$built_in")" != "$(readlink -f "$ROOT")" ]; then
      say "warning: $built_in is another folder; the binaries' compiled-in paths read it"
    fi
  fi
else
  say "no build-device/bundle.tar.xz (tools/device_check.sh --prepare): a kernels-only build"
fi
# with_libs COMMAND...: COMMAND with the bundle's libraries and torch's first on the search path
# (env, so that `timeout` can run it).
with_libs() { env LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
BUILD=$ROOT/build
MMA=$DEVICE_DIR/mma
if [ -n "${ATTNZOO_DEVICE_BUILD:-}" ] && [ "$prebuilt" -eq 1 ]; then
  say "ATTNZOO_DEVICE_BUILD is set: the kernels-only source build instead of the bundle's binaries"
  prebuilt=0
fi
if [ "$prebuilt" -eq 1 ]; then
  for binary in "$BUILD"/bin/* "$MMA"/bin/*; do
    if with_libs ldd "$binary" 2>&1 | grep -q "not found"; then
      say "$binary cannot load here: $(with_libs ldd "$binary" | grep "not found" | head -3 | tr '\n' ' ')"
      prebuilt=0
    fi
  done
fi
if [ "$prebuilt" -eq 1 ]; then
  row "binaries" "built here ($(sed -n 's/^commit=//p' "$DEVICE_DIR/manifest"))" -
else
  # The fallback: kernels-only trees built here, for the GPU's architecture and for plain sm_90.
  arch=$("$PY" -c 'import torch; m, n = torch.cuda.get_device_capability(); print(f"{m}{n}" + ("a" if m == 9 else ""))' 2>/dev/null) || arch=90a
  prefix=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  gtest_src=$SYSROOT/src/googletest json_include=$SYSROOT/include
  [ -d "$gtest_src" ] || gtest_src=/usr/src/googletest
  [ -d "$json_include/nlohmann" ] || json_include=/usr/include
  BUILD=$DEVICE_DIR/build MMA=$DEVICE_DIR/build-mma libs=$libs:$BUILD/lib:$MMA/lib
  all_targets="attnzoo_kernels_tests attnzoo_layers_tests attnzoo_models_tests bench_flash bench_vit_cuda"
  for tree in "$BUILD:${arch}-real" "$MMA:90-real"; do
    targets=$all_targets
    [ "${tree%%:*}" = "$MMA" ] && targets="attnzoo_kernels_tests attnzoo_layers_tests"
    step "build kernels-only sm_${tree##*:}" "${ATTNZOO_DEVICE_BUILD_SECONDS:-300}" "build_${tree##*:}.log" bash -c "
      cmake -S '$ROOT' -B '${tree%%:*}' -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH='$prefix' -DATTNZOO_CUDA=ON -DATTNZOO_CUDA_ARCHITECTURES=${tree##*:} \
        -DATTNZOO_KERNELS_ONLY=ON -DATTNZOO_GTEST_SOURCE_DIR='$gtest_src' \
        -DATTNZOO_JSON_INCLUDE_DIR='$json_include' &&
      cmake --build '${tree%%:*}' -j $(nproc) --target $targets" ||
      tail -20 "$LOGS/build_${tree##*:}.log"
  done
fi

# The attention layer's auto takes the flash kernel only when opted in.
export ATTNZOO_FLASH_AUTO=1
for name in attnzoo_kernels_tests attnzoo_layers_tests attnzoo_models_tests; do
  [ -x "$BUILD/bin/$name" ] || { skip "$name *_CUDA" "not built"; continue; }
  step "$name *_CUDA (sm_90a)" 120 "$name.log" with_libs "$BUILD/bin/$name" \
    --gtest_filter='*_CUDA*' --gtest_output="json:$LOGS/$name.json"
done
for name in attnzoo_kernels_tests attnzoo_layers_tests; do
  [ -x "$MMA/bin/$name" ] || { skip "$name *_CUDA (mma.sync)" "not built"; continue; }
  step "$name *_CUDA (sm_90, mma.sync)" 90 "${name}_mma.log" with_libs "$MMA/bin/$name" \
    --gtest_filter='*_CUDA*' --gtest_output="json:$LOGS/${name}_mma.json"
done
if [ "$gpu" -eq 1 ] && command -v compute-sanitizer >/dev/null; then
  # One small case (L = 197 and 1000, E = 64, forward and backward): the sanitizers slow kernels
  # down a hundredfold or more.
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool" 90 "sanitizer_$tool.log" with_libs compute-sanitizer \
      --tool "$tool" --error-exitcode 3 "$BUILD/bin/attnzoo_kernels_tests" \
      --gtest_filter='FlashAttention.SanitizerCase_CUDA'
  done
else
  skip "compute-sanitizer memcheck, racecheck" "no GPU or no compute-sanitizer"
fi
if [ "$gpu" -eq 1 ]; then
  step "bench_flash (every SDPA backend)" 150 bench_flash.txt with_libs "$BUILD/bin/bench_flash" \
    --json "$LOGS/bench_flash.json"
  # bench_vit_cuda.py runs our binary itself: a wrapper gives it the libraries, Python keeps its own.
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libs" "$BUILD/bin/bench_vit_cuda" \
    >"$DEVICE_DIR/bench_vit_cuda" && chmod +x "$DEVICE_DIR/bench_vit_cuda"
  step "ViT-B/16 bf16 against timm (bench_vit_cuda.py)" 150 bench_vit.txt "$PY" \
    "$ROOT/tools/bench/bench_vit_cuda.py" --ours "$DEVICE_DIR/bench_vit_cuda" \
    --json "$LOGS/bench_vit.json"
else
  skip "bench_flash, bench_vit_cuda.py" "no GPU"
fi

attnzoo=$BUILD/bin/attnzoo
if [ "$prebuilt" -eq 1 ]; then
  # On the GPU the sizes the issue asks for; in a dry run the same commands on the CPU, small.
  if [ "$gpu" -eq 1 ]; then
    device=cuda batch=256 iterations=20 variants="eager cuda_graph fused" steps=100 train_batch=256
    precision=bf16
  else
    device=cpu batch=2 iterations=2 variants="eager fused" steps=10 train_batch=16
    precision=fp32  # bf16 autocast in training is for CUDA
  fi
  step "attnzoo version" 20 version.txt with_libs "$attnzoo" version
  step "attnzoo classify a digit ($device)" 30 classify.txt with_libs "$attnzoo" classify \
    --model "$ROOT/configs/vit/vit_digits.yaml" --device "$device" \
    --weights "$ROOT/assets/weights/vit_digits.safetensors" --topk 1 "$ROOT/assets/samples/digit_7.png"
  for variant in $variants; do
    flags=()
    [ "$variant" = cuda_graph ] && flags=(--cuda-graph)
    fused=0
    [ "$variant" = fused ] && fused=1
    ATTNZOO_FUSED_EPILOGUES=$fused step "attnzoo bench model ViT-B/16 bf16 b$batch $variant ($device)" \
      60 "bench_model_$variant.txt" with_libs "$attnzoo" bench model --model vit_base_patch16_224 \
      --batch "$batch" --dtype bf16 --device "$device" --iterations "$iterations" "${flags[@]}" \
      --json "$LOGS/bench_model_$variant.json"
  done
  data=$DEVICE_DIR/data/digits
  step "vit_digits data from digits.png" 60 data.log "$PY" "$ROOT/tools/data/make_digits.py" \
    --source "$SYSROOT/share/digits.png" "$data"
  cat >"$DEVICE_DIR/train_device.yaml" <<EOF
model: $ROOT/configs/vit/vit_digits.yaml
data: {kind: image_list, train: $data/train.txt, val: $data/test.txt, workers: 4,
       classes: ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']}
optimizer: {lr: 1.0e-3, weight_decay: 0.05}
schedule: {warmup_steps: $((steps / 10))}
train: {steps: $steps, batch_size: $train_batch, device: $device, precision: $precision, seed: 0,
        threads: 4, log_every: $((steps / 10)), checkpoint_every: 0, output: $LOGS/train}
EOF
  if step "attnzoo train: $steps steps $precision ($device)" 150 train.log with_libs "$attnzoo" train \
      --config "$DEVICE_DIR/train_device.yaml"; then
    "$PY" - "$LOGS/train/metrics.csv" >"$LOGS/train_check.txt" 2>&1 <<'EOF'
import csv, math, sys
losses = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1])) if r.get("loss")]
assert losses and all(math.isfinite(x) for x in losses), f"NaN or no loss: {losses}"
first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
print(f"{len(losses)} logged steps, loss {first:.3f} -> {last:.3f}")
assert last < first, "the loss did not fall"
EOF
    rc=$?
    [ $rc -eq 0 ] || failed=1
    row "  its loss falls, no NaN" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" -
  fi
else
  skip "the CLI steps" "no prebuilt binaries"
fi
if command -v cuobjdump >/dev/null && [ -f "$BUILD/lib/libattnzoo_kernels.so" ]; then
  cuobjdump -sass "$BUILD/lib/libattnzoo_kernels.so" 2>/dev/null | grep -cE "HGMMA" \
    >"$LOGS/wgmma_instruction_count.txt" || true
fi

{
  echo "== device check: $(cat "$LOGS/gpu.txt"); torch $torch_version =="
  for r in "${rows[@]}"; do echo "  $r"; done
  # The test counts of each tree, then the failures by name.
  for tree in "sm_90a:attnzoo_*_tests.log" "mma.sync:attnzoo_*_tests_mma.log"; do
    printf '  %s tests:' "${tree%%:*}"
    # shellcheck disable=SC2086 # the glob is meant
    cat $LOGS/${tree#*:} 2>/dev/null |
      grep -E "^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z].* \([0-9]+ ms\)$" |
      awk '{print $2}' | sort | uniq -c | awk '{printf " %s %s", $2, $1}'
    echo
  done
  cat "$LOGS"/attnzoo_*_tests*.log 2>/dev/null |
    grep -E "^\[  FAILED  \] [A-Za-z].* \([0-9]+ ms\)$" | sed 's/^/  /'
  [ -f "$LOGS/train_check.txt" ] && sed 's/^/  train: /' "$LOGS/train_check.txt"
  for variant in eager cuda_graph fused; do
    [ -f "$LOGS/bench_model_$variant.txt" ] &&
      printf '  bench model %-10s %s\n' "$variant" "$(grep -m1 -E "median" "$LOGS/bench_model_$variant.txt")"
  done
  [ -f "$LOGS/bench_vit.txt" ] && tail -8 "$LOGS/bench_vit.txt" | sed 's/^/  /'
  echo "  $(elapsed) s in all; $([ $failed -eq 0 ] && echo "every step that ran passed" || echo "FAILURES above")"
} | tee "$LOGS/summary.txt"
cp "$LOGS/summary.txt" "$OUT/summary.txt"
for json in bench_flash.json bench_vit.json; do
  [ -f "$LOGS/$json" ] && cp "$LOGS/$json" "$OUT/$json"
done
tar -C "$DEVICE_DIR" --exclude="*.safetensors" -czf "$OUT/logs.tar.gz" logs
exit $failed
