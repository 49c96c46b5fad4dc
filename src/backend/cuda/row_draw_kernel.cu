// Each row's draw on the device (kernels.h: launch_row_draws), with model/token_draw.h's draw_token's answer: the
// argmax (model/ops.h's: the first index holding the row's largest value, NaNs passed over, 0 where every value is
// NaN), or the plain temperature draw, whose every IEEE operation token_draw.h writes out and this kernel runs in
// that order; for a nucleus draw that draw's total, and for top-k and nucleus draws the order's first candidates;
// for log-probabilities the logits at the drawn ids and the candidates. A sampled or greedy step's draws then cross
// to the host as one id (or a few KB of candidates) a row instead of the vocabulary's logits (V4: 129,280 floats,
// 517 KB a row).
#include <climits>

#include <cuda_runtime.h>

#include "backend/cuda/block_top_k.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_exact_math.cuh"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kGroupIds = 8, kSpanGroups = 32, kSpanIds = kGroupIds * kSpanGroups;  // token_draw.h's
static_assert(kSpanGroups == 32, "a span is a warp: lane l sums group l");
constexpr int kStaticSharedBytes = 4096;  // (the resource report: 2432 B)
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

// The row's argmax, to every thread. Each thread walks its columns in ascending order, so the first of its equal
// values is kept; the block's reduction then takes the largest value at its lowest index.
__device__ int block_argmax(const float* row, int64_t width) {
  float best = -__int_as_float(0x7f800000);  // -inf: a row of -inf values gives its first index, as on the host
  int at = INT_MAX;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) keep_better(best, at, row[i], int(i));
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
  return at == INT_MAX ? 0 : at;
}

// s = f32(x / T), a NaN as -inf.
__device__ __forceinline__ float scaled_logit(float x, float temperature) {
  const float v = __fdiv_rn(x, temperature);
  return v == v ? v : -__int_as_float(0x7f800000);
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

// One block per row (draws == nullptr: every row greedy).
__global__ void __launch_bounds__(kThreads) row_draw_kernel(const float* x, int64_t width, int64_t stride,
                                                            const DeviceTokenDraw* draws, int32_t* out,
                                                            double* totals) {
  if (draws && draws[blockIdx.x].skip) return;
  const float* row = x + int64_t(blockIdx.x) * stride;
  const float temperature = draws ? draws[blockIdx.x].temperature : 0.0f;
  const bool nucleus = draws && draws[blockIdx.x].nucleus;
  if (!(temperature > 0.0f) || (draws[blockIdx.x].top_k > 0 && !nucleus)) {  // (a top-k row's argmax: its fallback)
    const int at = block_argmax(row, width);
    if (threadIdx.x == 0) out[blockIdx.x] = at;
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // m: the largest scaled logit (none is NaN, so the order only picks between +0 and -0, which weigh alike).
  float best = -__int_as_float(0x7f800000);
  for (int64_t i = threadIdx.x; i < width; i += kThreads) best = fmaxf(best, scaled_logit(row[i], temperature));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, off));
  __shared__ float warp_best[kWarps];
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  best = warp_best[0];
  for (int w = 1; w < kWarps; ++w) best = fmaxf(best, warp_best[w]);
  if (!isfinite(best)) {  // a temperature that scales a logit to infinity, or no finite logit: the argmax
    const int at = block_argmax(row, width);
    if (threadIdx.x == 0) out[blockIdx.x] = at;
    return;
  }
  const double m = double(best);
  // The spans' sums (a warp a span, lane l its group l), and the last id of weight > 0 (a walk that rounding leaves
  // without a pick takes it).
  DI_DYNAMIC_SHARED(double, span_sums);
  __shared__ int warp_last[kWarps];
  const int64_t n_groups = (width + kGroupIds - 1) / kGroupIds, n_spans = (n_groups + kSpanGroups - 1) / kSpanGroups;
  int last = -1;
  for (int64_t span = warp; span < n_spans; span += kWarps) {
    const int64_t k = span * kSpanGroups + lane;
    double w[kGroupIds];
    double g = group_weights(row, width, k, temperature, m, w);
#pragma unroll
    for (int j = 0; j < kGroupIds; ++j) {
      if (w[j] > 0.0) last = int(k * kGroupIds + j);  // (ascending: the last one stays)
    }
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) g = __dadd_rn(g, __shfl_xor_sync(0xffffffffu, g, off));
    if (lane == 0) span_sums[span] = g;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, off));
  if (lane == 0) warp_last[warp] = last;
  __syncthreads();
  if (warp != 0) return;
  for (int w = 1; w < kWarps; ++w) last = max(last, warp_last[w]);
  const int last_in_row = last < 0 ? 0 : last;
  // The walk: the spans on one lane (every lane walks them alike, so all know the span and r).
  double total = 0.0;
  for (int64_t s = 0; s < n_spans; ++s) total = __dadd_rn(total, span_sums[s]);
  if (nucleus) {  // the host cuts the order's first candidates (launch_row_top_k) with the total
    if (lane == 0) {
      totals[blockIdx.x] = total;
      out[blockIdx.x] = -1;
    }
    return;
  }
  double r = __dmul_rn(draws[blockIdx.x].uniform, total);
  int64_t span = 0;
  for (; span < n_spans && !(__dsub_rn(r, span_sums[span]) < 0.0); ++span) r = __dsub_rn(r, span_sums[span]);
  if (span == n_spans) {
    if (lane == 0) out[blockIdx.x] = last_in_row;
    return;
  }
  // The span's groups, lane l's group l, recomputed as above (the same operations: the same bits).
  __shared__ double group_sum[kSpanGroups];
  __shared__ double weight[kSpanGroups][kGroupIds];
  group_sum[lane] = group_weights(row, width, span * kSpanGroups + lane, temperature, m, weight[lane]);
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
    out[blockIdx.x] = last_weighted(0, kSpanGroups);
    return;
  }
  for (int j = 0; j < kGroupIds; ++j) {
    r = __dsub_rn(r, weight[group][j]);
    if (r < 0.0) {  // (an id past width weighs 0: r was >= 0 before it, so it is never picked)
      out[blockIdx.x] = int(span * kSpanIds) + group * kGroupIds + j;
      return;
    }
  }
  out[blockIdx.x] = last_weighted(group, group + 1);
}

// The order of (s, id) as one key, larger first: s's bits made monotone (s never NaN here; -0 as +0), then the id
// inverted, so that of equal s the lower id is the larger key.
__device__ __forceinline__ uint32_t order_bits(float s) {
  const uint32_t b = __float_as_uint(s == 0.0f ? 0.0f : s);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float float_of_order_bits(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// One block per row with top_k > 0: a radix select of the k-th largest s's bits (four 8-bit digits, a shared histogram
// each), the candidates above it and the lowest ids equal to it, then a sort of the k entries (bits, ~id): the
// indexer's selection's pieces (block_top_k.cuh) on 32-bit keys.
__global__ void __launch_bounds__(kThreads) row_top_k_kernel(const float* x, int64_t width, int64_t stride,
                                                             const DeviceTokenDraw* draws, DeviceDrawCandidate* out) {
  const int k = draws[blockIdx.x].top_k;
  if (k <= 0) return;
  const float temperature = draws[blockIdx.x].temperature;
  const float* row = x + int64_t(blockIdx.x) * stride;
  auto bits_of = [&](int64_t i) { return order_bits(scaled_logit(row[i], temperature)); };
  __shared__ uint32_t histogram[256];
  __shared__ uint32_t prefix, n_placed, equal_count[kThreads];
  __shared__ int64_t wanted;  // how many of those matching the prefix are still to take
  __shared__ uint64_t entries[kRowTopKMax];
  if (threadIdx.x == 0) {
    prefix = 0;
    wanted = k;
    n_placed = 0;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    histogram[threadIdx.x] = 0;
    __syncthreads();
    const uint32_t at = prefix;
    for (int64_t base = 0; base < width; base += kThreads) {  // every thread the same rounds: whole warps count
      const int64_t i = base + threadIdx.x;
      const uint32_t b = i < width ? bits_of(i) : 0;
      count_by_warp(histogram, (b >> shift) & 255u, i < width && (b & mask) == at);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t digit = 0;
      int64_t above = 0;
      find_bin(histogram, wanted, &digit, &above);
      wanted -= above;
      prefix = at | (digit << shift);
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  // The k-th largest bits: the k - wanted ids above them, and the `wanted` lowest ids equal to them after those.
  place_selected_entries<kThreads>(bits_of, width, prefix, k - wanted, wanted, equal_count, &n_placed, entries);
  sort_entries_best_first<kThreads>(entries, k);
  DeviceDrawCandidate* row_out = out + draws[blockIdx.x].candidates_at;
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const uint64_t entry = entries[j];
    row_out[j] = {float_of_order_bits(uint32_t(entry >> 32)), int32_t(0xffffffffu - uint32_t(entry))};
  }
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

void launch_row_top_k(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int max_k, DeviceDrawCandidate* out, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && width < (int64_t(1) << 31) && stride >= width && n_rows <= 0x7fffffff && max_k > 0 &&
           max_k <= kRowTopKMax && max_k <= width);
  launch_kernel(row_top_k_kernel, unsigned(n_rows), kThreads, 0, stream, x, width, stride, draws, out);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_row_draws(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int32_t* out, double* totals, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && width <= kRowDrawMaxWidth && stride >= width && n_rows <= 0x7fffffff);
  const int64_t n_spans = (width + kSpanIds - 1) / kSpanIds;
  launch_kernel(row_draw_kernel, unsigned(n_rows), kThreads, size_t(n_spans) * sizeof(double), stream, x, width, stride,
                draws, out, totals);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
