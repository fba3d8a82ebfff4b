#!/usr/bin/env bash
# Builds tests with sanitizers and runs them; fails on any report, leaks included.
#   tools/sanitize.sh [address] [thread]      default: both
#   address  ASan + UBSan (LeakSanitizer on) in build-asan/: every test of io/, configs/,
#            preprocess/, api/, decoding/ (but its searches' oracle tests) and serve/, the code
#            that reads untrusted input.
#   thread   TSan in build-tsan/: the multi-threaded tests (ImageClassifier, SpeechEncoder with
#            its Streams and AudioClassifier from 4 threads at once, the data loaders' workers,
#            the server's batcher, routes, HTTP connections, WebSocket streams and stream threads).
# The trees: tools/sanitizer_tree.sh (clang, attnzoo's libraries and tests instrumented; LibTorch,
# OpenCV and the other third-party libraries as installed). Suppressions, for third-party code only, each with its reason:
# tests/sanitizers/. CI runs `tools/sanitize.sh` after the tests (tools/setup.sh has made the
# venv and build/data by then; this script runs it again, which only checks them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
supp="$ROOT/tests/sanitizers"

run_kind() { # run_kind KIND: configure, build and run one sanitizer's tests
  # labels: the CTest labels to run (address), or the reference steps to run first (thread).
  local kind=$1 build sanitize labels exclude='^$' targets=() cases=()
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
               attnzoo_api_tests attnzoo_decoding_tests attnzoo_serve_tests)
      ;;
    thread)
      build="$ROOT/build-tsan"
      sanitize="thread"
      # The reference data the threaded api cases read (CTest fixtures; not ESPnet's folders).
      labels='^api\.make_(classifier|ast|wenet)'
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
  if [ ${#cases[@]} -eq 0 ]; then
    ctest --test-dir "$build" --output-on-failure --timeout 900 -j "${ATTNZOO_TEST_JOBS:-2}" \
      -L "$labels" -E "$exclude"
  else
    # The reference steps the cases read, then the cases.
    ctest --test-dir "$build" --output-on-failure --timeout 900 -R "$labels"
    local entry binary folder filter
    for entry in "${cases[@]}"; do
      IFS=: read -r binary folder filter <<<"$entry"
      echo "sanitize: $kind: $binary --gtest_filter=$filter"
      (cd "$build/tests/$folder" && ATTNZOO_PYTHON="$(cd "$ROOT" && tools/requirements/venv_path.sh)/bin/python" \
        timeout 900 "$build/bin/$binary" --gtest_filter="$filter")
    done
  fi
  echo "sanitize: $kind: tests passed in $((SECONDS - start)) s"
}

for kind in "${kinds[@]}"; do
  run_kind "$kind"
done
