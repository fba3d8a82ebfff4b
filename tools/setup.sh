#!/usr/bin/env bash
# Sets up everything attnzoo needs on Debian 12 and builds it into build/.
#
#   tools/setup.sh [--no-build] [--no-data] [--target T]... [--build-dir DIR]
#                  [--build-type Release|Debug|RelWithDebInfo]
#
# 1. Debian packages (only the missing ones are installed; needs root or sudo).
# 2. A Python venv with exactly the packages of tools/requirements/requirements.lock (the pins of
#    tools/requirements/requirements.txt and everything they pull in), kept outside the checkout in
#    ${XDG_CACHE_HOME:-~/.cache}/attnzoo/venv-<hash of the lock's pins>, so every clone on this machine
#    (CI included) reuses it. uv (pinned, from PyPI) installs it, downloading and unpacking in
#    parallel: about 20 s for the 5 GB of wheels against pip's 120 s here; pip where uv fails.
# 3. The data of the shipped models in build/data: opencv-doc's handwritten digits and the test
#    splits of the synthesized keywords and digit strings (tools/data/; about a minute the first
#    time), for `attnzoo eval` and the tests; --no-data skips it (tools/demo.sh does not need it).
# 4. CMake + Ninja configure (ccache on) and an incremental build: of the targets named with
#    --target (tools/demo.sh builds only the CLI), else of everything, tests included.
# Idempotent: a re-run on a ready machine only checks and re-builds what changed. Each phase
# prints the seconds it took.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR="$ROOT/build"
BUILD_TYPE=Release
DO_BUILD=1
DO_DATA=1
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) DO_BUILD=0 ;;
    --no-data) DO_DATA=0 ;;
    --target) TARGETS+=("$2"); shift ;;
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift ;;
    --build-type) BUILD_TYPE=$2; shift ;;
    -h | --help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { printf '[setup] %s\n' "$*"; }
phase_start=$(date +%s)
phase_done() { # phase_done NAME: the seconds since the previous phase ended
  local now
  now=$(date +%s)
  say "$1: $((now - phase_start)) s"
  phase_start=$now
}

# --- 1. Debian packages -------------------------------------------------------------------------
APT_PACKAGES=(
  g++ cmake ninja-build ccache pkg-config git python3 python3-venv python3-dev
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
  libsndfile1-dev libsoxr-dev libyaml-cpp-dev zlib1g-dev
  libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  clang clang-format libclang-rt-14-dev
  opencv-doc espeak-ng
  libgloo-dev
  libsentencepiece-dev
  libboost-dev curl
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  wrk
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  apt_log=$(mktemp)
  if ! { $SUDO apt-get update -qq && \
         $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    echo "setup.sh: installing Debian packages failed (log above)" >&2
    exit 1
  fi
  rm -f "$apt_log"
else
  say "Debian packages: all ${#APT_PACKAGES[@]} present"
fi
phase_done "packages"

# --- 2. Python venv keyed by the pins -----------------------------------------------------------
PYTHON=${ATTNZOO_BASE_PYTHON:-python3}
REQS="$ROOT/tools/requirements/requirements.lock"
VENV=$(ATTNZOO_BASE_PYTHON="$PYTHON" "$ROOT/tools/requirements/venv_path.sh")
CACHE_ROOT=$(dirname "$VENV")
UV_VERSION=0.9.30
install_pins() { # install_pins FILE [TARGET]: FILE's exact pins, without dependencies, into the
  # venv (or into the folder TARGET)
  local target=()
  [ $# -lt 2 ] || target=(--target "$2")
  if [ ! -x "$VENV/bin/uv" ]; then
    "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "uv==$UV_VERSION" ||
      say "uv $UV_VERSION did not install; pip installs the pins"
  fi
  if [ -x "$VENV/bin/uv" ]; then
    # uv reads no pip configuration: pip's index and wheel-folder variables are passed on.
    local env=()
    [ -z "${PIP_INDEX_URL:-}" ] || env+=("UV_INDEX_URL=$PIP_INDEX_URL")
    [ -z "${PIP_EXTRA_INDEX_URL:-}" ] || env+=("UV_EXTRA_INDEX_URL=$PIP_EXTRA_INDEX_URL")
    [ -z "${PIP_FIND_LINKS:-}" ] || env+=("UV_FIND_LINKS=$PIP_FIND_LINKS")
    if env "${env[@]}" "$VENV/bin/uv" pip install --python "$VENV/bin/python" "${target[@]}" \
      --no-deps -r "$1"; then
      return 0
    fi
    say "uv could not install $1; pip tries"
  fi
  # Plain progress lines rather than bars: this is often read from a log.
  "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "${target[@]}" \
    --no-deps -r "$1"
}
if [ ! -f "$VENV/.attnzoo-complete" ]; then
  say "creating venv $VENV from tools/requirements/requirements.lock (about a minute, once per set of pins)"
  mkdir -p "$CACHE_ROOT"
  rm -rf "$VENV" # an interrupted earlier attempt: start over (uv's cache keeps the downloads)
  "$PYTHON" -m venv "$VENV"
  install_pins "$REQS"
  touch "$VENV/.attnzoo-complete"
else
  say "venv ready: $VENV"
fi
VPY="$VENV/bin/python"
# Reference packages installed without their dependencies, stamped by the file's content.
NODEPS="$ROOT/tools/requirements/requirements-nodeps.txt"
nodeps_stamp="$VENV/.attnzoo-nodeps-$(sha256sum "$NODEPS" | cut -c1-12)"
if [ ! -f "$nodeps_stamp" ]; then
  say "installing tools/requirements/requirements-nodeps.txt without dependencies"
  install_pins "$NODEPS"
  rm -f "$VENV"/.attnzoo-nodeps-*
  touch "$nodeps_stamp"
fi
# Reference dependencies in folders of their own that only their fixtures put on their sys.path,
# stamped by the file's content: ESPnet's inference (requirements-espnet-inference.txt says why)
# and NeMo's ASR collection (requirements-nemo-asr.txt), into <venv>/espnet-inference and
# <venv>/nemo-asr.
for folder in espnet-inference nemo-asr; do
  reqs="$ROOT/tools/requirements/requirements-$folder.txt"
  stamp="$VENV/$folder/.attnzoo-$(sha256sum "$reqs" | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    say "installing tools/requirements/requirements-$folder.txt into $VENV/$folder"
    rm -rf "${VENV:?}/$folder"
    install_pins "$reqs" "$VENV/$folder"
    touch "$stamp"
  fi
done
TORCH_PREFIX=$("$VPY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
phase_done "venv"

# --- 3. Data of the shipped models --------------------------------------------------------------
# Never committed, made here: the 5000 handwritten digits of opencv-doc's digits.png, and the test
# splits of the spoken keywords and digit strings (espeak-ng). The scripts leave a complete data
# set alone, so a re-run costs a checksum. The training splits are made on demand
# (configs/train/).
DATA_DIR="$ROOT/build/data"
if [ "$DO_DATA" -eq 1 ]; then
  "$VPY" "$ROOT/tools/data/make_digits.py" "$DATA_DIR/digits"
  "$VPY" "$ROOT/tools/data/make_keywords.py" --split test "$DATA_DIR/keywords"
  "$VPY" "$ROOT/tools/data/make_digit_strings.py" --split test "$DATA_DIR/digit_strings"
  say "data: $DATA_DIR/digits (train, test), $DATA_DIR/keywords (test), $DATA_DIR/digit_strings (test)"
else
  say "data: skipped (--no-data); tools/setup.sh makes it"
fi
phase_done "data"

# --- 4. Configure and build ---------------------------------------------------------------------
[ "$DO_BUILD" -eq 1 ] || { say "skipping the build (--no-build)"; exit 0; }
# The C++ compiler: $CXX where set, else clang (step 1 installs it for the sanitizer trees), else
# GCC. On LibTorch's headers clang is the faster compiler: a cold build of the CLI took 306 s
# against GCC's 465 s on 2 cores, its C++ 375 s of CPU against 653 (docs/build.md). nvcc keeps
# GCC as its host compiler (cmake/Cuda.cmake).
CXX_COMPILER=$(command -v "${CXX:-clang++}" || command -v g++)
cached_python="" cached_cxx=""
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cached_python=$(sed -n 's/^ATTNZOO_PYTHON:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
  cached_cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
fi
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ "$cached_python" != "$VPY" ] ||
   [ "$cached_cxx" != "$CXX_COMPILER" ]; then
  say "configuring $BUILD_DIR ($BUILD_TYPE, $(basename "$CXX_COMPILER"))"
  # LibTorch's CMake files look for a Python interpreter: the venv's, named here, is found at once
  # (searching PATH can go through slow shims such as pyenv's).
  # Another venv: LibTorch's cached locations (Torch_DIR, Caffe2_DIR, ...) point into the old one.
  # Another compiler: CMake keeps a tree's compiler for good; the tree is configured anew.
  [ -z "$cached_python" ] || rm -f "$BUILD_DIR/CMakeCache.txt"
  [ -z "$cached_cxx" ] || [ "$cached_cxx" = "$CXX_COMPILER" ] || rm -rf "$BUILD_DIR/CMakeFiles"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCMAKE_CXX_COMPILER="$CXX_COMPILER" \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DATTNZOO_PYTHON="$VPY" \
    -DPython_EXECUTABLE="$VPY" \
    ${ATTNZOO_CMAKE_ARGS:-}
fi
phase_done "configure"
# Two cores and LibTorch's heavy headers: more than two jobs only adds memory pressure.
JOBS=${ATTNZOO_JOBS:-$(nproc)}
target_args=()
for t in "${TARGETS[@]}"; do target_args+=(--target "$t"); done
say "building ${TARGETS[*]:-everything} with $JOBS jobs"
cmake --build "$BUILD_DIR" -j "$JOBS" "${target_args[@]}"
phase_done "build"
say "done: $BUILD_DIR/bin/attnzoo"
