#!/usr/bin/env bash
# Sets everything up (tools/setup.sh: packages, venv, build) and runs the whole test suite.
#   tools/test.sh [ctest arguments...]      e.g. tools/test.sh -R Attention
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/tools/setup.sh"
cd "$ROOT/build"
# Tests that need a GPU are named *_CUDA and are reported as skipped on machines without one.
ctest --output-on-failure --timeout 900 -j "${ATTNZOO_TEST_JOBS:-2}" "$@"
