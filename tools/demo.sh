#!/usr/bin/env bash
# Sets everything up (tools/setup.sh) and runs the main job on what the repository ships: the
# model zoo's listing, and the shared attention layer's demo, which checks itself and writes its
# attention maps as a PNG. (The shipped trained models, and classification with them, come later.)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/tools/setup.sh"
"$ROOT/build/attnzoo" version
echo
"$ROOT/build/attnzoo" models
echo
"$ROOT/build/attnzoo" demo --png "$ROOT/build/attention_demo.png"
