#!/usr/bin/env bash
# Builds tests with sanitizers and runs them; fails on any report, leaks included.
#   tools/sanitize.sh [--reuse-references] [address] [thread]      default: both
#   address  ASan + UBSan (LeakSanitizer on) in build-asan/: every test of io/, configs/,
#            preprocess/, api/, decoding/ (but its searches' oracle tests) and serve/, the code
#            that reads untrusted input; and the CPU kernels' tests (flash attention, add +
#            LayerNorm, the int8 row passes): vector loops over raw memory.
#   thread   TSan in build-tsan/: the multi-threaded tests (ImageClassifier, SpeechEncoder with
#            its Streams and AudioClassifier from 4 threads at once, the data loaders' workers,
#            the server's batcher, routes, HTTP connections, WebSocket streams and stream threads).
#   --reuse-references  copy the reference steps' outputs (the Python references the tests read)
#            from build/ instead of running the steps again: for a build/ whose suite has just
#            run on these sources, as in CI (.ci/run), where it saves about 50 s.
# The trees: tools/sanitizer_tree.sh (clang, attnzoo's libraries and tests instrumented; LibTorch,
# OpenCV and the other third-party libraries as installed). Suppressions, for third-party code
# only, each with its reason: tests/sanitizers/. CI runs `tools/sanitize.sh` after the tests
# (tools/setup.sh has made the venv and build/data by then; this script runs it again, which only
# checks them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
reuse=0
kinds=()
for arg in "$@"; do
  case "$arg" in
    --reuse-references) reuse=1 ;;
    *) kinds+=("$arg") ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
python="$(cd "$ROOT" && tools/requirements/venv_path.sh)/bin/python"

# reference_steps BUILD LABELS REGEX: copies the outputs of the reference steps (CTest entries
# named *.make_*) that `ctest -L LABELS -R REGEX` (no -L for no LABELS) selects in BUILD, the
# fixtures of the selected entries included, from the same folders of build/,
# and prints the fixtures they set up, as a regular expression; prints nothing, and copies
# nothing, unless build/ holds every one of those folders.
reference_steps() {
  local build=$1 labels=$2 regex=$3 select=(-R "$3")
  [ -z "$labels" ] || select+=(-L "$labels")
  ctest --test-dir "$build" --show-only=json-v1 "${select[@]}" |
    "$python" -c '
import json, os, shutil, sys
build, source = sys.argv[1], sys.argv[2]
steps = [t for t in json.load(sys.stdin)["tests"] if ".make_" in t["name"]]
outputs, fixtures = set(), set()
for step in steps:
    outputs.update(a for a in step["command"] if a.startswith(build + "/"))
    for p in step.get("properties", []):
        if p["name"] == "FIXTURES_SETUP":
            fixtures.update(p["value"])
pairs = [(os.path.join(source, os.path.relpath(o, build)), o) for o in sorted(outputs)]
if not steps or any(not os.path.isdir(s) for s, _ in pairs):
    sys.exit(0)
for s, o in pairs:  # parents first: a step writing into a subfolder of another keeps its files
    shutil.rmtree(o, ignore_errors=True)
    shutil.copytree(s, o, symlinks=True, dirs_exist_ok=True)
print("^(" + "|".join(sorted(fixtures)) + ")$")
' "$build" "$ROOT/build"
}
supp="$ROOT/tests/sanitizers"

run_kind() { # run_kind KIND: configure, build and run one sanitizer's tests
  # labels (address): the CTest labels to run; steps: the reference steps among them (address:
  # all), or the ones the cases read (thread).
  local kind=$1 build sanitize labels='' steps='.' exclude='^$' targets=() cases=()
  case "$kind" in
    address)
      build="$ROOT/build-asan"
      sanitize="address,undefined"
      labels='^(io|configs|preprocess|api|decoding|serve)$'
      # The CTC searches against brute-force oracles over thousands of random inputs: model
      # outputs, not untrusted input, 30 times slower instrumented (95 s); the Release suite runs
      # them. decoding/'s parsers (token tables, the tokenizer) stay.
      exclude='^(CtcPrefixBeamSearch|CtcStreaming)$'
      targets=(attnzoo_io_tests attnzoo_configs_tests attnzoo_image_tests attnzoo_audio_tests
               attnzoo_api_tests attnzoo_decoding_tests attnzoo_serve_tests
               attnzoo_kernels_tests)
      # The CPU kernels' vector loops (tails through padded copies, packed scratch, strided
      # reads) against their references: memory errors there are silent in the Release suite.
      cases=("attnzoo_kernels_tests:kernels:FlashAttention.Cpu*:AddLayerNorm.*:Int8Rows.*:Int8MatmulCpu.*:LinearCpu.*")
      ;;
    thread)
      build="$ROOT/build-tsan"
      sanitize="thread"
      # The reference data the threaded api cases read (CTest fixtures; not ESPnet's folders).
      steps='^api\.make_(classifier|ast|wenet)'
      targets=(attnzoo_api_tests attnzoo_train_data_tests attnzoo_serve_tests)
      # BINARY:FOLDER:FILTER, run directly (a CTest entry is a whole suite).
      cases=("attnzoo_api_tests:api:*FourThreads*" "attnzoo_train_data_tests:train:Data.*"
             "attnzoo_serve_tests:serve:DynamicBatcher.*:HttpServer.*:HttpStreams.*:InferenceServer.*:TaskPool.*:SpeechStream.*")
      ;;
    *) echo "tools/sanitize.sh: unknown kind '$kind' (address, thread)" >&2; return 2 ;;
  esac
  echo "sanitize: $kind ($sanitize) in ${build#"$ROOT"/}"
  local start=$SECONDS
  "$ROOT/tools/sanitizer_tree.sh" "$kind" "${targets[@]}"
  # A tree linked to LibTorch's CPU libraries alone must not load the CUDA ones.
  if ldd "$build/bin/${targets[0]}" | grep -q libtorch_cuda; then
    echo "sanitize: ${targets[0]} loads libtorch_cuda.so although linked with ATTNZOO_TORCH_CPU_ONLY"
    return 1
  fi
  echo "sanitize: $kind: built in $((SECONDS - start)) s"
  start=$SECONDS
  # halt_on_error and exitcode: the first report fails the test that made it.
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
  export OMP_NUM_THREADS=1
  # The reference steps: copied from build/ (--reuse-references), else run here.
  local reused='' fixture_args=()
  if [ "$reuse" = 1 ]; then
    reused=$(reference_steps "$build" "$labels" "$steps")
    if [ -n "$reused" ]; then
      echo "sanitize: $kind: reference steps copied from build/ (fixtures $reused)"
      fixture_args=(-FA "$reused" -E "\\.make_|$exclude")
    else
      echo "sanitize: $kind: build/ lacks some reference outputs; the steps run here"
    fi
  fi
  if [ -n "$labels" ]; then
    [ ${#fixture_args[@]} -gt 0 ] || fixture_args=(-E "$exclude")
    ctest --test-dir "$build" --output-on-failure --timeout 900 -j "${ATTNZOO_TEST_JOBS:-2}" \
      -L "$labels" "${fixture_args[@]}"
  fi
  if [ ${#cases[@]} -gt 0 ]; then
    # The reference steps the cases read (thread), then the cases, two at a time (each binary's
    # output in a log of its own, printed when it ends).
    [ -n "$labels" ] || [ -n "$reused" ] ||
      ctest --test-dir "$build" --output-on-failure --timeout 900 -R "$steps"
    local entry binary folder filter log logs=() failed=0 i
    for entry in "${cases[@]}"; do
      IFS=: read -r binary folder filter <<<"$entry"
      while [ "$(jobs -rp | wc -l)" -ge "${ATTNZOO_TEST_JOBS:-2}" ]; do wait -n || true; done
      log="$build/tests/$folder/$binary.$kind.log"
      logs+=("$log")
      (
        cd "$build/tests/$folder"
        code=0
        ATTNZOO_PYTHON="$python" timeout 900 "$build/bin/$binary" --gtest_filter="$filter" \
          >"$log" 2>&1 || code=$?
        echo "$code" >"$log.status"
      ) &
    done
    wait
    for i in "${!cases[@]}"; do
      log=${logs[$i]}
      echo "sanitize: $kind: ${cases[$i]%%:*} --gtest_filter=${cases[$i]#*:*:}" \
        "(exit status $(cat "$log.status"))"
      cat "$log"
      [ "$(cat "$log.status")" -eq 0 ] || failed=1
    done
    [ "$failed" -eq 0 ] || return 1
  fi
  echo "sanitize: $kind: tests passed in $((SECONDS - start)) s"
}

for kind in "${kinds[@]}"; do
  run_kind "$kind"
done
