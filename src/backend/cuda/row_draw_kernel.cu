// Each row's draw on the device (kernels.h: launch_row_draws), with model/token_draw.h's draw_token's answer: the
// argmax (model/ops.h's: the first index holding the row's largest value, NaNs passed over, 0 where every value is
// NaN), or the plain temperature draw, whose every IEEE operation token_draw.h writes out and this kernel runs in
// that order; for a nucleus draw that draw's total (row_top_k_kernel.cu finds the top-k and nucleus draws'
// candidates). Also the edits and masks made before the draws, and for log-probabilities the logits at the drawn ids
// and the candidates. A sampled or greedy step's draws then cross to the host as one id (or a few KB of candidates) a
// row instead of the vocabulary's logits (V4: 129,280 floats, 517 KB a row). A draw runs on one block a row, or for a
// launch of few rows spread over blocks of 2,048 ids in three launches (row_chunk_max_kernel, row_chunk_sums_kernel,
// row_walk_kernel) with the same operations in the same order.
#include <climits>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_exact_math.cuh"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/draw_keys.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kGroupIds = 8, kSpanGroups = 32, kSpanIds = kGroupIds * kSpanGroups;  // token_draw.h's
static_assert(kSpanGroups == 32, "a span is a warp: lane l sums group l");
constexpr int64_t kChunkSpans = kWarps;  // a split row's block: a span a warp
static_assert(kSpanIds == kRowDrawSpanIds && kChunkSpans * kSpanIds == kRowDrawChunkIds, "kernels.h's scratch sizes");
constexpr int kStaticSharedBytes = 4096;  // (the resource report: 2432 B, the walk kernel 2304 B)
static_assert(kRowDrawMaxWidth / kSpanIds * sizeof(double) + kStaticSharedBytes <= 48 * 1024,
              "the spans' sums fit the default shared memory beside the static arrays");

// (v, i) takes (w, j)'s place when it is larger, or equal at a lower index. A NaN v compares false both ways, so
// it never takes a place; INT_MAX marks "nothing yet" (every index is lower).
__device__ __forceinline__ void keep_better(float& v, int& i, float w, int j) {
  if (w > v || (w == v && j < i)) {
    v = w;
    i = j;
  }
}

// The largest value of row[begin, end) at its lowest index, NaNs passed over (*value: that value), to every thread;
// INT_MAX where there is none (every value NaN). Each thread walks its columns in ascending order, so the first of its
// equal values is kept; the block's reduction then takes the largest value at its lowest index. The pick is a total
// order's best, so ranges' picks merged with keep_better in any order give the whole row's.
__device__ int block_argmax(const float* row, int64_t begin, int64_t end, float* value) {
  float best = -__int_as_float(0x7f800000);  // -inf: a row of -inf values gives its first index, as on the host
  int at = INT_MAX;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) keep_better(best, at, row[i], int(i));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, best, off);
    const int j = __shfl_xor_sync(0xffffffffu, at, off);
    keep_better(best, at, w, j);
  }
  __shared__ float warp_best[kWarps];
  __shared__ int warp_at[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_at[warp] = at;
  }
  __syncthreads();
  best = warp_best[0];
  at = warp_at[0];
  for (int w = 1; w < kWarps; ++w) keep_better(best, at, warp_best[w], warp_at[w]);
  *value = best;
  return at;
}

// The row's argmax (model/ops.h's: 0 where every value is NaN), to every thread.
__device__ int block_argmax(const float* row, int64_t width) {
  float unused;
  const int at = block_argmax(row, 0, width, &unused);
  return at == INT_MAX ? 0 : at;
}

// v combined over the block's threads (warp by warp, then the warps in order), to every thread. A kernel calls it at
// most once for each T: the warps' values sit in one shared array a type.
template <class T, class Combine>
__device__ T block_reduce(T v, Combine combine) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, off));
  __shared__ T warp_values[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_values[warp] = v;
  __syncthreads();
  v = warp_values[0];
  for (int w = 1; w < kWarps; ++w) v = combine(v, warp_values[w]);
  return v;
}

// The largest s of row[begin, end) (-inf where the range is empty), to every thread. No s is NaN, so the order in
// which the maxima are taken only picks between +0 and -0, which weigh alike (exp_fixed(-0) = exp_fixed(+0)).
__device__ float block_max_scaled(const float* row, int64_t begin, int64_t end, float temperature) {
  float best = -__int_as_float(0x7f800000);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) best = fmaxf(best, scaled_logit(row[i], temperature));
  return block_reduce(best, [](float a, float b) { return fmaxf(a, b); });
}

// Whether row r's draw weighs its ids (the plain temperature draw, or a nucleus row's total); the others take the
// argmax (greedy rows, and top-k rows: their fallback). draws == nullptr: every row greedy.
__device__ __forceinline__ bool weighs_ids(const DeviceTokenDraw* draws, int64_t r) {
  return draws && draws[r].temperature > 0.0f && !(draws[r].top_k > 0 && !draws[r].nucleus);
}

// Group k's weights w[0, 8) (ids past width weigh 0) and their sum, as token_draw.h gives them.
__device__ double group_weights(const float* row, int64_t width, int64_t k, float temperature, double m, double w[kGroupIds]) {
#pragma unroll
  for (int j = 0; j < kGroupIds; ++j) {
    const int64_t i = k * kGroupIds + j;
    w[j] = 0.0;
    if (i < width) {
      const double x = __dsub_rn(double(scaled_logit(row[i], temperature)), m);
      if (x >= -kExpFixedMaxArg) w[j] = exp_fixed(x);
    }
  }
  return __dadd_rn(__dadd_rn(__dadd_rn(w[0], w[1]), __dadd_rn(w[2], w[3])), __dadd_rn(__dadd_rn(w[4], w[5]), __dadd_rn(w[6], w[7])));
}

// One warp's span: lane 0 writes its sum (lane l sums group l, then the butterfly) to *sum. Returns the lane's last id
// of weight > 0 (-1: none).
__device__ int sum_span(const float* row, int64_t width, int64_t span, float temperature, double m, double* sum) {
  const int lane = threadIdx.x & 31;
  const int64_t k = span * kSpanGroups + lane;
  double w[kGroupIds];
  double g = group_weights(row, width, k, temperature, m, w);
  int last = -1;
#pragma unroll
  for (int j = 0; j < kGroupIds; ++j) {
    if (w[j] > 0.0) last = int(k * kGroupIds + j);  // (ascending: the last one stays)
  }
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) g = __dadd_rn(g, __shfl_xor_sync(0xffffffffu, g, off));
  if (lane == 0) *sum = g;
  return last;
}

// The largest of the block's threads' `last`, to every thread.
__device__ int block_max_last(int last) { return block_reduce(last, [](int a, int b) { return max(a, b); }); }

// The draw from the row's spans' sums, by one whole warp (every lane walks alike; lane 0 writes): a nucleus row's
// total (*total_out, and *out = -1; the host cuts the order's first candidates, launch_row_top_k, with it), else the
// walk down the span tree to the drawn id. last_in_row: the row's last id of weight > 0 (0: none), which a walk that
// rounding leaves without a pick takes.
__device__ void walk_to_id(const float* row, int64_t width, const DeviceTokenDraw& draw, double m, const double* span_sums,
                           int64_t n_spans, int last_in_row, int32_t* out, double* total_out) {
  const int lane = threadIdx.x & 31;
  double total = 0.0;
  for (int64_t s = 0; s < n_spans; ++s) total = __dadd_rn(total, span_sums[s]);
  if (draw.nucleus) {
    if (lane == 0) {
      *total_out = total;
      *out = -1;
    }
    return;
  }
  double r = __dmul_rn(draw.uniform, total);
  int64_t span = 0;
  for (; span < n_spans && !(__dsub_rn(r, span_sums[span]) < 0.0); ++span) r = __dsub_rn(r, span_sums[span]);
  if (span == n_spans) {
    if (lane == 0) *out = last_in_row;
    return;
  }
  // The span's groups, lane l's group l, recomputed as the sums were (the same operations: the same bits).
  __shared__ double group_sum[kSpanGroups];
  __shared__ double weight[kSpanGroups][kGroupIds];
  group_sum[lane] = group_weights(row, width, span * kSpanGroups + lane, draw.temperature, m, weight[lane]);
  __syncwarp();
  if (lane != 0) return;
  int group = 0;
  for (; group < kSpanGroups && !(__dsub_rn(r, group_sum[group]) < 0.0); ++group) r = __dsub_rn(r, group_sum[group]);
  // Where a level passes over every member: the last id of weight > 0 in its whole (the span, the group), else its first.
  auto last_weighted = [&](int g0, int g1) {
    for (int i = g1 * kGroupIds; i > g0 * kGroupIds; --i) {
      if (weight[(i - 1) / kGroupIds][(i - 1) % kGroupIds] > 0.0) return int(span * kSpanIds) + i - 1;
    }
    return int(span * kSpanIds) + g0 * kGroupIds;
  };
  if (group == kSpanGroups) {
    *out = last_weighted(0, kSpanGroups);
    return;
  }
  for (int j = 0; j < kGroupIds; ++j) {
    r = __dsub_rn(r, weight[group][j]);
    if (r < 0.0) {  // (an id past width weighs 0: r was >= 0 before it, so it is never picked)
      *out = int(span * kSpanIds) + group * kGroupIds + j;
      return;
    }
  }
  *out = last_weighted(group, group + 1);
}

// One block per row (the whole draw; draws == nullptr: every row greedy).
__global__ void __launch_bounds__(kThreads) row_draw_kernel(const float* x, int64_t width, int64_t stride,
                                                            const DeviceTokenDraw* draws, int32_t* out,
                                                            double* totals) {
  const int64_t r = blockIdx.x;
  if (draws && draws[r].skip) return;
  const float* row = x + r * stride;
  if (!weighs_ids(draws, r)) {
    const int at = block_argmax(row, width);
    if (threadIdx.x == 0) out[r] = at;
    return;
  }
  const float temperature = draws[r].temperature;
  const float best = block_max_scaled(row, 0, width, temperature);  // m
  if (!isfinite(best)) {  // a temperature that scales a logit to infinity, or no finite logit: the argmax
    const int at = block_argmax(row, width);
    if (threadIdx.x == 0) out[r] = at;
    return;
  }
  // The spans' sums (a warp a span), and the last id of weight > 0.
  DI_DYNAMIC_SHARED(double, span_sums);
  const int64_t n_spans = (width + kSpanIds - 1) / kSpanIds;
  const int warp = threadIdx.x >> 5;
  int last = -1;
  for (int64_t span = warp; span < n_spans; span += kWarps) {
    last = max(last, sum_span(row, width, span, temperature, double(best), &span_sums[span]));
  }
  last = block_max_last(last);  // (its barrier also makes every span's sum visible)
  if (warp != 0) return;
  walk_to_id(row, width, draws[r], double(best), span_sums, n_spans, last < 0 ? 0 : last, &out[r], totals ? &totals[r] : nullptr);
}

// A split row's draw (a launch of few rows: one block a row would leave most of the device idle) in three launches,
// with the whole kernel's operations in its order, so the same bits: a block a chunk of kChunkSpans spans (a span a
// warp) finds its chunk's argmax and largest s, then (once every chunk's is known, so m is) its spans' sums, and one
// warp a row walks them. The scratch a launch uses, row r's chunk c at [r * n_chunks + c], span s at [r * n_spans + s].
struct SplitScratch {
  double* span_sums;
  float* best;       // the chunk's largest s (rows that weigh their ids)
  float* arg_value;  // its argmax's value and id (INT_MAX: none)
  int32_t* arg_at;
  int32_t* last;     // its last id of weight > 0 (-1: none)
};

__device__ __forceinline__ SplitScratch split_scratch(void* scratch, int64_t n_rows, int64_t n_spans, int64_t n_chunks) {
  auto* sums = static_cast<double*>(scratch);
  auto* words = reinterpret_cast<float*>(sums + n_rows * n_spans);
  const int64_t n = n_rows * n_chunks;
  return {sums, words, words + n, reinterpret_cast<int32_t*>(words + 2 * n), reinterpret_cast<int32_t*>(words + 3 * n)};
}

// Grid (n_chunks, n_rows): chunk blockIdx.x of row blockIdx.y, its argmax and (a row that weighs its ids) its largest s.
__global__ void __launch_bounds__(kThreads) row_chunk_max_kernel(const float* x, int64_t width, int64_t stride,
                                                                 const DeviceTokenDraw* draws, void* scratch, int64_t n_spans) {
  const int64_t r = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
  if (draws && draws[r].skip) return;
  const float* row = x + r * stride;
  const SplitScratch s = split_scratch(scratch, gridDim.y, n_spans, n_chunks);
  const int64_t begin = c * kChunkSpans * kSpanIds, end = min(width, begin + kChunkSpans * kSpanIds);
  float value;
  const int at = block_argmax(row, begin, end, &value);
  const float best = weighs_ids(draws, r) ? block_max_scaled(row, begin, end, draws[r].temperature) : 0.0f;
  if (threadIdx.x == 0) {
    s.arg_value[r * n_chunks + c] = value;
    s.arg_at[r * n_chunks + c] = at;
    s.best[r * n_chunks + c] = best;
  }
}

// m: the largest of row r's chunks' largest s, to every lane of the calling warp (a lane reads every 32nd chunk). A zero
// as +0, so that every lane has the same bits (-0 and +0 weigh alike).
__device__ float warp_max_of_chunks(const SplitScratch& s, int64_t r, int64_t n_chunks) {
  float best = -__int_as_float(0x7f800000);
  for (int64_t c = threadIdx.x & 31; c < n_chunks; c += 32) best = fmaxf(best, s.best[r * n_chunks + c]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, off));
  return best == 0.0f ? 0.0f : best;
}

// Grid (n_chunks, n_rows): the sums of chunk blockIdx.x's spans of row blockIdx.y, where it weighs its ids and m is
// finite.
__global__ void __launch_bounds__(kThreads) row_chunk_sums_kernel(const float* x, int64_t width, int64_t stride,
                                                                  const DeviceTokenDraw* draws, void* scratch, int64_t n_spans) {
  const int64_t r = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
  if (!weighs_ids(draws, r) || draws[r].skip) return;
  const SplitScratch s = split_scratch(scratch, gridDim.y, n_spans, n_chunks);
  const float best = warp_max_of_chunks(s, r, n_chunks);  // (each warp its own: the same value)
  if (!isfinite(best)) return;
  const int64_t span = c * kChunkSpans + (threadIdx.x >> 5);
  int last = -1;
  if (span < n_spans) last = sum_span(x + r * stride, width, span, draws[r].temperature, double(best), &s.span_sums[r * n_spans + span]);
  last = block_max_last(last);
  if (threadIdx.x == 0) s.last[r * n_chunks + c] = last;
}

// One warp a row: the argmax from its chunks' (rows that do not weigh their ids, or whose m is not finite), else the
// walk over its spans' sums, copied into shared memory first (the walk reads them one after another). The chunks' picks
// are merged a lane every 32nd chunk, then across the lanes: keep_better's and max's answers do not depend on the order.
__global__ void __launch_bounds__(32) row_walk_kernel(const float* x, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                                                      void* scratch, int64_t n_spans, int64_t n_chunks, int32_t* out,
                                                      double* totals) {
  const int64_t r = blockIdx.x;
  if (draws && draws[r].skip) return;
  const int lane = threadIdx.x;
  const SplitScratch s = split_scratch(scratch, gridDim.x, n_spans, n_chunks);
  const float best = weighs_ids(draws, r) ? warp_max_of_chunks(s, r, n_chunks) : 0.0f;
  if (!weighs_ids(draws, r) || !isfinite(best)) {
    float value = -__int_as_float(0x7f800000);
    int at = INT_MAX;
    for (int64_t c = lane; c < n_chunks; c += 32) keep_better(value, at, s.arg_value[r * n_chunks + c], s.arg_at[r * n_chunks + c]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float w = __shfl_xor_sync(0xffffffffu, value, off);
      const int j = __shfl_xor_sync(0xffffffffu, at, off);
      keep_better(value, at, w, j);
    }
    if (lane == 0) out[r] = at == INT_MAX ? 0 : at;
    return;
  }
  int last = -1;
  for (int64_t c = lane; c < n_chunks; c += 32) last = max(last, s.last[r * n_chunks + c]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, off));
  DI_DYNAMIC_SHARED(double, span_sums);
  for (int64_t span = lane; span < n_spans; span += 32) span_sums[span] = s.span_sums[r * n_spans + span];
  __syncwarp();
  walk_to_id(x + r * stride, width, draws[r], double(best), span_sums, n_spans, last < 0 ? 0 : last, &out[r],
             totals ? &totals[r] : nullptr);
}

// One block per row that asks: the logit at its drawn id and at each of its candidates' ids.
__global__ void __launch_bounds__(kThreads) drawn_logits_kernel(const float* x, int64_t stride, const DeviceTokenDraw* asks,
                                                                const int32_t* drawn, const DeviceTokenDraw* draws,
                                                                const DeviceDrawCandidate* candidates, float* drawn_logit,
                                                                float* candidate_logits) {
  if (asks[blockIdx.x].skip) return;
  const float* row = x + int64_t(blockIdx.x) * stride;
  if (threadIdx.x == 0 && drawn[blockIdx.x] >= 0) drawn_logit[blockIdx.x] = row[drawn[blockIdx.x]];
  if (!draws) return;
  const int32_t at = draws[blockIdx.x].candidates_at;
  for (int j = threadIdx.x; j < draws[blockIdx.x].top_k; j += kThreads) candidate_logits[at + j] = row[candidates[at + j].id];
}

// One block per row: its edits, one a thread at a time (each its own id), in float as the host rounds them.
__global__ void __launch_bounds__(kThreads) logit_edits_kernel(float* x, int64_t width, int64_t stride,
                                                               const DeviceLogitEdit* edits, const int32_t* at,
                                                               float* originals) {
  float* row = x + int64_t(blockIdx.x) * stride;
  for (int32_t e = at[blockIdx.x] + int32_t(threadIdx.x); e < at[blockIdx.x + 1]; e += kThreads) {
    const DeviceLogitEdit edit = edits[e];
    if (edit.id < 0 || edit.id >= width) continue;
    const float v = row[edit.id];
    if (originals) originals[e] = v;
    row[edit.id] = __fsub_rn(v > 0.0f ? __fdiv_rn(v, edit.divide) : __fmul_rn(v, edit.divide), edit.subtract);
  }
}

// One block per row with a mask: -inf where its bit is 0.
__global__ void __launch_bounds__(kThreads) logit_masks_kernel(float* x, int64_t width, int64_t stride,
                                                               const uint32_t* bits, const int32_t* mask_of) {
  const int32_t mask = mask_of[blockIdx.x];
  if (mask < 0) return;
  float* row = x + int64_t(blockIdx.x) * stride;
  const uint32_t* row_bits = bits + int64_t(mask) * ((width + 31) / 32);
  for (int64_t i = threadIdx.x; i < width; i += kThreads) {
    if (!((row_bits[i >> 5] >> (i & 31)) & 1u)) row[i] = -__int_as_float(0x7f800000);
  }
}

}  // namespace

void launch_drawn_logits(const float* x, int64_t n_rows, int64_t stride, const DeviceTokenDraw* asks, const int32_t* drawn,
                         const DeviceTokenDraw* draws, const DeviceDrawCandidate* candidates, float* drawn_logit,
                         float* candidate_logits, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(n_rows <= 0x7fffffff && (!draws || candidates));
  launch_kernel(drawn_logits_kernel, unsigned(n_rows), kThreads, 0, stream, x, stride, asks, drawn, draws, candidates,
                drawn_logit, candidate_logits);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_logit_masks(float* x, int64_t n_rows, int64_t width, int64_t stride, const uint32_t* bits,
                        const int32_t* mask_of, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && stride >= width && n_rows <= 0x7fffffff);
  launch_kernel(logit_masks_kernel, unsigned(n_rows), kThreads, 0, stream, x, width, stride, bits, mask_of);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_logit_edits(float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceLogitEdit* edits,
                        const int32_t* at, float* originals, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && stride >= width && n_rows <= 0x7fffffff);
  launch_kernel(logit_edits_kernel, unsigned(n_rows), kThreads, 0, stream, x, width, stride, edits, at, originals);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_row_draws(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int32_t* out, double* totals, void* split_scratch, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && width <= kRowDrawMaxWidth && stride >= width && n_rows <= 0x7fffffff);
  const int64_t n_spans = (width + kSpanIds - 1) / kSpanIds;
  if (!split_scratch) {
    launch_kernel(row_draw_kernel, unsigned(n_rows), kThreads, size_t(n_spans) * sizeof(double), stream, x, width, stride,
                  draws, out, totals);
    DI_CUDA_CHECK_LAUNCH();
    return;
  }
  DI_CHECK(n_rows <= 65535);  // (the grid's y)
  const dim3 chunks(unsigned(row_draw_chunks(width)), unsigned(n_rows));
  launch_kernel(row_chunk_max_kernel, chunks, kThreads, 0, stream, x, width, stride, draws, split_scratch, n_spans);
  DI_CUDA_CHECK_LAUNCH();
  if (draws) {  // (every row greedy: no sums)
    launch_kernel(row_chunk_sums_kernel, chunks, kThreads, 0, stream, x, width, stride, draws, split_scratch, n_spans);
    DI_CUDA_CHECK_LAUNCH();
  }
  launch_kernel(row_walk_kernel, unsigned(n_rows), 32, size_t(n_spans) * sizeof(double), stream, x, width, stride, draws,
                split_scratch, n_spans, int64_t(chunks.x), out, totals);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
