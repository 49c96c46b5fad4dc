// Sparse attention with sink on the GPU, portable path: one block per (head, 256 columns of head_dim).
// Each block of a head computes the same scores and denominator in the same order: the dot products cost
// less than a grid of one block per head left idle (64 heads: 64 blocks on 132 SMs). Scores (fp32 dots,
// one warp per slot) and the 64-block maxima live in shared memory; P_j = bf16(exp(s_j - m_b)) against the running
// max of the slot's 64-block (V4) or the global max (V4.1), weighted by exp(m_b - M), divided by the
// unrounded denominator sum_j exp(s_j - M) + exp(sink - M) and rounded to bf16 once: the rounding points
// of the reference backend (spec AT1-AT3), with fp32 arithmetic between them.
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(const AttentionLaunch p) {
  extern __shared__ float smem[];
  const int64_t n_slots = p.n_slots, n_blocks = n_slots / 64, D = p.head_dim;
  float* s = smem;                   // [n_slots] scores, then the weights exp(m_b - M) * P_j
  float* block_max = s + n_slots;    // [n_blocks] running (prefix) maxima
  float* scratch = block_max + n_blocks;  // [33]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = kThreads / 32;
  const int64_t h = blockIdx.x;
  const float* q = p.q + h * D;

  for (int64_t j = warp; j < n_slots; j += n_warps) {  // AT1: scores
    const int32_t row = p.slot_row[j];
    if (row < 0) {
      if (lane == 0) s[j] = -INFINITY;
      continue;
    }
    const float* kv = p.rows + int64_t(row) * D;
    float dot = 0.0f;
    for (int64_t d = lane; d < D; d += 32) dot = __fmaf_rn(q[d], kv[d], dot);
    dot = warp_sum(dot);
    if (lane == 0) s[j] = float(double(dot) * p.softmax_scale);
  }
  __syncthreads();
  for (int64_t b = warp; b < n_blocks; b += n_warps) {  // AT2: max per 64-block
    const float m = warp_max(fmaxf(s[b * 64 + lane], s[b * 64 + 32 + lane]));
    if (lane == 0) block_max[b] = m;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t b = 1; b < n_blocks; ++b) block_max[b] = fmaxf(block_max[b], block_max[b - 1]);
  }
  __syncthreads();
  const float m_all = n_blocks ? block_max[n_blocks - 1] : -INFINITY;
  float denom_part = 0.0f;
  for (int64_t j = threadIdx.x; j < n_slots; j += kThreads) {
    if (p.slot_row[j] < 0) continue;
    const float sj = s[j];
    const float mb = p.block_running_max ? block_max[j / 64] : m_all;
    const float prob = round_bf16(expf(sj - mb));  // the bf16 P of the tilelang kernel
    s[j] = expf(mb - m_all) * prob;
    denom_part += expf(sj - m_all);
  }
  const float denom = block_sum(denom_part, scratch) + expf(p.sink[h] - m_all);  // block_sum syncs
  // AT3: this block's slice of the head dimension, one output per thread. Slots in ascending order, 8 loads
  // in flight before their FMAs (one at a time, each FMA waited for its load: 0.5 us a slot on an H200).
  // Empty slots are skipped, not multiplied: their s is -inf.
  const int64_t d = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  if (d < D) {
    float acc = 0.0f;
    int64_t j = 0;
    for (; j + 8 <= n_slots; j += 8) {
      int32_t row[8];
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        row[u] = p.slot_row[j + u];
        v[u] = row[u] >= 0 ? p.rows[int64_t(row[u]) * D + d] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (row[u] >= 0) acc = __fmaf_rn(s[j + u], v[u], acc);
      }
    }
    for (; j < n_slots; ++j) {
      const int32_t row = p.slot_row[j];
      if (row >= 0) acc = __fmaf_rn(s[j], p.rows[int64_t(row) * D + d], acc);
    }
    p.out[h * D + d] = round_bf16(acc / denom);
  }
}

// One warp per key; lane l takes heads l, l + 32, ...; q sits in shared memory with a padded pitch
// (dim + 1) so the lanes' different heads fall in different banks.
__global__ void __launch_bounds__(kThreads) index_scores_kernel(const IndexScoreLaunch p) {
  extern __shared__ float q_s[];
  const int64_t pitch = p.dim + 1;
  for (int64_t i = threadIdx.x; i < p.n_heads * p.dim; i += kThreads) q_s[(i / p.dim) * pitch + i % p.dim] = p.q[i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j = int64_t(blockIdx.x) * (kThreads / 32) + warp;
  if (j >= p.n_keys) return;
  const float* key = p.keys + j * p.dim;
  float total = 0.0f;
  for (int64_t h = lane; h < p.n_heads; h += 32) {
    const float* qh = q_s + h * pitch;
    float dot = 0.0f;
    for (int64_t d = 0; d < p.dim; ++d) dot = __fmaf_rn(qh[d], __ldg(key + d), dot);
    const float sv = round_bf16(dot);
    total += round_bf16(fmaxf(sv, 0.0f) * p.weights[h]);
  }
  total = warp_sum(total);
  if (lane == 0) p.scores[j] = round_bf16(total);
}

}  // namespace

void launch_sparse_attention(const AttentionLaunch& p, cudaStream_t stream) {
  DI_CHECK(p.n_slots % 64 == 0 && p.n_heads > 0 && p.head_dim > 0);
  const size_t smem = size_t(p.n_slots + p.n_slots / 64 + 33) * sizeof(float);
  if (smem > 48 * 1024) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const unsigned d_blocks = unsigned((p.head_dim + kThreads - 1) / kThreads);
  sparse_attention_kernel<<<dim3(unsigned(p.n_heads), d_blocks), kThreads, smem, stream>>>(p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_index_scores(const IndexScoreLaunch& p, cudaStream_t stream) {
  if (p.n_keys == 0) return;
  const size_t smem = size_t(p.n_heads * (p.dim + 1)) * sizeof(float);
  if (smem > 48 * 1024) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(index_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const unsigned grid = unsigned((p.n_keys + kThreads / 32 - 1) / (kThreads / 32));
  index_scores_kernel<<<grid, kThreads, smem, stream>>>(p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
