// Sparse attention with sink on the GPU, portable path. The fused kernel (the default): one block per (head,
// 256 columns of head_dim, query token); the split pair below (DEEPINFER_CUDA_ATTENTION=split). Each block of a head computes the same scores and denominator in the same order: the dot products cost
// less than a grid of one block per head left idle (64 heads: 64 blocks on 132 SMs). Scores (fp32 dots,
// one warp per slot) and the 64-block maxima live in shared memory; P_j = bf16(exp(s_j - m_b)) against the running
// max of the slot's 64-block (V4) or the global max (V4.1), weighted by exp(m_b - M), divided by the
// unrounded denominator sum_j exp(s_j - M) + exp(sink - M) and rounded to bf16 once: the rounding points
// of the reference backend (spec AT1-AT3), with fp32 arithmetic between them.
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/packed_rows.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

// The packed-rows path (kPacked, AttentionLaunch::packed): a row before the packed groups is p.rows'; a packed
// one is decoded value by value from its bytes (packed_row_value, as launch_unpack_rows decodes it, so each value
// is the float the decoded-rows path reads). A block resolves each of its slots' row addresses once (a slot
// word read for an arena's row), into shared memory beside the row numbers.
__device__ __forceinline__ int packed_group(const AttentionLaunch& p, int32_t row) {
  return int(p.n_packed > 1 && row >= p.packed[1].first_row) + int(p.n_packed > 2 && row >= p.packed[2].first_row);
}

__device__ __forceinline__ const AttentionPackedRows& packed_group_rows(const AttentionLaunch& p, int g) {
  return g == 0 ? p.packed[0] : g == 1 ? p.packed[1] : p.packed[2];
}

// A filled slot's row bytes (nullptr for a float row).
__device__ __forceinline__ const uint8_t* packed_row_address(const AttentionLaunch& p, int32_t row) {
  if (p.n_packed == 0 || row < p.packed[0].first_row) return nullptr;
  const AttentionPackedRows& g = packed_group_rows(p, packed_group(p, row));
  const int64_t k = row - g.first_row;
  return g.bytes + (g.slots ? g.slots[k] : k) * g.row_bytes;
}

// Value d of a filled slot's row: `at` is packed_row_address's for it (kPacked), else unused.
template <bool kPacked>
__device__ __forceinline__ float row_value(const AttentionLaunch& p, int32_t row, const uint8_t* at, int64_t d) {
  if constexpr (kPacked) {
    if (at) {
      const AttentionPackedRows& g = packed_group_rows(p, packed_group(p, row));
      const PackedRowFormat f{g.kind, int32_t(p.head_dim - g.n_rope), g.n_rope, g.block};
      return packed_row_value(f, at, d);
    }
  }
  return p.rows[int64_t(row) * p.head_dim + d];
}

// The fused kernel's shared floats before its slots' row addresses (kPacked), an even count so that the
// addresses are 8-byte aligned.
__host__ __device__ constexpr int64_t fused_shared_floats(int64_t n_slots) { return (n_slots + n_slots / 64 + 33 + 1) / 2 * 2; }

template <bool kPacked>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_kernel(const AttentionLaunch p) {
  DI_DYNAMIC_SHARED(float, smem);
  const int64_t n_slots = p.n_slots, n_blocks = n_slots / 64, D = p.head_dim;
  float* s = smem;                   // [n_slots] scores, then the weights exp(m_b - M) * P_j
  float* block_max = s + n_slots;    // [n_blocks] running (prefix) maxima
  float* scratch = block_max + n_blocks;  // [33]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = kThreads / 32;
  const int64_t h = blockIdx.x, t = blockIdx.z;
  const float* q = p.q + (t * p.n_heads + h) * D;
  const int32_t* slot_row = p.slot_row + t * n_slots;
  const uint8_t** row_at = nullptr;  // kPacked: [n_slots] the slots' row bytes
  if constexpr (kPacked) {
    row_at = reinterpret_cast<const uint8_t**>(smem + fused_shared_floats(n_slots));
    for (int64_t j = threadIdx.x; j < n_slots; j += kThreads) {
      const int32_t row = slot_row[j];
      row_at[j] = row < 0 ? nullptr : packed_row_address(p, row);
    }
    __syncthreads();
  }

  for (int64_t j = warp; j < n_slots; j += n_warps) {  // AT1: scores
    const int32_t row = slot_row[j];
    if (row < 0) {
      if (lane == 0) s[j] = -INFINITY;
      continue;
    }
    const uint8_t* at = kPacked ? row_at[j] : nullptr;
    float dot = 0.0f;
    for (int64_t d = lane; d < D; d += 32) dot = __fmaf_rn(q[d], row_value<kPacked>(p, row, at, d), dot);
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
    if (slot_row[j] < 0) continue;
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
        row[u] = slot_row[j + u];
        v[u] = row[u] >= 0 ? row_value<kPacked>(p, row[u], kPacked ? row_at[j + u] : nullptr, d) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (row[u] >= 0) acc = __fmaf_rn(s[j + u], v[u], acc);
      }
    }
    for (; j < n_slots; ++j) {
      const int32_t row = slot_row[j];
      if (row >= 0) acc = __fmaf_rn(s[j], row_value<kPacked>(p, row, kPacked ? row_at[j] : nullptr, d), acc);
    }
    p.out[(t * p.n_heads + h) * D + d] = round_bf16(acc / denom);
  }
}

// The split path (DEEPINFER_CUDA_ATTENTION=split): the fused kernel's arithmetic in two kernels that read each
// K = V row once per group of 8 heads instead of once per (head, column block). The fused kernel's 64 heads
// x 2 column blocks each read all 640 rows (167 MB from L2 for 1.3 MB of rows), one dependent load at a time
// in its score loop: 183 us on an H200 where the rows take under a microsecond to read.
//
// Scores: one block per (32 slots, 8 heads); lane = slot, warp = head. The block stages 128 columns of its
// rows and heads in shared memory per step, the next step's loads in flight (registers) while the FMAs of
// this one run. Each score is one fp32 FMA chain over the head dimension in ascending order, so a score
// never depends on the grid.
constexpr int kScoreSlots = 32, kScoreHeads = 8, kScoreCols = 128;
constexpr int kScoreRowLoads = kScoreSlots * kScoreCols / kThreads;   // 16 per thread and step
constexpr int kScoreQLoads = kScoreHeads * kScoreCols / kThreads;     // 4

template <bool kPacked>
__global__ void __launch_bounds__(kThreads) attention_scores_kernel(const AttentionLaunch p, float* scores) {
  __shared__ float rows_s[kScoreSlots][kScoreCols + 1];  // +1: lane j reads row j, in 32 different banks
  __shared__ float q_s[kScoreHeads][kScoreCols];         // a warp reads one head: a broadcast
  __shared__ int32_t row_of[kScoreSlots];
  __shared__ const uint8_t* row_at[kPacked ? kScoreSlots : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j0 = int64_t(blockIdx.x) * kScoreSlots, h0 = int64_t(blockIdx.y) * kScoreHeads, D = p.head_dim;
  const int64_t t = blockIdx.z;
  const float* q = p.q + t * p.n_heads * D;
  if (threadIdx.x < kScoreSlots) {
    const int32_t row = p.slot_row[t * p.n_slots + j0 + threadIdx.x];  // n_slots % 64 == 0
    row_of[threadIdx.x] = row;
    if constexpr (kPacked) row_at[threadIdx.x] = row < 0 ? nullptr : packed_row_address(p, row);
  }
  __syncthreads();
  // Element i of a step: rows i / kScoreCols, column i % kScoreCols; a warp reads 32 consecutive columns.
  float row_v[kScoreRowLoads], q_v[kScoreQLoads];
  auto load_step = [&](int64_t d0) {
#pragma unroll
    for (int u = 0; u < kScoreRowLoads; ++u) {
      const int i = threadIdx.x + u * kThreads, r = i / kScoreCols, c = i % kScoreCols;
      const int32_t row = row_of[r];
      row_v[u] = row >= 0 && d0 + c < D ? row_value<kPacked>(p, row, kPacked ? row_at[r] : nullptr, d0 + c) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kScoreQLoads; ++u) {
      const int i = threadIdx.x + u * kThreads, hh = i / kScoreCols, c = i % kScoreCols;
      q_v[u] = h0 + hh < p.n_heads && d0 + c < D ? q[(h0 + hh) * D + d0 + c] : 0.0f;
    }
  };
  load_step(0);
  float dot = 0.0f;
  for (int64_t d0 = 0; d0 < D; d0 += kScoreCols) {
    __syncthreads();  // the previous step's FMAs are done with the staged values
#pragma unroll
    for (int u = 0; u < kScoreRowLoads; ++u) {
      const int i = threadIdx.x + u * kThreads;
      rows_s[i / kScoreCols][i % kScoreCols] = row_v[u];
    }
#pragma unroll
    for (int u = 0; u < kScoreQLoads; ++u) {
      const int i = threadIdx.x + u * kThreads;
      q_s[i / kScoreCols][i % kScoreCols] = q_v[u];
    }
    __syncthreads();
    if (d0 + kScoreCols < D) load_step(d0 + kScoreCols);
    const int n = D - d0 < kScoreCols ? int(D - d0) : kScoreCols;
#pragma unroll 16
    for (int c = 0; c < n; ++c) dot = __fmaf_rn(q_s[warp][c], rows_s[lane][c], dot);
  }
  const int64_t h = h0 + warp;
  if (h < p.n_heads) scores[(t * p.n_heads + h) * p.n_slots + j0 + lane] = row_of[lane] < 0 ? -INFINITY : float(double(dot) * p.softmax_scale);
}

// Softmax and P.V: one block per (8 heads, 32 columns of head_dim); warp = head, lane = column. Each warp
// first turns its head's scores into the weights exp(m_b - M) * P_j (0 for an empty slot) and the
// denominator, by the fused kernel's formulas; then the block streams the rows' 32 columns through shared
// memory, 128 slots a step with the next step's loads in flight, and every thread adds its slots in
// ascending order.
constexpr int kPvHeads = 8, kPvCols = 32, kPvSlots = 128;
constexpr int kPvLoads = kPvSlots * kPvCols / kThreads;  // 16 per thread and step

// Its shared memory: the weights, maxima and staged rows (an even count of floats), then (kPacked) the slots' row
// addresses, then their row numbers.
size_t pv_shared_bytes(int64_t n_slots, bool packed) {
  return (size_t(kPvHeads) * size_t(n_slots) + size_t(kPvHeads) * size_t(n_slots / 64) + size_t(kPvSlots) * kPvCols) *
             sizeof(float) + size_t(n_slots) * (sizeof(int32_t) + (packed ? sizeof(const uint8_t*) : 0));
}

template <bool kPacked>
__global__ void __launch_bounds__(kThreads, 1) attention_pv_kernel(const AttentionLaunch p, const float* scores) {
  DI_DYNAMIC_SHARED(float, smem);
  const int64_t n_slots = p.n_slots, n_blocks = n_slots / 64, D = p.head_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* weight = smem + warp * n_slots;                          // [kPvHeads][n_slots]
  float* block_max = smem + kPvHeads * n_slots + warp * n_blocks;  // [kPvHeads][n_blocks] running maxima
  float* v_s = smem + kPvHeads * (n_slots + n_blocks);            // [kPvSlots][kPvCols]
  const uint8_t** row_at = reinterpret_cast<const uint8_t**>(v_s + kPvSlots * kPvCols);  // kPacked: [n_slots]
  int32_t* row_of = kPacked ? reinterpret_cast<int32_t*>(row_at + n_slots) : reinterpret_cast<int32_t*>(v_s + kPvSlots * kPvCols);
  const int64_t t = blockIdx.z;
  for (int64_t j = threadIdx.x; j < n_slots; j += kThreads) {
    const int32_t row = p.slot_row[t * n_slots + j];
    row_of[j] = row;
    if constexpr (kPacked) row_at[j] = row < 0 ? nullptr : packed_row_address(p, row);
  }
  __syncthreads();  // row_of before the softmax reads it
  const int64_t h = int64_t(blockIdx.x) * kPvHeads + warp;
  float denom = 1.0f;
  if (h < p.n_heads) {  // AT2 for head h, in this warp alone
    const float* s = scores + (t * p.n_heads + h) * n_slots;
    float running = -INFINITY;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const float s0 = s[b * 64 + lane], s1 = s[b * 64 + 32 + lane];
      weight[b * 64 + lane] = s0;
      weight[b * 64 + 32 + lane] = s1;
      running = fmaxf(running, warp_max(fmaxf(s0, s1)));
      if (lane == 0) block_max[b] = running;
    }
    __syncwarp();
    const float m_all = running;
    float denom_part = 0.0f;
    for (int64_t j = lane; j < n_slots; j += 32) {
      const float sj = weight[j];
      if (row_of[j] < 0) {  // an empty slot, by its row as the fused kernel tells it (a filled one may score -inf)
        weight[j] = 0.0f;
        continue;
      }
      const float mb = p.block_running_max ? block_max[j / 64] : m_all;
      const float prob = round_bf16(expf(sj - mb));  // the bf16 P of the tilelang kernel
      weight[j] = expf(mb - m_all) * prob;
      denom_part += expf(sj - m_all);
    }
    denom = warp_sum(denom_part) + expf(p.sink[h] - m_all);
  } else {
    for (int64_t j = lane; j < n_slots; j += 32) weight[j] = 0.0f;  // a head past the last: computed, not stored
  }
  const int64_t d = int64_t(blockIdx.y) * kPvCols + lane;
  float v_next[kPvLoads];
  auto load_step = [&](int64_t j0) {  // element i: slot j0 + i / kPvCols, column i % kPvCols
#pragma unroll
    for (int u = 0; u < kPvLoads; ++u) {
      const int i = threadIdx.x + u * kThreads;
      const int64_t j = j0 + i / kPvCols, col = int64_t(blockIdx.y) * kPvCols + i % kPvCols;
      const int32_t row = j < n_slots ? row_of[j] : -1;
      v_next[u] = row >= 0 && col < D ? row_value<kPacked>(p, row, kPacked ? row_at[j] : nullptr, col) : 0.0f;
    }
  };
  __syncthreads();  // row_of and every warp's weights are written
  load_step(0);
  float acc = 0.0f;
  for (int64_t j0 = 0; j0 < n_slots; j0 += kPvSlots) {
    __syncthreads();  // the previous step's FMAs are done with v_s
#pragma unroll
    for (int u = 0; u < kPvLoads; ++u) v_s[threadIdx.x + u * kThreads] = v_next[u];
    __syncthreads();
    if (j0 + kPvSlots < n_slots) load_step(j0 + kPvSlots);
    const int n = n_slots - j0 < kPvSlots ? int(n_slots - j0) : kPvSlots;
    const float* w = weight + j0;
#pragma unroll 16
    for (int jj = 0; jj < n; ++jj) acc = __fmaf_rn(w[jj], v_s[jj * kPvCols + lane], acc);
  }
  if (h < p.n_heads && d < D) p.out[(t * p.n_heads + h) * D + d] = round_bf16(acc / denom);
}

// Grid: (blocks of 32 keys, query tokens). One warp per kIndexKeysPerWarp keys, their dot products
// interleaved (independent FMA chains); lane l takes heads l, l + 32, .... q sits in shared memory with a padded pitch (dim + 1) so the lanes' different
// heads fall in different banks; it is staged with 8 loads in flight per thread, once per 32 keys. Each
// key's sum is the same whatever keys share its warp. kPacked: the keys are read packed (key_slots), each warp
// decoding its keys into shared memory first with packed_row_value, as launch_unpack_rows does, so the sums are
// the same.
constexpr int kIndexKeysPerWarp = 4;
constexpr int kIndexKeysPerBlock = kIndexKeysPerWarp * kThreads / 32;

template <bool kPacked>
__global__ void __launch_bounds__(kThreads) index_scores_kernel(const IndexScoreLaunch p) {
  DI_DYNAMIC_SHARED(float, q_s);
  const int64_t t = blockIdx.y;
  const int64_t n_keys = p.token_keys ? p.token_keys[t] : p.n_keys;  // this token's keys
  if (int64_t(blockIdx.x) * kIndexKeysPerBlock >= n_keys) return;    // the whole block: no barrier waits
  const float* q = p.q + t * p.n_heads * p.dim;
  const float* weights = p.weights + t * p.n_heads;
  float* scores = p.scores + (p.token_scores_at ? p.token_scores_at[t] : t * p.n_keys);
  const int dim = int(p.dim), pitch = dim + 1, n_q = int(p.n_heads) * dim;
  for (int i0 = threadIdx.x; i0 < n_q; i0 += 8 * kThreads) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = i0 + u * kThreads;
      v[u] = i < n_q ? q[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = i0 + u * kThreads;
      if (i < n_q) q_s[(i / dim) * pitch + i % dim] = v[u];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j0 = int64_t(blockIdx.x) * kIndexKeysPerBlock + int64_t(warp) * kIndexKeysPerWarp;
  if (j0 >= n_keys) return;
  const int64_t first_row = p.token_keys_at ? p.token_keys_at[t] : 0;  // this token's key rows
  const float* key[kIndexKeysPerWarp];
  if constexpr (kPacked) {  // the warp's keys decoded behind q
    float* k_s = q_s + p.n_heads * pitch + warp * kIndexKeysPerWarp * dim;
    const PackedRowFormat f{PackedRowKind::kE2m1E8m0Scales, dim, 0, int32_t(p.key_block)};
    for (int i = lane; i < kIndexKeysPerWarp * dim; i += 32) {
      const int u = i / dim, d = i % dim;
      const int64_t j = j0 + u < n_keys ? j0 + u : j0;  // past the end: a repeat, not stored
      k_s[i] = packed_row_value(f, p.packed_keys + p.key_slots[first_row + j] * p.key_row_bytes, d);
    }
    __syncwarp();
#pragma unroll
    for (int u = 0; u < kIndexKeysPerWarp; ++u) key[u] = k_s + u * dim;
  } else {
    const float* keys = p.keys + first_row * p.dim;
#pragma unroll
    for (int u = 0; u < kIndexKeysPerWarp; ++u) key[u] = keys + (j0 + u < n_keys ? j0 + u : j0) * p.dim;  // past the end: a repeat, not stored
  }
  float total[kIndexKeysPerWarp] = {};
  for (int h = lane; h < p.n_heads; h += 32) {
    const float* qh = q_s + h * pitch;
    float dot[kIndexKeysPerWarp] = {};
    for (int d = 0; d < dim; ++d) {
      const float qd = qh[d];
#pragma unroll
      for (int u = 0; u < kIndexKeysPerWarp; ++u) {
        if constexpr (kPacked) {
          dot[u] = __fmaf_rn(qd, key[u][d], dot[u]);
        } else {
          dot[u] = __fmaf_rn(qd, __ldg(key[u] + d), dot[u]);
        }
      }
    }
    const float w = weights[h];
#pragma unroll
    for (int u = 0; u < kIndexKeysPerWarp; ++u) total[u] += round_bf16(fmaxf(round_bf16(dot[u]), 0.0f) * w);
  }
#pragma unroll
  for (int u = 0; u < kIndexKeysPerWarp; ++u) {
    const float sum = warp_sum(total[u]);
    if (lane == 0 && j0 + u < n_keys) scores[j0 + u] = round_bf16(sum);
  }
}

}  // namespace

size_t sparse_attention_shared_bytes(int64_t n_slots, bool packed_rows) {
  return size_t(fused_shared_floats(n_slots)) * sizeof(float) + (packed_rows ? size_t(n_slots) * sizeof(const uint8_t*) : 0);
}

namespace {

// The packed groups as kernels.h describes them: ascending, each a known format, within the slot words' range.
void check_packed_groups(const AttentionLaunch& p) {
  DI_CHECK(p.n_packed >= 0 && p.n_packed <= kMaxAttentionPackedGroups);
  for (int g = 0; g < p.n_packed; ++g) {
    const AttentionPackedRows& r = p.packed[g];
    DI_CHECK(r.bytes && r.row_bytes > 0 && r.block > 0 && r.n_rope >= 0 && r.n_rope < p.head_dim && r.first_row >= 0);
    DI_CHECK(r.kind == PackedRowKind::kE4m3 || r.n_rope == 0);  // e2m1 rows code every value
    DI_CHECK(r.first_row + r.n_rows <= 0x7fffffff && (g == 0 || r.first_row == p.packed[g - 1].first_row + p.packed[g - 1].n_rows));
  }
}

template <bool kPacked>
void launch_fused(const AttentionLaunch& p, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(sparse_attention_kernel<kPacked>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const unsigned d_blocks = unsigned((p.head_dim + kThreads - 1) / kThreads);
  launch_kernel(sparse_attention_kernel<kPacked>, dim3(unsigned(p.n_heads), d_blocks, unsigned(p.n_tokens)), kThreads, smem,
                stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

template <bool kPacked>
void launch_split(const AttentionLaunch& p, float* scores, cudaStream_t stream) {
  const unsigned head_groups = unsigned((p.n_heads + kScoreHeads - 1) / kScoreHeads);
  launch_kernel(attention_scores_kernel<kPacked>, dim3(unsigned(p.n_slots / kScoreSlots), head_groups, unsigned(p.n_tokens)),
                kThreads, 0, stream, p, scores);
  DI_CUDA_CHECK_LAUNCH();
  const size_t smem = pv_shared_bytes(p.n_slots, kPacked);
  if (smem > 48 * 1024) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(attention_pv_kernel<kPacked>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const unsigned pv_head_groups = unsigned((p.n_heads + kPvHeads - 1) / kPvHeads);
  const unsigned col_blocks = unsigned((p.head_dim + kPvCols - 1) / kPvCols);
  launch_kernel(attention_pv_kernel<kPacked>, dim3(pv_head_groups, col_blocks, unsigned(p.n_tokens)), kThreads, smem, stream, p,
                scores);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_sparse_attention(const AttentionLaunch& p, cudaStream_t stream) {
  DI_CHECK(p.n_slots % 64 == 0 && p.n_heads > 0 && p.head_dim > 0 && p.n_tokens > 0 && p.n_tokens <= 65535);
  check_packed_groups(p);
  const bool packed = p.n_packed > 0;
  const size_t smem = sparse_attention_shared_bytes(p.n_slots, packed);
  if (packed) launch_fused<true>(p, smem, stream);
  else launch_fused<false>(p, smem, stream);
}

size_t sparse_attention_split_shared_bytes(int64_t n_slots, bool packed_rows) { return pv_shared_bytes(n_slots, packed_rows); }

void launch_sparse_attention_split(const AttentionLaunch& p, float* scores, cudaStream_t stream) {
  DI_CHECK(p.n_slots % 64 == 0 && p.n_heads > 0 && p.head_dim > 0 && p.n_tokens > 0 && p.n_tokens <= 65535);
  check_packed_groups(p);
  if (p.n_slots == 0) {  // no slot: every output is 0 / (0 + exp(sink - -inf)) = 0, as the fused kernel gives
    DI_CUDA_CHECK(cudaMemsetAsync(p.out, 0, size_t(p.n_tokens * p.n_heads * p.head_dim) * sizeof(float), stream));
    return;
  }
  if (p.n_packed > 0) launch_split<true>(p, scores, stream);
  else launch_split<false>(p, scores, stream);
}

size_t index_scores_shared_bytes(int64_t n_heads, int64_t dim, bool packed_keys) {
  return size_t(n_heads * (dim + 1) + (packed_keys ? kIndexKeysPerBlock * dim : 0)) * sizeof(float);
}

void launch_index_scores(const IndexScoreLaunch& p, cudaStream_t stream) {
  if (p.n_keys == 0) return;
  const bool packed = p.key_slots != nullptr;
  const size_t smem = index_scores_shared_bytes(p.n_heads, p.dim, packed);
  auto* kernel = packed ? index_scores_kernel<true> : index_scores_kernel<false>;
  if (smem > 48 * 1024) DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  DI_CHECK_MSG(p.n_heads * p.dim < (int64_t(1) << 31), "index scores: q too large");
  DI_CHECK(p.n_tokens > 0 && p.n_tokens <= 65535);
  DI_CHECK(!packed || (p.packed_keys && p.key_row_bytes > 0 && p.key_block > 0));
  const unsigned key_blocks = unsigned((p.n_keys + kIndexKeysPerBlock - 1) / kIndexKeysPerBlock);
  launch_kernel(kernel, dim3(key_blocks, unsigned(p.n_tokens)), kThreads, smem, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
