#!/usr/bin/env bash
# CPU benchmark on a realistic random-weight model: writes the checkpoint of $CONFIG (default: the real
# V4-Flash layer shapes with 4 layers, configs/bench-v4-flash-4layer.json) into build/models/ once with
# `deepinfer make-model`, then runs `deepinfer bench` on it (measured ceilings, prefill and decode figures).
# Extra arguments go to `deepinfer bench`, e.g. scripts/bench.sh --prefill 512,4096 --batch 1,4,16.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CONFIG=${CONFIG:-configs/bench-v4-flash-4layer.json}
MODEL_DIR=${MODEL_DIR:-build/models/$(basename "$CONFIG" .json)}
SEED=${SEED:-1}

if [ ! -x "$BUILD_DIR/deepinfer" ]; then
  echo "error: $BUILD_DIR/deepinfer not built (run scripts/build.sh or set BUILD_DIR)" >&2
  exit 1
fi
if [ ! -f "$MODEL_DIR/model.safetensors.index.json" ] || ! cmp -s "$CONFIG" "$MODEL_DIR/config.json"; then
  echo "writing the benchmark checkpoint $MODEL_DIR (once; random weights, seed $SEED)" >&2
  rm -rf "$MODEL_DIR"
  "$BUILD_DIR/deepinfer" make-model --config "$CONFIG" --out "$MODEL_DIR" --seed "$SEED" --shards 16
fi
# This benchmark measures the kernels against memory bandwidth, not the disk. --prefault touches every weight
# page before each timed phase; --mlock (root, or an unlimited `ulimit -l`) also keeps them in RAM during the
# phase: a reclaimer that pages out memory untouched for a few seconds (DAMON pageout on this project's VMs)
# otherwise dropped the experts of later layers between the prefault and their first use, and a 512-token
# prefill then read them back from disk (184K page faults; a third of its time in FP4 tile decoding).
# MLOCK=0 turns it off.
LOCK=()
if [ "${MLOCK:-1}" = 1 ] && { [ "$(id -u)" = 0 ] || [ "$(ulimit -l)" = unlimited ]; }; then LOCK=(--mlock); fi
# --paired-reads: each decode step is also compared with a read loop over the head weights run right after it
# (this shared host's read rate moves by up to half between consecutive measurements); --paired-peak: each
# prefill with the peak arithmetic rate measured right before and after it.
exec "$BUILD_DIR/deepinfer" bench --model "$MODEL_DIR" --prefault --paired-reads --paired-peak "${LOCK[@]}" "$@"
