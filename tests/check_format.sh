#!/usr/bin/env bash
# check_format.sh CLANG_FORMAT: fails, listing the files, when a tracked C++/CUDA source of the
# repository is not formatted with the repository's .clang-format.
set -u
clang_format=$1
mapfile -t files < <(git ls-files -- '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null)
if [ ${#files[@]} -eq 0 ]; then
  # Not a git checkout (e.g. an exported tarball): check what is on disk.
  mapfile -t files < <(find core layers kernels tools tests models preprocess configs io api train decoding serve \
    \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null)
fi
bad=()
for f in "${files[@]}"; do
  "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not clang-format clean (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "clang-format clean: ${#files[@]} files"
