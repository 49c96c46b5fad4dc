// The tensor-core linear for many tokens: operands staged once per block in shared memory.
//
// Why: the register kernel (linear_mma_kernel.cu) has each warp load and decode its own 16 weight rows and
// read its tokens' x straight from global memory, so a prefill's weights are decoded once per 32-token tile
// and x is read once per 16-row tile (run 2 on the H200: 34-43 TFLOP/s at 64-1024 tokens, 4-15% of
// cuBLASLt). Here a block of 4 warps owns 64 rows x 64 tokens: per 32-wide K chunk it decodes the block's
// weights to bf16 and splits its x into the three bf16 terms once, into shared memory, and each warp reads
// its fragments from there (a 32 x 32 warp tile: 16 mmas per chunk for bf16 x). The next chunk's global
// loads are issued before the current chunk's mmas, into registers, so they are in flight while it computes.
//
// Same bits as the register kernel, so the launcher may pick either by the token count without breaking
// batch invariance: every output is accumulated over the same K slices (slice_split, set by K alone), the
// chunks of a slice in ascending order, each chunk's two 16-wide steps as the hi, mid and lo mmas of the
// same fragments (the K permutation of linear_mma_kernel.cu), the mid and lo mmas skipped for the same
// 8-token x groups, and the slices' sums added in slice order starting from slice 0's (idle slices add 0).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/linear_mma_fragments.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kTileRows = 64, kTileTokens = 64, kThreads = 128;
constexpr int kWeightItems = kTileRows * 4;       // Raw8 runs of 8 weights per chunk (4 per row)
constexpr int kTokenGroups = kTileTokens / 8;     // 8-token x groups per tile (one warp stages one at a time)

// One chunk's operands as the mma fragments want them: row r's (or token t's) 32 values as 4 uint4 of bf16
// pairs, run q holding k = 8q .. 8q + 7 of the chunk (the lane with tig = q reads it whole).
struct StagedChunk {
  uint4 w[kTileRows][4];
  uint4 x[3][kTileTokens][4];  // hi, mid, lo terms
  int low_bits[kTokenGroups];  // the group has mid / lo terms (else those two planes are stale)
};

// The next chunk's global loads, held in registers while the current chunk computes.
struct ChunkLoads {
  Raw8 w[kWeightItems / kThreads];
  float4 x[kTokenGroups / 4][2];  // per group this warp stages: lane (g, tig)'s 8 x values
};

__device__ __forceinline__ uint4 pack8(const float v[8]) {
  return make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}

template <WeightKind K>
__device__ __forceinline__ void load_chunk(const LinearLaunch& p, int64_t row0, int64_t t0, int c, ChunkLoads& l) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kWeightItems / kThreads; ++i) {
    const int item = threadIdx.x + i * kThreads, r = item >> 2, q = item & 3;
    const int64_t n = p.row_begin + min(row0 + r, p.n_rows - 1);  // a spare row repeats the last
    l.w[i] = load_raw8<K>(p, n, c * 32 + 8 * q);
  }
#pragma unroll
  for (int i = 0; i < kTokenGroups / 4; ++i) {
    const int64_t t = t0 + (warp + 4 * i) * 8 + (lane >> 2);
    const int k0 = c * 32 + 8 * (lane & 3);
    if (t < p.n_tokens) {
      const float4* x = reinterpret_cast<const float4*>(p.x + t * p.k_pad + k0);
      l.x[i][0] = __ldg(x);
      l.x[i][1] = __ldg(x + 1);
    } else {  // a spare token: zero x, as in the register kernel
      l.x[i][0] = l.x[i][1] = make_float4(0, 0, 0, 0);
    }
  }
}

template <WeightKind K>
__device__ __forceinline__ void stage_chunk(const ChunkLoads& l, StagedChunk& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kWeightItems / kThreads; ++i) {
    const int item = threadIdx.x + i * kThreads;
    float w[8];
    decode8<K>(l.w[i], w);
    s.w[item >> 2][item & 3] = pack8(w);
  }
#pragma unroll
  for (int i = 0; i < kTokenGroups / 4; ++i) {
    const int group = warp + 4 * i, t = group * 8 + (lane >> 2), q = lane & 3;
    const float v[8] = {l.x[i][0].x, l.x[i][0].y, l.x[i][0].z, l.x[i][0].w,
                        l.x[i][1].x, l.x[i][1].y, l.x[i][1].z, l.x[i][1].w};
    float hi[8], mid[8], lo[8];
    const bool group_low_bits = __any_sync(0xffffffffu, split8(v, hi, mid, lo));  // the register kernel's exact_terms
    s.x[0][t][q] = pack8(hi);
    if (group_low_bits) {
      s.x[1][t][q] = pack8(mid);
      s.x[2][t][q] = pack8(lo);
    }
    if (lane == 0) s.low_bits[group] = group_low_bits;
  }
}

// The warp's 32 rows x 32 tokens of one staged chunk: per token group, the two steps' hi (mid, lo) mmas.
__device__ __forceinline__ void multiply_chunk(const StagedChunk& s, int warp_row0, int warp_t0, float acc[2][4][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  uint32_t a[2][2][4];  // [row group][step]: rows g / g + 8, k pairs {0, 1} and {2, 3} of the step's 4
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const uint4 top = s.w[warp_row0 + 16 * m + g][tig], bottom = s.w[warp_row0 + 16 * m + g + 8][tig];
    a[m][0][0] = top.x, a[m][0][1] = bottom.x, a[m][0][2] = top.y, a[m][0][3] = bottom.y;
    a[m][1][0] = top.z, a[m][1][1] = bottom.z, a[m][1][2] = top.w, a[m][1][3] = bottom.w;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int t = warp_t0 + 8 * j + g;
    const bool low_bits = s.low_bits[(warp_t0 >> 3) + j];  // warp-uniform
    const uint4 hi = s.x[0][t][tig];
    uint4 mid = make_uint4(0, 0, 0, 0), lo = make_uint4(0, 0, 0, 0);
    if (low_bits) {
      mid = s.x[1][t][tig];
      lo = s.x[2][t][tig];
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      mma_bf16(acc[m][j], a[m][0], hi.x, hi.y);
      if (low_bits) {
        mma_bf16(acc[m][j], a[m][0], mid.x, mid.y);
        mma_bf16(acc[m][j], a[m][0], lo.x, lo.y);
      }
      mma_bf16(acc[m][j], a[m][1], hi.z, hi.w);
      if (low_bits) {
        mma_bf16(acc[m][j], a[m][1], mid.z, mid.w);
        mma_bf16(acc[m][j], a[m][1], lo.z, lo.w);
      }
    }
  }
}

// f(m, j, i) for every accumulator of a warp's tile: row group m, token group j, mma output i (unrolled).
template <typename F>
__device__ __forceinline__ void for_each_accumulator(F&& f) {
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) f(m, j, i);
}

// One block's 64 x 64 tile (grid x: row tiles, y: token tiles) over K chunks [c_begin, c_end). Unsplit
// (kSplit false): every chunk, the slices folded as the register kernel's warp 0 adds them, and the outputs
// written. Split: the chunks of slice `slice` alone, and their sum written raw to p.partials[slice].
template <WeightKind K, bool kSplit>
__device__ __forceinline__ void linear_mma_staged_tile(const LinearLaunch& p, SliceSplit split, int slice, StagedChunk* s) {
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = int64_t(blockIdx.x) * kTileRows, t0 = int64_t(blockIdx.y) * kTileTokens;
  const int warp_row0 = 32 * (warp & 1), warp_t0 = 32 * (warp >> 1);
  const int n_chunks = int(p.k_pad / 32);
  const int c_begin = kSplit ? min(n_chunks, slice * split.slice_chunks) : 0;
  const int c_end = kSplit ? min(n_chunks, c_begin + split.slice_chunks) : n_chunks;

  float acc[2][4][4], total[2][4][4];
  for_each_accumulator([&](int m, int j, int i) { acc[m][j][i] = total[m][j][i] = 0.0f; });
  // Slice w's sum joins the total: total = sum of slice 0, then + each later slice's, as the register
  // kernel's warp 0 adds its block's slices.
  auto fold_slice = [&](int w) {
    for_each_accumulator([&](int m, int j, int i) {
      total[m][j][i] = w == 0 ? acc[m][j][i] : total[m][j][i] + acc[m][j][i];
      acc[m][j][i] = 0.0f;
    });
  };

  ChunkLoads loads;
  if (c_begin < c_end) {  // block-uniform; an idle slice (or no K at all) loads nothing
    load_chunk<K>(p, row0, t0, c_begin, loads);
    stage_chunk<K>(loads, s[c_begin & 1]);
  }
  __syncthreads();
  int folded = 0;
#pragma unroll 1
  for (int c = c_begin; c < c_end; ++c) {
    const bool more = c + 1 < c_end;  // block-uniform
    if (more) load_chunk<K>(p, row0, t0, c + 1, loads);
    multiply_chunk(s[c & 1], warp_row0, warp_t0, acc);
    if (!kSplit && ((c + 1) % split.slice_chunks == 0 || !more)) fold_slice(folded++);
    // Buffer (c + 1) & 1 was last read in chunk c - 1's mmas, before the barrier that ended that chunk.
    if (more) stage_chunk<K>(loads, s[(c + 1) & 1]);
    __syncthreads();
  }
  if (!kSplit) {
    for (; folded < split.slices; ++folded) fold_slice(folded);  // idle slices: + 0, as their warps add
  }

  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  for_each_accumulator([&](int m, int j, int i) {
    // i = 0, 1: row g, tokens 2 tig, 2 tig + 1; i = 2, 3: row g + 8, the same tokens.
    const int64_t r = row0 + warp_row0 + 16 * m + g + (i >= 2 ? 8 : 0);
    const int64_t t = t0 + warp_t0 + 8 * j + 2 * tig + (i & 1);
    if (r < p.n_rows && t < p.n_tokens) {
      const int64_t o = t * p.n_rows + r;
      if constexpr (kSplit) p.partials[int64_t(slice) * p.n_tokens * p.n_rows + o] = acc[m][j][i];
      else p.out[o] = apply_epilogue(p.epilogue, total[m][j][i], p.bias ? p.bias[o] : 0.0f);
    }
  });
}

template <WeightKind K>
__global__ void __launch_bounds__(kThreads, 2) linear_mma_staged_kernel(const LinearLaunch p, SliceSplit split) {
  __shared__ StagedChunk s[2];
  linear_mma_staged_tile<K, false>(p, split, 0, s);
}

// Split over K: blockIdx.z is the slice. Without the slices' total it needs ~130 registers: three blocks an SM.
template <WeightKind K>
__global__ void __launch_bounds__(kThreads, 3) linear_mma_staged_split_kernel(const LinearLaunch p, SliceSplit split) {
  __shared__ StagedChunk s[2];
  linear_mma_staged_tile<K, true>(p, split, int(blockIdx.z), s);
}

// The split launch's second kernel: each output adds its slices' sums in slice order, from slice 0's.
__global__ void linear_slices_sum_kernel(const LinearLaunch p, int slices) {
  const int64_t n = p.n_tokens * p.n_rows;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    float total = p.partials[o];
    for (int w = 1; w < slices; ++w) total += p.partials[w * n + o];
    p.out[o] = apply_epilogue(p.epilogue, total, p.bias ? p.bias[o] : 0.0f);
  }
}

// Grouped: blockIdx.z picks the op; a block past its own op's rows or tokens returns at once, whole.
template <WeightKind K>
__global__ void __launch_bounds__(kThreads, 2) linear_mma_staged_grouped_kernel(const LinearLaunch* ops, SliceSplit split) {
  __shared__ StagedChunk s[2];
  const LinearLaunch p = ops[blockIdx.z];  // a copy: the output stores cannot make its fields reload
  if (int64_t(blockIdx.x) * kTileRows >= p.n_rows || int64_t(blockIdx.y) * kTileTokens >= p.n_tokens) return;
  linear_mma_staged_tile<K, false>(p, split, 0, s);
}

enum class Launch { kOne, kOneSplit, kGrouped };

template <WeightKind K>
void launch_kind(Launch how, const LinearLaunch* one, const LinearLaunch* ops, int n_ops, int64_t k_pad, int64_t max_rows,
                 int64_t max_tokens, cudaStream_t stream) {
  const SliceSplit split = slice_split(k_pad);
  const unsigned row_tiles = unsigned((max_rows + kTileRows - 1) / kTileRows);
  const unsigned token_tiles = unsigned((max_tokens + kTileTokens - 1) / kTileTokens);
  switch (how) {
    case Launch::kOne:
      launch_kernel(linear_mma_staged_kernel<K>, dim3(row_tiles, token_tiles), kThreads, 0, stream, *one, split);
      break;
    case Launch::kOneSplit: {
      launch_kernel(linear_mma_staged_split_kernel<K>, dim3(row_tiles, token_tiles, unsigned(split.slices)), kThreads, 0,
                    stream, *one, split);
      DI_CUDA_CHECK_LAUNCH();
      const int64_t n = one->n_tokens * one->n_rows;
      launch_kernel(linear_slices_sum_kernel, unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, stream, *one,
                    split.slices);
      break;
    }
    case Launch::kGrouped:
      launch_kernel(linear_mma_staged_grouped_kernel<K>, dim3(row_tiles, token_tiles, unsigned(n_ops)), kThreads, 0, stream,
                    ops, split);
      break;
  }
  DI_CUDA_CHECK_LAUNCH();
}

void launch(Launch how, const LinearLaunch* one, const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad,
            int64_t max_rows, int64_t max_tokens, cudaStream_t stream) {
  DI_CHECK(k_pad > 0 && k_pad % 32 == 0 && max_rows > 0 && max_tokens > 0 && n_ops > 0 && n_ops <= 65535);
  DI_CHECK_MSG((max_tokens + kTileTokens - 1) / kTileTokens <= 65535, "too many tokens for one linear launch");
  switch (kind) {
    case WeightKind::kBf16: launch_kind<WeightKind::kBf16>(how, one, ops, n_ops, k_pad, max_rows, max_tokens, stream); break;
    case WeightKind::kFp8: launch_kind<WeightKind::kFp8>(how, one, ops, n_ops, k_pad, max_rows, max_tokens, stream); break;
    case WeightKind::kFp4: launch_kind<WeightKind::kFp4>(how, one, ops, n_ops, k_pad, max_rows, max_tokens, stream); break;
  }
}

}  // namespace

void launch_linear_mma_staged(const LinearLaunch& p, cudaStream_t stream) {
  launch(Launch::kOne, &p, nullptr, 1, p.kind, p.k_pad, p.n_rows, p.n_tokens, stream);
}

int64_t linear_mma_staged_partial_floats(const LinearLaunch& p) {
  const SliceSplit split = slice_split(p.k_pad);
  return split.slices > 1 ? split.slices * p.n_tokens * p.n_rows : 0;
}

void launch_linear_mma_staged_split(const LinearLaunch& p, cudaStream_t stream) {
  DI_CHECK_MSG(p.partials != nullptr && linear_mma_staged_partial_floats(p) > 0, "a split launch needs K slices and partials");
  launch(Launch::kOneSplit, &p, nullptr, 1, p.kind, p.k_pad, p.n_rows, p.n_tokens, stream);
}

void launch_linear_mma_staged_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad,
                                      int64_t max_rows, int64_t max_tokens, cudaStream_t stream) {
  if (n_ops == 0) return;
  launch(Launch::kGrouped, nullptr, ops, n_ops, kind, k_pad, max_rows, max_tokens, stream);
}

}  // namespace deepinfer::cuda
