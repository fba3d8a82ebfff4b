#!/usr/bin/env bash
# The sm_90a flash attention forward really uses Hopper's warpgroup MMA: every flash_fwd_kernel
# instantiation in the library's sm_90a code holds HGMMA instructions (and the sm_80 ones HMMA).
# cuobjdump comes from PATH or from the triton package beside torch in the venv (the CUDA
# toolkit here ships none).
#   check_sass.sh LIBRARY PYTHON
set -euo pipefail
lib=$(realpath "$1") python=$2
cuobjdump=$(command -v cuobjdump || true)
if [ -z "$cuobjdump" ]; then
  cuobjdump=$("$python" -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))')
fi
[ -x "$cuobjdump" ] || { echo "check_sass.sh: no cuobjdump (PATH or triton)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Disassembling the whole library takes a minute (the backward kernels are most of it): extract
# its cubins and disassemble only those that hold a flash_fwd_kernel.
(cd "$work" && "$cuobjdump" -xelf all "$lib" >/dev/null)
mapfile -t cubins < <(grep -l flash_fwd_kernel "$work"/*.cubin)
[ ${#cubins[@]} -gt 0 ] || { echo "check_sass.sh: no cubin of $lib holds a flash_fwd_kernel"; exit 1; }
dump=$work/sass.txt
# A cubin's dump starts with "code for sm_90" (the "a" is not shown; wgmma exists only on sm_90a).
for cubin in "${cubins[@]}"; do "$cuobjdump" -sass "$cubin" 2>/dev/null; done >"$dump"
# Per (arch, function): the count of HGMMA and HMMA instructions.
awk '
  /code for sm_/ { arch = ($3 ~ /^sm_90/) ? "sm_90a" : $3 }
  /Function :/ { fn = $3; if (fn ~ /flash_fwd_kernel/) { key = arch " " fn; seen[key] = 1 } }
  /HGMMA/ { if (fn ~ /flash_fwd_kernel/) hgmma[arch " " fn]++ }
  /HMMA/ { if (fn ~ /flash_fwd_kernel/) hmma[arch " " fn]++ }
  END {
    bad = 0; n90 = 0; n80 = 0
    for (k in seen) {
      split(k, part, " ")
      if (part[1] == "sm_90a") { n90++; if (hgmma[k] == 0) { print "no HGMMA: " k; bad = 1 } }
      if (part[1] == "sm_80") { n80++; if (hmma[k] == 0 || hgmma[k] > 0) { print "sm_80 without HMMA: " k; bad = 1 } }
    }
    printf "flash_fwd_kernel instantiations checked: %d for sm_90a, %d for sm_80\n", n90, n80
    if (n90 == 0) { print "no sm_90a flash_fwd_kernel in the library"; bad = 1 }
    exit bad
  }' "$dump"
