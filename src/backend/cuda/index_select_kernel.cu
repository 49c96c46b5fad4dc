// The indexer's top-k selection on the device (spec I10; V4.1 steps 26-27), after index_scores: per query token,
// the n_select keys of largest score, ties to the lower index, best first, where keys outside the token's kept
// candidate blocks score -inf: the order the model's partial_sort gives on the host. One block per token. The
// scores are bf16 values, so a key's order is its score's 16 high bits made monotonic (order_key); the block finds
// the n_select-th largest of those by two 8-bit histogram passes, collects every key above it and the lowest-
// indexed keys equal to it, and sorts those by (score, index) in shared memory (bitonic, at most kIndexSelectMax).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/block_top_k.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 512;

// 16 bits that order bf16 scores as floats compare them (larger score, larger key); -0 and +0 share one key, as
// they compare equal. -inf is 0x007f.
__device__ __forceinline__ uint32_t order_key(float score) {
  uint32_t bits = __float_as_uint(score) >> 16;
  if (bits == 0x8000u) bits = 0;
  return (bits & 0x8000u) ? (~bits & 0xffffu) : (bits | 0x8000u);
}

__global__ void __launch_bounds__(kThreads, 2) index_select_kernel(const IndexSelectLaunch p) {
  DI_DYNAMIC_SHARED(uint32_t, kept);  // [kept_words] bit b: candidate block b is kept
  __shared__ uint32_t hist[256];
  __shared__ uint64_t entries[kIndexSelectMax];  // (key << 32) | (0xffffffff - index)
  __shared__ uint32_t tie_count[kThreads];
  __shared__ uint32_t threshold, n_placed;
  __shared__ int64_t n_above, ties_wanted;
  const int64_t t = blockIdx.x, n = p.token_keys[t], k = p.token_select[t];
  if (k == 0) return;
  const float* scores = p.scores + p.token_scores_at[t];
  const bool masked = p.keep_blocks && p.token_keep[t] >= 0;
  const int64_t n_blocks = masked ? (n + p.block_size - 1) / p.block_size : 0, kept_words = (n_blocks + 31) / 32;
  if (masked) {
    for (int64_t w = threadIdx.x; w < kept_words; w += kThreads) kept[w] = 0;
    __syncthreads();
    const int64_t* keep = p.keep_blocks + p.token_keep_at[t];
    for (int64_t i = threadIdx.x; i < p.token_keep[t]; i += kThreads) {
      const int64_t b = keep[i];
      if (b >= 0 && b < n_blocks) atomicOr(&kept[b / 32], 1u << (b % 32));
    }
  }
  auto key_of = [&](int64_t j) {
    if (masked && !((kept[(j / p.block_size) / 32] >> ((j / p.block_size) % 32)) & 1u)) return order_key(-INFINITY);
    return order_key(scores[j]);
  };
  // The high byte of the k-th largest key, then its low byte.
  for (int b = threadIdx.x; b < 256; b += kThreads) hist[b] = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kThreads) {  // every thread the same rounds: whole warps count
    const int64_t j = base + threadIdx.x;
    count_by_warp(hist, j < n ? key_of(j) >> 8 : 0, j < n);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t high = 0;
    int64_t above = 0;
    find_bin(hist, k, &high, &above);
    threshold = high << 8;
    n_above = above;
  }
  __syncthreads();
  const uint32_t high = threshold >> 8;
  const int64_t above_high = n_above;
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += kThreads) hist[b] = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t j = base + threadIdx.x;
    const uint32_t key = j < n ? key_of(j) : 0;
    count_by_warp(hist, key & 255u, j < n && (key >> 8) == high);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t low = 0;
    int64_t above = 0;
    find_bin(hist, k - above_high, &low, &above);
    threshold = (high << 8) | low;
    n_above = above_high + above;
    ties_wanted = k - n_above;
    n_placed = 0;
  }
  __syncthreads();
  // Keys above the threshold go anywhere in entries [0, n_above); of the keys equal to it the ties_wanted lowest
  // indices, in index order, into [n_above, k).
  place_selected_entries<kThreads>(key_of, n, threshold, n_above, ties_wanted, tie_count, &n_placed, entries);
  sort_entries_best_first<kThreads>(entries, k);  // by (key, index)
  int32_t* selected = p.selected + p.token_selected_at[t];
  for (int64_t r = threadIdx.x; r < k; r += kThreads) selected[r] = int32_t(0xffffffffu - uint32_t(entries[r]));
}

// Grid: (blocks of kThreads candidate blocks, tokens); a thread per candidate block.
__global__ void __launch_bounds__(kThreads) candidate_blocks_kernel(const CandidateBlocksLaunch p) {
  const int64_t t = blockIdx.y, n = p.token_keys[t], n_blocks = (n + p.block_size - 1) / p.block_size;
  const int64_t b = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= n_blocks) return;
  const float* scores = p.scores + p.token_scores_at[t];
  float m = -INFINITY;
  for (int64_t j = b * p.block_size; j < min(n, (b + 1) * p.block_size); ++j) m = fmaxf(m, scores[j]);
  p.block_scores[p.token_blocks_at[t] + b] = b == n_blocks - 1 ? INFINITY : m;
}

// One block per token: thread i writes the i-th selected row's slot, at its rank among the selection where
// ascending (the selection in shared memory first; n <= kIndexSelectMax, so at most 2048 x 2048 comparisons a token).
__global__ void __launch_bounds__(kThreads) selected_slots_kernel(const SelectedSlotsLaunch p) {
  __shared__ int32_t s[kIndexSelectMax];
  const int64_t t = blockIdx.x;
  const int64_t* words = p.token_words + t * kSelectedSlotsWords;
  const int64_t n = min(words[0], kIndexSelectMax), table_at = words[3], token_rows = words[4];
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s[i] = p.selected[words[1] + i];
  __syncthreads();
  int32_t* slots = p.slot_row + t * p.n_slots + words[2];
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int32_t row = s[i];
    int64_t place = i;
    if (words[5]) {
      place = 0;
      for (int64_t m = 0; m < n; ++m) place += s[m] < row;
    }
    slots[place] = row >= 0 && row < token_rows ? p.tables[table_at + row] : -1;
  }
}

}  // namespace

void launch_selected_slots(const SelectedSlotsLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK(p.n_tokens <= 65535);
  launch_kernel(selected_slots_kernel, dim3(unsigned(p.n_tokens)), kThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_candidate_blocks(const CandidateBlocksLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0 || p.max_blocks == 0) return;
  DI_CHECK(p.n_tokens <= 65535 && p.block_size > 0);
  const unsigned grid_x = unsigned((p.max_blocks + kThreads - 1) / kThreads);
  launch_kernel(candidate_blocks_kernel, dim3(grid_x, unsigned(p.n_tokens)), kThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

size_t index_select_shared_bytes(int64_t max_keys, int64_t block_size) {
  const int64_t n_blocks = block_size > 0 ? (max_keys + block_size - 1) / block_size : 0;
  return size_t((n_blocks + 31) / 32) * 4;
}

void launch_index_select(const IndexSelectLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK(p.n_tokens <= 65535 && p.max_keys < (int64_t(1) << 31));
  const size_t smem = p.keep_blocks ? index_select_shared_bytes(p.max_keys, p.block_size) : 0;
  if (smem > 16 * 1024) {  // beside ~19 KB of static shared memory
    DI_CUDA_CHECK(cudaFuncSetAttribute(index_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  launch_kernel(index_select_kernel, dim3(unsigned(p.n_tokens)), kThreads, smem, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
