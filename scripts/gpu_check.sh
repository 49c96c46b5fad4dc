#!/usr/bin/env bash
# The one prepared GPU run (an H200; the first run, 2026-12-04, took 40 s after a 1-2 minute machine start,
# without the end-to-end stage). On the CPU machine first: `bash scripts/gpu_prepare.sh` (fills .gpu/),
# then run(command="bash scripts/gpu_check.sh", carry=[".gpu"], timeout_s=540). Do not give the machine
# back between a failed run and its rerun: a fresh machine may not be lent again in the same session.
#   1. configure and build the CUDA backend for sm_90a only: cuda_tests and cuda_kernel_timing;
#   2. cuda_tests, one process per test suite: every kernel against the CPU reference backend, the golden
#      models end to end and op by op, each on both linear paths (mma, the tensor-core default, and the portable
#      fma) with the fused attention, and on mma with the split attention (DEEPINFER_CUDA_ATTENTION=split, not
#      yet run on a GPU); the golden models also with the cache rows decoded on the device (DEEPINFER_CUDA_KV=
#      packed, the same); the linear tests also on mma_staged and mma_split (the staged tensor-core kernel,
#      unsplit and split over K, not yet run); the FP8-operand prompt linear (LinearFp8Cuda, GoldenCudaFp8Prompt,
#      not yet run; its wgmma kernel too: the LinearFp8Cuda.Wgmma* tests and GoldenCudaWgmmaPrompt);
#   3. cuda_kernel_timing: per-kernel GB/s and TFLOP/s against a device-to-device copy and cuBLASLt;
#   4. compute-sanitizer memcheck over the tensor-core linear, attention, index, MoE, chain, kept-array and draw tests
#      (SANITIZE=0 skips it);
#   5. `serve --backend cuda` answers one completion (the engine path); deepinfer bench --backend cuda
#      --op-times on the 4-layer benchmark model: the defaults, decode batch 256 and decode at 2048 tokens of
#      context with the cache rows as floats, packed and mirrored on the device (DEEPINFER_CUDA_KV), and read
#      packed by the attention kernels (DEEPINFER_CUDA_ATTENTION_ROWS=packed; with every device path, the index
#      scores on the tensor cores too, DEEPINFER_CUDA_INDEX_SCORES=mma), half
#      the experts on the host (DEEPINFER_CUDA_WEIGHT_GB=8), the device FFN side (DEEPINFER_CUDA_MOE=device) alone
#      and with the device chains (DEEPINFER_CUDA_LINEAR_CHAIN=device; with both, each block's tail is one call), the
#      split attention, the FMA linear, the index keys mirrored with the top-k selection on the device
#      (DEEPINFER_CUDA_INDEX_SELECT=device), and kept there for the attention (kept; also at 16384 tokens of
#      context), and last decode batch 64 at temperature 1, then batch 1 and 64 at top-p 0.95 with log-probabilities,
#      with every device path (the head on the kept stream, the draws on the device), and batch 1 again with each
#      draw spread over blocks (DEEPINFER_CUDA_ROW_DRAWS=split) (E2E=0 skips it);
#   6. compute-sanitizer racecheck over the attention, index, kept-array and draw tests, with the time left (RACECHECK=0
#      skips it).
#   Every stage is cut short at DEADLINE=510 s after the start, so that the summary prints within the call. The second run (2026-12-04, all five stages) took 196 s.
# Logs go to $OUT (the device tool brings them back) or /tmp/gpu_check; the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
# $OUT brings back at most 8 files: the five results (cuda_tests.log, timing.txt, sanitizer.log, e2e.txt, racecheck.log)
# go there, the build and setup logs to LOG_DIR, and a log that explains a failure is copied over.
OUT_DIR=${OUT:-/tmp/gpu_check}
LOG_DIR=/tmp/gpu_check_logs
mkdir -p "$OUT_DIR" "$LOG_DIR"
t0=$(date +%s)
step() { echo "== $(( $(date +%s) - t0 ))s: $*"; }
# Every stage ends by DEADLINE seconds after the start (the device call's 540 s, less the summary), whatever
# its own limit: the limits below add up to more than the call allows when a stage hangs.
DEADLINE=${DEADLINE:-510}
# limit_for N: N seconds, or what is left before DEADLINE if that is less (0 when nothing is).
limit_for() {
  local left=$(( DEADLINE - ($(date +%s) - t0) ))
  [ "$left" -lt 0 ] && left=0
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

# The project's Debian build dependencies, unpacked (not installed) from .gpu/debs. The deps' bin folder
# goes last on PATH so that a pkg-config of the machine's own wins.
DEPS=/tmp/gpu-deps
if compgen -G ".gpu/debs/*.deb" >/dev/null; then
  mkdir -p "$DEPS"
  for f in .gpu/debs/*.deb; do dpkg -x "$f" "$DEPS"; done
  for f in .gpu/*.tar.gz; do [ -f "$f" ] && tar -C "$DEPS" -xzf "$f"; done  # -dev headers (gpu_prepare.sh)
  ML=$DEPS/usr/lib/x86_64-linux-gnu
  export CMAKE_PREFIX_PATH="$DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_LIBDIR="$ML/pkgconfig:$DEPS/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$DEPS"
  export LD_LIBRARY_PATH="$ML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$PATH:$DEPS/usr/bin"
  command -v pkg-config >/dev/null || ln -sf "$DEPS/usr/bin/pkgconf" "$DEPS/usr/bin/pkg-config"
fi
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
GTEST_SRC=""  # googletest built from source (from the googletest .deb) when the machine has none
[ -d "$DEPS/usr/src/googletest" ] && GTEST_SRC="$DEPS/usr/src/googletest"
GOLDEN=${GOLDEN:-$PWD/.gpu/golden}
[ -d "$GOLDEN" ] || GOLDEN=$PWD/../shared/golden

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
nvcc --version | tail -2

step "configure (sm_90a)"
BUILD=build-gpu
if ! cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DDEEPINFER_PYTHON=OFF -DDEEPINFER_BENCH=OFF -DDEEPINFER_GOLDEN_DIR="$GOLDEN" -DCMAKE_CUDA_FLAGS=-Xptxas=-v \
    ${GTEST_SRC:+-DDEEPINFER_GTEST_SOURCE=$GTEST_SRC} \
    >"$LOG_DIR/configure.log" 2>&1; then
  cp "$LOG_DIR/configure.log" "$OUT_DIR/"
  tail -40 "$LOG_DIR/configure.log"
  echo "gpu_check: configure failed (log: configure.log)"
  exit 1
fi
step "build"
if ! ninja -C $BUILD -k 0 -j16 cuda_tests cuda_kernel_timing >"$LOG_DIR/build.log" 2>&1; then
  cp "$LOG_DIR/build.log" "$OUT_DIR/"
  grep -E "error" -A3 "$LOG_DIR/build.log" | head -60
  echo "gpu_check: build failed (log: build.log)"
  exit 1
fi
grep -E "spill stores" "$LOG_DIR/build.log" | grep -v " 0 bytes spill stores" | head -5

step "cuda_tests (kernels vs the CPU reference, golden models end to end)"
# One process per test suite, so that a crash in one (most kernels' latest changes have not run on a GPU yet)
# still leaves the other suites' results; all of them within 240 s.
: >"$OUT_DIR/cuda_tests.log"
tests_rc=0
tests_end=$(( $(date +%s) + $(limit_for 240) ))
for suite in $(./$BUILD/tests/cuda_tests --gtest_list_tests | grep -E '^[A-Za-z].*\.$'); do
  left=$(( tests_end - $(date +%s) ))
  [ "$left" -lt 10 ] && left=10
  echo "=== $suite" >>"$OUT_DIR/cuda_tests.log"
  timeout "$left" ./$BUILD/tests/cuda_tests --gtest_filter="$suite*" >>"$OUT_DIR/cuda_tests.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    tests_rc=$rc
    echo "cuda_tests $suite exit code $rc"
  fi
done
# The per-kernel lines stay in cuda_tests.log (it comes back with the reply); shown here: the golden runs'
# figures and the op-by-op rows whose GPU outputs are more than 1 bf16 ulp off the reference anywhere.
grep -E "top1 |^\s+op \(kind" "$OUT_DIR/cuda_tests.log" | head -20
awk '/^  (linear|hc_mix|sparse_attention|index_scores) / && $NF > 0' "$OUT_DIR/cuda_tests.log" | head -30
grep -E "Failure|FAILED|error" "$OUT_DIR/cuda_tests.log" | head -30

step "kernel timing"
limit=$(limit_for 180)
if [ "$limit" -ge 10 ]; then
  timeout "$limit" ./$BUILD/cuda_kernel_timing >"$OUT_DIR/timing.txt" 2>&1
  timing_rc=$?
else
  echo "(skipped: the deadline has passed)" >"$OUT_DIR/timing.txt"
  timing_rc=skipped
fi

# compute-sanitizer's memcheck over the tensor-core linear (all its kernels: mma_staged / mma_split run the staged
# one, unsplit / split over K, from 64 tokens, the register one below), both attention paths, the index scores and
# top-k, the device MoE, its FFN side, the block tail, the device linear chain and the kept arrays (written without a
# GPU at hand): out-of-bounds or misaligned accesses show here even where the results happen to come out right.
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# sanitize TOOL LIMIT LOG FILTER: cuda_tests' FILTER under compute-sanitizer's TOOL for at most LIMIT seconds (and
# not past DEADLINE; skipped with under 30 s left), its report in $OUT_DIR/LOG, its exit code in sanitize_rc
# (skipped, 0 = clean, 9 = errors found, 124 = cut short by its limit). racecheck sees shared-memory hazards inside
# kernels only; the host's staging against queued copies is the emulated tests' (DEEPINFER_CUDA_WAIT).
sanitize() {
  local tool=$1 limit=$2 log=$3 filter=$4
  sanitize_rc=skipped
  [ -x "$SANITIZER" ] && [ "$(limit_for "$limit")" -ge 30 ] || return
  step "compute-sanitizer $tool"
  timeout "$(limit_for "$limit")" "$SANITIZER" --tool "$tool" --error-exitcode 9 ./$BUILD/tests/cuda_tests \
    --gtest_filter="$filter" >"$OUT_DIR/$log" 2>&1
  sanitize_rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|misaligned|hazard" "$OUT_DIR/$log" | head -8
}
sanitizer_rc=skipped
if [ "${SANITIZE:-1}" = 1 ]; then
  sanitize memcheck 150 sanitizer.log 'Paths/LinearCuda.Fp8Block128/mma_split:Paths/LinearCuda.Fp8Block128/mma_staged:Paths/LinearCuda.Fp4Experts/mma_staged:Paths/LinearCuda.NonBf16Activations/mma_staged:Paths/LinearCuda.UnevenKSlices/mma_split:Paths/LinearCuda.BatchedOpsMatchSingleOps/mma_staged:Paths/SparseAttentionCuda.*:IndexScoresCuda.*:IndexSelectCuda.*:LinearFp8Cuda.BatchedOpsMatchSingleOps:LinearFp8Cuda.Fp4ExpertWeights:MoeCuda.DeviceMoeEqualsTheHostPathBitForBit:MoeSideCuda.*:LinearChainCuda.Device*:KeptArraysCuda.*:KeptSelectionsCuda.*:LinearDrawsCuda.*:RowDrawKernelsCuda.*'
  sanitizer_rc=$sanitize_rc
fi

# End to end: `deepinfer bench --backend cuda` on the 4-layer V4-Flash benchmark model (real widths, random
# weights, written here: 16 GB) as the model code drives the backend today (host activations, one sync per
# op). Last, and bounded, so that a failure or a slow machine cannot hide the table above. E2E=0 skips it.
e2e_rc=skipped
if [ "${E2E:-1}" = 1 ] && [ "$(limit_for 120)" -ge 60 ]; then
  step "end to end: build the CLI, write the benchmark model, bench --backend cuda"
  MODEL=/tmp/bench-v4-flash-4layer
  if ninja -C $BUILD -j16 deepinfer >"$LOG_DIR/build_cli.log" 2>&1 &&
     timeout "$(( $(limit_for 120) + 1 ))" ./$BUILD/deepinfer make-model --config configs/bench-v4-flash-4layer.json --out $MODEL --seed 1 \
       --shards 16 >"$LOG_DIR/make_model.log" 2>&1; then
    # Each run bounded by its own limit and by what is left before DEADLINE (a run with under 30 s left is
    # skipped, so that the summary below still prints within the device call).
    # bench_run LABEL LIMIT [VAR=VALUE ...] -- BENCH ARGS...
    bench_run() {
      local label=$1 limit=$2 left
      shift 2
      local env=()
      while [ "$1" != "--" ]; do env+=("$1"); shift; done
      shift
      left=$(limit_for "$limit")
      echo "== $label" >>"$OUT_DIR/e2e.txt"
      if [ "$left" -lt 30 ]; then
        echo "(skipped: ${left}s left of the script's budget)" >>"$OUT_DIR/e2e.txt"
        e2e_rc="$e2e_rc, $label skipped"
        return
      fi
      limit=$left
      env "${env[@]}" timeout "$limit" ./$BUILD/deepinfer bench --model $MODEL --backend cuda --skip-ceiling --op-times "$@" \
        >>"$OUT_DIR/e2e.txt" 2>&1 || e2e_rc="$e2e_rc, $label $?"
    }
    : >"$OUT_DIR/e2e.txt"
    e2e_rc=0
    # The engine path: `serve --backend cuda` (the model runs on the engine's worker thread, not the one that
    # opened it) answers a greedy token-id completion of 8 tokens on the golden flash-tiny model.
    serve_rc=skipped
    if command -v curl >/dev/null; then
      ./$BUILD/deepinfer serve --backend cuda --model "$GOLDEN/v4-flash/flash-tiny" --port 18555 >"$LOG_DIR/serve.log" 2>&1 &
      serve_pid=$!
      for _ in $(seq 1 120); do
        grep -q "listening on" "$LOG_DIR/serve.log" && break
        kill -0 "$serve_pid" 2>/dev/null || break  # exited: its log says why
        sleep 0.5
      done
      reply=$(curl -s -m 60 http://127.0.0.1:18555/v1/completions -H 'content-type: application/json' \
              -d '{"model": "flash-tiny", "prompt": [0, 5, 9], "max_tokens": 8, "temperature": 0}')
      kill "$serve_pid" 2>/dev/null
      echo "== serve --backend cuda, one completion: $reply" >>"$OUT_DIR/e2e.txt"
      if echo "$reply" | grep -q '"completion_tokens":8'; then serve_rc=0; else serve_rc=failed; tail -5 "$LOG_DIR/serve.log"; fi
    fi
    e2e_rc="0, serve $serve_rc"
    # The defaults (tensor-core linear, fused attention, cache rows as floats), with each step split by op kind.
    bench_run defaults 200 -- --prefill 128,512 --batch 1,8,64 --decode-steps 8
    # A block's whole FFN side on the device in one call (DEEPINFER_CUDA_MOE=device), then with the attention side's
    # front and its output projection in one call each too (DEEPINFER_CUDA_LINEAR_CHAIN=device); neither has run on
    # a GPU yet.
    bench_run "DEEPINFER_CUDA_MOE=device" 100 DEEPINFER_CUDA_MOE=device -- --prefill 128 --batch 1,8,64 --decode-steps 8
    bench_run "DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device" 100 DEEPINFER_CUDA_MOE=device \
      DEEPINFER_CUDA_LINEAR_CHAIN=device -- --prefill 128 --batch 1,8,64 --decode-steps 8
    # The issue's largest decode batch (its 256 sequences' prompts are set up first).
    bench_run "decode batch 256" 100 -- --prefill 16 --batch 256 --decode-steps 4
    # The same with the cache rows packed: the floats path decodes and gathers ~160k rows per layer on the host.
    bench_run "decode batch 256, DEEPINFER_CUDA_KV=packed" 100 DEEPINFER_CUDA_KV=packed -- --prefill 16 --batch 256 --decode-steps 4
    # And kept on the device by stamp (DEEPINFER_CUDA_KV=mirror): a step copies only the rows written since.
    bench_run "decode batch 256, DEEPINFER_CUDA_KV=mirror" 100 DEEPINFER_CUDA_KV=mirror -- --prefill 16 --batch 256 --decode-steps 4
    # And read packed by the attention kernels (DEEPINFER_CUDA_ATTENTION_ROWS=packed, not yet run on a GPU): no float
    # copy of the step's ~160k rows a layer written and read again (335 MB each way).
    bench_run "decode batch 256, mirror, DEEPINFER_CUDA_ATTENTION_ROWS=packed" 100 DEEPINFER_CUDA_KV=mirror \
      DEEPINFER_CUDA_ATTENTION_ROWS=packed -- --prefill 16 --batch 256 --decode-steps 4
    # Batch-1 decode after a 2048-token context, the cache rows handed over as floats, then packed (decoded on
    # the device): at long context the rows' copy is a step's largest transfer.
    bench_run "context 2048, DEEPINFER_CUDA_KV=floats" 90 DEEPINFER_CUDA_KV=floats -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    bench_run "context 2048, DEEPINFER_CUDA_KV=packed" 90 DEEPINFER_CUDA_KV=packed -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    bench_run "context 2048, DEEPINFER_CUDA_KV=mirror" 90 DEEPINFER_CUDA_KV=mirror -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    # And the top-k selection on the device (DEEPINFER_CUDA_INDEX_SELECT=device, not yet run on a GPU): the index
    # call's selections come back instead of its scores.
    bench_run "context 2048, mirror, DEEPINFER_CUDA_INDEX_SELECT=device" 90 DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=device \
      -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    # Every device path together (the fewest calls a decode step makes today: 4 per ratio-4 layer, 2 of them waited for).
    bench_run "context 2048, every device path" 90 DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=device \
      DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device DEEPINFER_CUDA_ATTENTION_ROWS=packed \
      DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    # And the selections kept on the device (DEEPINFER_CUDA_INDEX_SELECT=kept, not yet run on a GPU): the attention builds
    # its compressed slots from them there, and the index call does not wait either (1 wait per layer, the front's).
    bench_run "context 2048, every device path, selections kept" 90 DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=kept \
      DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device DEEPINFER_CUDA_ATTENTION_ROWS=packed \
      DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    # And at 16384 tokens of context (not yet run on a GPU): 3584 rows beyond the selected ones a call, which only the
    # row mirror's limit since stop 49 keeps (Backend::kept_selection_extra_rows: 8192; 2048 before).
    bench_run "context 16384, every device path, selections kept" 90 DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=kept \
      DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device DEEPINFER_CUDA_ATTENTION_ROWS=packed \
      DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 1 --context 16384 --decode-steps 8
    # The same with every call waiting for the device (DEEPINFER_CUDA_WAIT=every-call): the attention and the tail
    # above return without a wait; this row's step time minus that one's is what that saves, and its op times charge
    # each call its own device time.
    bench_run "context 2048, every device path, DEEPINFER_CUDA_WAIT=every-call" 90 DEEPINFER_CUDA_WAIT=every-call \
      DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=device DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device \
      DEEPINFER_CUDA_ATTENTION_ROWS=packed DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 1 --context 2048 --decode-steps 8
    # Half the routed experts in host memory, their ops on the host's CPU kernels (place_experts): how a
    # checkpoint larger than the GPU (V4-Flash: 149 GB) runs.
    bench_run "DEEPINFER_CUDA_WEIGHT_GB=8" 100 DEEPINFER_CUDA_WEIGHT_GB=8 -- --prefill 128 --batch 1,8 --decode-steps 8
    # Prompt tokens' linears on FP8 operands (DEEPINFER_CUDA_PROMPT_LINEAR=fp8, not yet run on a GPU): the prefill rows.
    bench_run "DEEPINFER_CUDA_PROMPT_LINEAR=fp8" 100 DEEPINFER_CUDA_PROMPT_LINEAR=fp8 -- --prefill 128,512 --batch 1 --decode-steps 4
    # The same on the wgmma kernel (DEEPINFER_CUDA_PROMPT_LINEAR=wgmma, sm_90a only, not yet run on a GPU).
    bench_run "DEEPINFER_CUDA_PROMPT_LINEAR=wgmma" 100 DEEPINFER_CUDA_PROMPT_LINEAR=wgmma -- --prefill 128,512 --batch 1 --decode-steps 4
    bench_run "DEEPINFER_CUDA_ATTENTION=split" 100 DEEPINFER_CUDA_ATTENTION=split -- --prefill 128,512 --batch 1,8 --decode-steps 8
    bench_run "DEEPINFER_CUDA_LINEAR=fma" 100 DEEPINFER_CUDA_LINEAR=fma -- --prefill 128 --batch 1,8 --decode-steps 8
    # Batched decode with every device path (stops 55-56, not yet run on a GPU): each step's head on the stream the last
    # tail kept and its 64 draws at temperature 1 on the device (--op-times counts the heads on the kept stream), with
    # the time left.
    bench_run "decode batch 64 at temperature 1, every device path" 60 DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=kept \
      DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device DEEPINFER_CUDA_ATTENTION_ROWS=packed \
      DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 64 --context 256 --decode-steps 8 --temperature 1
    # The same at top-p 0.95 with log-probabilities (stops 57-58, not yet run on a GPU): the nucleus draws' first 1024
    # candidates and the log-probabilities' pass on the device; --op-times counts the rows whose logits came back.
    bench_run "decode batch 64 at top-p 0.95 with logprobs 5, every device path" 60 DEEPINFER_CUDA_KV=mirror \
      DEEPINFER_CUDA_INDEX_SELECT=kept DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device \
      DEEPINFER_CUDA_ATTENTION_ROWS=packed DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 1,64 --context 256 \
      --decode-steps 8 --temperature 0.8 --top-p 0.95 --logprobs 5
    # The same at batch 1 with each draw spread over blocks of 2,048 ids (DEEPINFER_CUDA_ROW_DRAWS=split, stop 59, not yet
    # run on a GPU): against the batch-1 row above, what one block a row costs a step.
    bench_run "decode batch 1 at top-p 0.95 with logprobs 5, every device path, split draws" 40 DEEPINFER_CUDA_ROW_DRAWS=split \
      DEEPINFER_CUDA_KV=mirror DEEPINFER_CUDA_INDEX_SELECT=kept DEEPINFER_CUDA_MOE=device DEEPINFER_CUDA_LINEAR_CHAIN=device \
      DEEPINFER_CUDA_ATTENTION_ROWS=packed DEEPINFER_CUDA_INDEX_SCORES=mma -- --prefill 16 --batch 1 --context 256 \
      --decode-steps 8 --temperature 0.8 --top-p 0.95 --logprobs 5
  else
    e2e_rc=failed
    cp "$LOG_DIR/build_cli.log" "$LOG_DIR/make_model.log" "$OUT_DIR/" 2>/dev/null
    grep -E "error" "$LOG_DIR/build_cli.log" | head -5
    tail -3 "$LOG_DIR/make_model.log" 2>/dev/null
  fi
fi

# Shared-memory races (compute-sanitizer's racecheck) in the kernels that share rows, scores or fragments between
# a block's threads: both attention paths, the index scores and top-k, the head work of the kept arrays, the
# draws. Last, with what time is left (RACECHECK=0 skips it).
racecheck_rc=skipped
if [ "${RACECHECK:-1}" = 1 ]; then
  sanitize racecheck 90 racecheck.log 'Paths/SparseAttentionCuda.*:IndexScoresCuda.*:IndexSelectCuda.*:KeptArraysCuda.*:KeptSelectionsCuda.*:LinearDrawsCuda.*:RowDrawKernelsCuda.*'
  racecheck_rc=$sanitize_rc
fi

step "summary"
# Per suite: its name, then gtest's PASSED / FAILED / SKIPPED lines (the failed and skipped tests listed).
grep -E "^=== |^\[  (PASSED|FAILED|SKIPPED) " "$OUT_DIR/cuda_tests.log" | grep -vE "^\[  (FAILED|SKIPPED) \] [A-Za-z/_.0-9]+ \([0-9]+ ms\)$"
echo "cuda_tests exit code $tests_rc (0 = all passed)"
cat "$OUT_DIR/timing.txt"
echo "timing exit code $timing_rc; memcheck exit code $sanitizer_rc (0 = clean, 9 = errors found, 124 = cut short)"
[ -f "$OUT_DIR/e2e.txt" ] && grep -vE "^(loaded|\[|writing|model |weights read|KV cache)|loading shard" "$OUT_DIR/e2e.txt" | tail -60
echo "e2e exit code $e2e_rc; racecheck exit code $racecheck_rc (0 = clean, 9 = hazards found, 124 = cut short); total $(( $(date +%s) - t0 ))s"
[ "$tests_rc" = 0 ] && [ "$timing_rc" = 0 ]
