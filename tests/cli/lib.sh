# shellcheck shell=bash
# Helpers of the CLI scenario tests, sourced by *_test.sh. Every scenario script takes CASE and
# ATTNZOO_BINARY as its first two arguments and calls `scenario "$@"` first; its own arguments
# follow ($3 ...). The helpers that run Python use $py, the interpreter the script was given.

scenario() { # scenario CASE ATTNZOO_BINARY ...: $case_name, $bin, and $out, a scratch folder removed on exit
  # shellcheck disable=SC2034 # case_name is read by the scripts
  case_name=$1
  bin=$2
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
}

run() { # run EXPECTED_STATUS ARGS...: runs the binary, keeps stdout/stderr, checks the status
  local expected=$1
  shift
  "$bin" "$@" >"$out/stdout" 2>"$out/stderr"
  local status=$?
  if [ "$status" -ne "$expected" ]; then
    echo "FAIL: attnzoo $* exited $status, expected $expected"
    sed 's/^/  stdout: /' "$out/stdout"
    sed 's/^/  stderr: /' "$out/stderr"
    exit 1
  fi
}

expect() { # expect FILE REGEX: FILE (stdout|stderr) must match REGEX
  if ! grep -Eq -- "$2" "$out/$1"; then
    echo "FAIL: $1 does not match /$2/:"
    sed 's/^/  /' "$out/$1"
    exit 1
  fi
}

lines() { # lines FILE N: FILE has exactly N lines
  local n
  n=$(wc -l <"$out/$1")
  [ "$n" -eq "$2" ] || { echo "FAIL: $1 has $n lines, expected $2"; cat "$out/$1"; exit 1; }
}

refused() { # refused STATUS REGEX ARGS...: one line on stderr matching REGEX, exit STATUS
  local status=$1 regex=$2
  shift 2
  run "$status" "$@"
  lines stderr 1
  expect stderr "$regex"
}

not_written() { # not_written FILE: the refused runs before wrote no FILE
  [ ! -e "$1" ] || { echo "FAIL: a refused run wrote $1"; exit 1; }
}

is_png() { # is_png FILE: the PNG signature, then an IHDR chunk
  head -c 16 "$1" | od -An -tx1 | tr -d ' \n' | grep -q '^89504e470d0a1a0a0000000d49484452' ||
    { echo "FAIL: $1 is not a PNG"; exit 1; }
}

same() { # same A B TOLERANCE [NAME...]: tensors NAME (all, the same names in both, when none
  # are named) of two safetensors files within TOLERANCE of each other
  # shellcheck disable=SC2154 # $py: the interpreter the script was given
  "$py" - "$@" <<'PY' || exit 1
import sys
from safetensors.torch import load_file

a, b, tolerance = load_file(sys.argv[1]), load_file(sys.argv[2]), float(sys.argv[3])
names = sys.argv[4:]
if not names:
    if sorted(a) != sorted(b):
        sys.exit(f"FAIL: the files hold {sorted(a)} and {sorted(b)}")
    names = sorted(a)
for name in names:
    x, y = a[name], b[name]
    diff = (x.double() - y.double()).abs().max().item() if x.shape == y.shape else float("inf")
    print(f"max |{name} a - b| = {diff:.3g}")
    if not diff <= tolerance:
        sys.exit(f"FAIL: {name} {tuple(x.shape)} vs {tuple(y.shape)} differ by {diff:.3g}")
PY
}
