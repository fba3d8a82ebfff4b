#!/usr/bin/env bash
# cli_test.sh CASE ATTNZOO_BINARY: runs one scenario and checks its exit status and output.
set -u
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
scenario "$@"

case "$case_name" in
  version)
    run 0 version
    expect stdout '^attnzoo [0-9]+\.[0-9]+\.[0-9]+$'
    expect stdout '^LibTorch 2\.11\.0'
    expect stdout '^LibTorch CUDA build: (no|CUDA [0-9]+\.[0-9]+); CUDA devices: (none|[0-9]+)$'
    expect stdout '^CUDA kernels: '
    expect stdout '^OpenCV 4\.'
    expect stdout '^libsndfile 1\.'
    expect stdout '^libsoxr 0\.'
    expect stdout '^yaml-cpp 0\.'
    # The zoo of the build tree, found beside the library: share/attnzoo, a link to configs/.
    expect stdout '^library: /.*/lib/libattnzoo_configs\.so'
    expect stdout '^  build tree: /.*/share/attnzoo: [0-9]+ models$'
    ;;
  version_zoo_path)
    # --zoo, then ATTNZOO_ZOO_PATH (a missing entry is listed as such), then the build tree.
    zoo=$(mktemp -d)
    # A model of the zoo under another name (the zoo beside the binary: build/share/attnzoo).
    sed 's/^name: .*/name: my_vit/' "$(dirname "$bin")/../share/attnzoo/vit/vit_tiny_patch16_224.yaml" \
      >"$zoo/my_vit.yaml"
    ATTNZOO_ZOO_PATH="$zoo/missing:$zoo" run 0 --zoo "$zoo" version
    expect stdout "^  added \\(--zoo\\): $zoo: 1 models$"
    expect stdout "^  ATTNZOO_ZOO_PATH: $zoo/missing: missing$"
    expect stdout "^  ATTNZOO_ZOO_PATH: $zoo: 1 models$"
    expect stdout '^  build tree: /.*/share/attnzoo: [0-9]+ models$'
    ATTNZOO_ZOO_PATH="$zoo" run 0 models
    expect stdout "^my_vit +vit "
    expect stdout "^vit_digits +vit "
    run 2 --zoo "$zoo/missing" models
    expect stderr "zoo"
    rm -rf "$zoo"
    ;;
  unknown_command)
    run 2 frobnicate
    lines stderr 1
    expect stderr "^attnzoo: unknown command 'frobnicate'"
    ;;
  bad_flag)
    run 2 version --no-such-flag
    lines stderr 1
    expect stderr '^attnzoo: .*--no-such-flag'
    ;;
  missing_subcommand)
    run 2
    lines stderr 1
    expect stderr '^attnzoo: .*subcommand'
    ;;
  help)
    run 0 --help
    expect stdout 'version'
    expect stdout 'models'
    expect stdout 'demo'
    ;;
  demo)
    run 0 demo --length 32 --dim 64 --heads 4 --png "$out/map.png"
    expect stdout 'all checks passed'
    expect stdout 'backend sdpa: max \|out - math\|'
    is_png "$out/map.png"
    ;;
  demo_bad_value)
    run 1 demo --dim 30 --heads 4
    lines stderr 1
    expect stderr '^attnzoo demo: --heads must divide --dim'
    run 2 demo --length abc
    expect stderr '--length'
    ;;
  *)
    echo "unknown case $case_name"
    exit 1
    ;;
esac
echo "PASS: $case_name"
