#!/usr/bin/env bash
# Sets everything up (tools/setup.sh: packages, venv, build) and runs the whole test suite.
#   tools/test.sh [ctest arguments...]      e.g. tools/test.sh -R Attention
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/tools/setup.sh"
cd "$ROOT/build"
# Tests that need a GPU are named *_CUDA and are reported as skipped on machines without one.
# Two entries run at once, each with LibTorch's OpenMP team of one thread per core: OpenMP's
# default wait, spinning at every barrier for a core the other entry holds, made some entries 10
# to 25 times slower than alone (BlockLocal: 4.7 s alone, 52 to 132 s in the suite). Passive
# waiting yields the core instead (docs/reliability.md).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --output-on-failure --timeout 900 -j "${ATTNZOO_TEST_JOBS:-2}" "$@"
