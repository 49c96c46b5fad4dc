#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, creates the embedded default model
# (a small DeepSeek-V4-architecture checkpoint with RANDOM weights, in the real on-disk format, with the
# real V4 tokenizer when it can be fetched) and runs a generation on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
MODEL_DIR="$BUILD_DIR/models/deepinfer-v4-tiny"
if [ ! -f "$MODEL_DIR/model.safetensors.index.json" ]; then
  tokenizer_args=()
  if bash scripts/fetch_tokenizers.sh "$BUILD_DIR/tokenizers" >/dev/null 2>&1; then
    tokenizer_args=(--tokenizer "$BUILD_DIR/tokenizers/v4/tokenizer.json")
  fi
  "$BUILD_DIR/deepinfer" make-model --config configs/deepinfer-v4-tiny.json --seed 7 --out "$MODEL_DIR" "${tokenizer_args[@]}"
fi
if [ -f "$MODEL_DIR/tokenizer.json" ]; then
  "$BUILD_DIR/deepinfer" generate --model "$MODEL_DIR" --prompt "Hello! Who are you?" --max-tokens 32 "$@"
else  # no tokenizer could be fetched: token ids in, token ids out
  "$BUILD_DIR/deepinfer" generate --model "$MODEL_DIR" --prompt-ids 0,128803,30594,128804 --max-tokens 32 "$@"
fi
