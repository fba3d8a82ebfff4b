# Helpers of the CLI scenario tests, sourced by *_test.sh after they set $bin (the attnzoo binary)
# and $out (a scratch folder).

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
