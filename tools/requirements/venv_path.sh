#!/usr/bin/env bash
# Prints the folder of the venv that tools/setup.sh makes for the pins of requirements.lock: one
# venv per Python version and set of pins, outside the checkout. Comment lines of the lock do not
# count, so that only a change of a pin makes a new venv.
#   venv_path.sh   ($ATTNZOO_BASE_PYTHON: the Python to make it with, default python3)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$({ "${ATTNZOO_BASE_PYTHON:-python3}" -c 'import sys; print(sys.version)'
        grep -v '^#' "$here/requirements.lock"; } | sha256sum | cut -c1-12)
echo "${XDG_CACHE_HOME:-$HOME/.cache}/attnzoo/venv-$key"
