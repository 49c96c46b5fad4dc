// The linear op on FP8 operands for prompt tokens (DEEPINFER_CUDA_PROMPT_LINEAR=fp8): mma.sync m16n8k32 with
// e4m3 A and B and fp32 D (sm_89 and later: every architecture this project builds). The per-output sequence
// it computes is kernels.h's (section "FP8-operand linear"); this file owns the two kernels that run it and
// must not change that sequence by tile, token count or grouping.
//
// Why exact operands: the caller applied the activation QDQ in blocks of B columns (LinearParams::x_e4m3_block),
// so each block of a token's x is e4m3 values times a power of two; the prepass (x_codes_kernel) finds that
// power of two from the block's max |x| and writes the codes, which are then exact. FP8 weights are their own
// stored codes; an e2m1 value (0, 0.5 .. 6) is an e4m3 value too, so FP4 weights go through a nibble LUT.
//
// Layout (linear_fp8_tile): a block of WR x WC warps owns kRows weight rows x kTokens tokens; per 128-wide K
// chunk its weight codes, x codes and both scale rows go to shared memory (two stages: the next chunk's
// copies are in flight while this chunk's mmas run; cp.async for the raw bytes, registers for what needs a
// decode: FP4 nibbles and scale bytes). Each warp owns MG x NG mma tiles (16 rows x 8 tokens each).
//
// K permutation (any works if A and B share it): in a 32-wide step, lane (g, c) = (lane / 4, lane % 4) loads
// the 8 bytes at K offset 8c of its row / token: bytes 0-3 are k-slots 4c..4c+3 (a0, a1 / b0), bytes 4-7 are
// k-slots 16+4c..16+4c+3 (a2, a3 / b1). The step's k set stays [32j, 32j + 32), so its scales are one per
// row and one per token.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_fp8_common.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kChunk = 128;          // K values per staged chunk
constexpr int kSteps = kChunk / 32;  // mma steps per chunk
// Shared-memory bytes per row of codes: 128 + 32 of padding, so that a half warp's 8-byte fragment loads (rows
// g = 0..3 at offsets 160 g + 8 c) fall on 16 distinct bank pairs.
constexpr int kPitch = kChunk + 32;
constexpr int kPrepassWarps = 8;

template <int WR_, int WC_, int MG_, int NG_>
struct TileShape {
  static constexpr int WR = WR_, WC = WC_, MG = MG_, NG = NG_;
  static constexpr int kThreads = 32 * WR * WC;
  static constexpr int kRows = WR * 16 * MG, kTokens = WC * 8 * NG;
  // One stage: weight codes [kRows][kPitch], x codes [kTokens][kPitch], then float scales w [kSteps][kRows]
  // and x [kSteps][kTokens].
  static constexpr int kWBytes = kRows * kPitch, kXBytes = kTokens * kPitch;
  static constexpr int kStageBytes = kWBytes + kXBytes + 4 * kSteps * (kRows + kTokens);
};
// 128 rows x 128 tokens, 8 warps of 64 x 32 (16 mmas a step): twice the reuse of the small tile per byte staged.
using BigTile = TileShape<2, 4, 4, 4>;
// 64 x 64, 4 warps of 32 x 32: for grids the big tile would leave mostly idle (a few hundred tokens).
using SmallTile = TileShape<2, 2, 2, 4>;

// The smallest power of two s with amax / s <= 448 (1 for an all-zero block): every x / s of a block the
// activation QDQ made is then an e4m3 value (kernels.h). amax = m 2^e with m in [1, 2): s = 2^(e-8) while
// m <= 1.75 (448 = 1.75 * 2^8), else 2^(e-7). An amax under 2^-118 (never given by the model's QDQ, whose
// nonzero values are at least 2^-9 * 2^-22) would want a subnormal s: it gets 2^-126 and its codes are rounded.
__device__ __forceinline__ float x_block_scale(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  const uint32_t bits = __float_as_uint(amax);
  int e = int(bits >> 23) - 8 + ((bits & 0x7fffffu) > 0x600000u ? 1 : 0);
  e = max(e, 1);
  return __uint_as_float(uint32_t(e) << 23);
}

// Prepass item `item` (token t, x block b) of op p, one warp: codes[t, k] and scales[t, b].
__device__ __forceinline__ void x_codes_item(const LinearLaunch& p, int64_t item) {
  const int lane = threadIdx.x & 31;
  const int64_t xb = p.x_e4m3_block, n_xb = (p.k_pad + xb - 1) / xb;
  const int64_t t = item / n_xb, b = item % n_xb;
  const int64_t k0 = b * xb, k1 = min(p.k_pad, k0 + xb);
  const float* x = p.x + t * p.k_pad;
  float amax = 0.0f;
  for (int64_t k = k0 + lane; k < k1; k += 32) amax = fmaxf(amax, fabsf(x[k]));
  const float s = x_block_scale(warp_max(amax));
  uint8_t* codes = p.x_codes + t * p.k_pad;
  for (int64_t k = k0 + lane; k < k1; k += 32) {
    // x / s is exact (an e4m3 value in fp32), so the round-to-nearest conversion is too.
    codes[k] = __nv_cvt_float_to_fp8(__fdiv_rn(x[k], s), __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) p.x_scales[item] = s;
}

// One warp per item; a warp past its op's items returns whole (the max is a warp reduction).
__device__ __forceinline__ void x_codes_block(const LinearLaunch& p) {
  const int64_t n_items = p.n_tokens * ((p.k_pad + p.x_e4m3_block - 1) / p.x_e4m3_block);
  const int64_t item = int64_t(blockIdx.x) * kPrepassWarps + (threadIdx.x >> 5);
  if (item < n_items) x_codes_item(p, item);
}
__global__ void __launch_bounds__(kPrepassWarps * 32) x_codes_kernel(const LinearLaunch p) { x_codes_block(p); }
// Grouped: blockIdx.y picks the op.
__global__ void __launch_bounds__(kPrepassWarps * 32) x_codes_grouped_kernel(const LinearLaunch* ops) {
  x_codes_block(ops[blockIdx.y]);
}

// What a chunk stages through registers: FP4 weight bytes (decoded at the store) and both scale rows.
template <WeightKind K, class T>
struct RegisterLoads {
  static constexpr int kW4 = K == WeightKind::kFp4 ? T::kRows * (kChunk / 32) / T::kThreads : 0;  // 16-byte pieces
  static constexpr int kWScales = kSteps * T::kRows / T::kThreads;
  static constexpr int kXScales = kSteps * T::kTokens / T::kThreads;
  uint4 w4[kW4 > 0 ? kW4 : 1];
  float w_scale[kWScales], x_scale[kXScales];
};

// Issues chunk c's copies into stage `stage` (cp.async) and its register loads into `r`.
template <WeightKind K, class T>
__device__ __forceinline__ void load_chunk(const LinearLaunch& p, int64_t row0, int64_t t0, int c, uint8_t* stage,
                                           RegisterLoads<K, T>& r) {
  static_assert(T::kRows * 8 % T::kThreads == 0 && T::kTokens * 8 % T::kThreads == 0);
  static_assert(kSteps * T::kRows % T::kThreads == 0 && kSteps * T::kTokens % T::kThreads == 0);
  const int tid = threadIdx.x;
  const int64_t kc = int64_t(c) * kChunk;
  uint8_t* w_codes = stage;
  uint8_t* x_codes = stage + T::kWBytes;
  if constexpr (K == WeightKind::kFp8) {  // 8 pieces of 16 codes a row
#pragma unroll
    for (int i = 0; i < T::kRows * 8 / T::kThreads; ++i) {
      const int item = tid + i * T::kThreads, rr = item >> 3, q = item & 7;
      if (kc + 16 * q < p.k_pad) {
        const int64_t n = p.row_begin + min(row0 + rr, p.n_rows - 1);  // a spare row repeats the last
        cp_async16(w_codes + rr * kPitch + 16 * q, p.w + n * p.row_pitch + kc + 16 * q);
      }
    }
  } else {  // 4 pieces of 32 packed values a row, to registers
#pragma unroll
    for (int i = 0; i < RegisterLoads<K, T>::kW4; ++i) {
      const int item = tid + i * T::kThreads, rr = item >> 2, q = item & 3;
      r.w4[i] = make_uint4(0, 0, 0, 0);
      if (kc + 32 * q < p.k_pad) {
        const int64_t n = p.row_begin + min(row0 + rr, p.n_rows - 1);
        r.w4[i] = __ldg(reinterpret_cast<const uint4*>(p.w + n * p.row_pitch + (kc + 32 * q) / 2));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < T::kTokens * 8 / T::kThreads; ++i) {
    const int item = tid + i * T::kThreads, tt = item >> 3, q = item & 7;
    if (kc + 16 * q < p.k_pad) {
      const int64_t t = t0 + tt;
      if (t < p.n_tokens) cp_async16(x_codes + tt * kPitch + 16 * q, p.x_codes + t * p.k_pad + kc + 16 * q);
      else cp_async16_zero(x_codes + tt * kPitch + 16 * q, p.x_codes);  // a spare token: zero codes
    }
  }
#pragma unroll
  for (int i = 0; i < RegisterLoads<K, T>::kWScales; ++i) {
    const int item = tid + i * T::kThreads, s = item / T::kRows, rr = item % T::kRows;
    const int64_t j = int64_t(c) * kSteps + s;
    r.w_scale[i] = 0.0f;
    if (32 * j < p.k_pad) r.w_scale[i] = weight_scale<K>(p, p.row_begin + min(row0 + rr, p.n_rows - 1), j);
  }
  const int64_t n_xb = (p.k_pad + p.x_e4m3_block - 1) / p.x_e4m3_block;
#pragma unroll
  for (int i = 0; i < RegisterLoads<K, T>::kXScales; ++i) {
    const int item = tid + i * T::kThreads, s = item / T::kTokens, tt = item % T::kTokens;
    const int64_t j = int64_t(c) * kSteps + s, t = t0 + tt;
    r.x_scale[i] = 0.0f;  // a spare token's outputs are never written
    if (32 * j < p.k_pad && t < p.n_tokens) r.x_scale[i] = __ldg(p.x_scales + t * n_xb + 32 * j / p.x_e4m3_block);
  }
}

// The register half of chunk c's staging: FP4 codes through the LUT, and the scales.
template <WeightKind K, class T>
__device__ __forceinline__ void store_chunk(const RegisterLoads<K, T>& r, uint8_t* stage) {
  const int tid = threadIdx.x;
  if constexpr (K == WeightKind::kFp4) {
#pragma unroll
    for (int i = 0; i < RegisterLoads<K, T>::kW4; ++i) {
      const int item = tid + i * T::kThreads, rr = item >> 2, q = item & 3;
      const uint4 v = r.w4[i];  // value 2i in the low nibble of byte i
      uint4* dst = reinterpret_cast<uint4*>(stage + rr * kPitch + 32 * q);
      dst[0] = make_uint4(e2m1x4_to_e4m3x4(v.x), e2m1x4_to_e4m3x4(v.x >> 16), e2m1x4_to_e4m3x4(v.y), e2m1x4_to_e4m3x4(v.y >> 16));
      dst[1] = make_uint4(e2m1x4_to_e4m3x4(v.z), e2m1x4_to_e4m3x4(v.z >> 16), e2m1x4_to_e4m3x4(v.w), e2m1x4_to_e4m3x4(v.w >> 16));
    }
  }
  float* w_scales = reinterpret_cast<float*>(stage + T::kWBytes + T::kXBytes);  // [kSteps][kRows]
  float* x_scales = w_scales + kSteps * T::kRows;                               // [kSteps][kTokens]
#pragma unroll
  for (int i = 0; i < RegisterLoads<K, T>::kWScales; ++i) w_scales[tid + i * T::kThreads] = r.w_scale[i];
#pragma unroll
  for (int i = 0; i < RegisterLoads<K, T>::kXScales; ++i) x_scales[tid + i * T::kThreads] = r.x_scale[i];
}

// The warp's MG x NG mma tiles over the first n_steps steps of a staged chunk: per step and tile, p from a
// zero accumulator, then acc = fmaf(p, sx * sw, acc). kOneRowScale: every row of the warp has the scale of its
// first row (e4m3 weights whose scale block holds the warp's rows): the same products, 8 multiplies a step
// instead of 64 (rows past n_rows, whose outputs are never written, may get another row's scale).
template <class T, bool kOneRowScale>
__device__ __forceinline__ void multiply_chunk(const uint8_t* stage, int n_steps, int warp_row0, int warp_t0,
                                               float (&acc)[T::MG][T::NG][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const uint8_t* w_codes = stage;
  const uint8_t* x_codes = stage + T::kWBytes;
  const float* w_scales = reinterpret_cast<const float*>(stage + T::kWBytes + T::kXBytes);
  const float* x_scales = w_scales + kSteps * T::kRows;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s >= n_steps) break;  // block-uniform: only the last chunk of a K that is not a multiple of 128 is short
    uint32_t a[T::MG][4];
    float sw[T::MG][2];
#pragma unroll
    for (int m = 0; m < T::MG; ++m) {
      const int rr = warp_row0 + 16 * m + g;
      const uint2 top = *reinterpret_cast<const uint2*>(w_codes + rr * kPitch + 32 * s + 8 * c);
      const uint2 bottom = *reinterpret_cast<const uint2*>(w_codes + (rr + 8) * kPitch + 32 * s + 8 * c);
      a[m][0] = top.x, a[m][1] = bottom.x, a[m][2] = top.y, a[m][3] = bottom.y;
      if (!kOneRowScale) {
        sw[m][0] = w_scales[s * T::kRows + rr];
        sw[m][1] = w_scales[s * T::kRows + rr + 8];
      }
    }
    const float sw_warp = kOneRowScale ? w_scales[s * T::kRows + warp_row0] : 0.0f;
#pragma unroll
    for (int j = 0; j < T::NG; ++j) {
      const int tt = warp_t0 + 8 * j;
      const uint2 b = *reinterpret_cast<const uint2*>(x_codes + (tt + g) * kPitch + 32 * s + 8 * c);
      const float2 sx = *reinterpret_cast<const float2*>(x_scales + s * T::kTokens + tt + 2 * c);  // tokens 2c, 2c + 1
      const float s0_warp = sx.x * sw_warp, s1_warp = sx.y * sw_warp;
#pragma unroll
      for (int m = 0; m < T::MG; ++m) {
        float d[4];
        mma_e4m3(d, a[m], b.x, b.y);
        // d0, d1: row g, tokens 2c, 2c + 1; d2, d3: row g + 8, the same tokens. Scales are powers of two
        // (their product exact), so each step's p joins acc with one rounding.
        if (kOneRowScale) {
          acc[m][j][0] = fmaf(d[0], s0_warp, acc[m][j][0]);
          acc[m][j][1] = fmaf(d[1], s1_warp, acc[m][j][1]);
          acc[m][j][2] = fmaf(d[2], s0_warp, acc[m][j][2]);
          acc[m][j][3] = fmaf(d[3], s1_warp, acc[m][j][3]);
        } else {
          acc[m][j][0] = fmaf(d[0], sx.x * sw[m][0], acc[m][j][0]);
          acc[m][j][1] = fmaf(d[1], sx.y * sw[m][0], acc[m][j][1]);
          acc[m][j][2] = fmaf(d[2], sx.x * sw[m][1], acc[m][j][2]);
          acc[m][j][3] = fmaf(d[3], sx.y * sw[m][1], acc[m][j][3]);
        }
      }
    }
  }
}

// One block's tile (grid x: row tiles, y: token tiles): every chunk of K in ascending order, then the epilogue.
template <WeightKind K, class T>
__device__ __forceinline__ void linear_fp8_tile(const LinearLaunch& p, uint8_t* smem) {
  const int warp = threadIdx.x >> 5;
  const int64_t row0 = int64_t(blockIdx.x) * T::kRows, t0 = int64_t(blockIdx.y) * T::kTokens;
  const int warp_row0 = 16 * T::MG * (warp % T::WR), warp_t0 = 8 * T::NG * (warp / T::WR);
  const int n_chunks = int((p.k_pad + kChunk - 1) / kChunk);
  float acc[T::MG][T::NG][4];
#pragma unroll
  for (int m = 0; m < T::MG; ++m)
#pragma unroll
    for (int j = 0; j < T::NG; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;

  // Warp-uniform: the warp's rows lie in one e4m3 scale block (V4's 128-row blocks, row_begin a multiple of
  // the warp's rows), so one scale serves them all. The same bits either way.
  bool one_row_scale = false;
  if constexpr (K == WeightKind::kFp8) {
    const int64_t first = p.row_begin + row0 + warp_row0;
    one_row_scale = first / p.block == (first + 16 * T::MG - 1) / p.block;
  }

  RegisterLoads<K, T> r;
  load_chunk<K, T>(p, row0, t0, 0, smem, r);
  store_chunk<K, T>(r, smem);
  cp_async_wait_all();
  __syncthreads();
#pragma unroll 1
  for (int c = 0; c < n_chunks; ++c) {
    uint8_t* stage = smem + (c & 1) * T::kStageBytes;
    uint8_t* next = smem + ((c + 1) & 1) * T::kStageBytes;
    const bool more = c + 1 < n_chunks;  // block-uniform
    // `next` was last read by chunk c - 1's mmas, which every thread finished before the barrier that ended
    // that chunk.
    if (more) load_chunk<K, T>(p, row0, t0, c + 1, next, r);
    const int n_steps = int(min(int64_t(kSteps), (p.k_pad - int64_t(c) * kChunk) / 32));
    if (K == WeightKind::kFp8 && one_row_scale) multiply_chunk<T, true>(stage, n_steps, warp_row0, warp_t0, acc);
    else multiply_chunk<T, false>(stage, n_steps, warp_row0, warp_t0, acc);
    if (more) store_chunk<K, T>(r, next);
    cp_async_wait_all();
    __syncthreads();
  }

  const int lane = threadIdx.x & 31, g = lane >> 2, tc = lane & 3;
#pragma unroll
  for (int m = 0; m < T::MG; ++m)
#pragma unroll
    for (int j = 0; j < T::NG; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t rr = row0 + warp_row0 + 16 * m + g + (i >= 2 ? 8 : 0);
        const int64_t t = t0 + warp_t0 + 8 * j + 2 * tc + (i & 1);
        if (rr < p.n_rows && t < p.n_tokens) {
          const int64_t o = t * p.n_rows + rr;
          p.out[o] = apply_epilogue(p.epilogue, acc[m][j][i], p.bias ? p.bias[o] : 0.0f);
        }
      }
}

template <WeightKind K, class T>
__global__ void __launch_bounds__(T::kThreads, 1) linear_fp8_kernel(const LinearLaunch p) {
  DI_DYNAMIC_SHARED(uint4, fp8_smem);  // 16-byte aligned for cp.async
  linear_fp8_tile<K, T>(p, reinterpret_cast<uint8_t*>(fp8_smem));
}

// Grouped: blockIdx.z picks the op; a block past its own op's rows or tokens returns at once, whole.
template <WeightKind K, class T>
__global__ void __launch_bounds__(T::kThreads, 1) linear_fp8_grouped_kernel(const LinearLaunch* ops) {
  DI_DYNAMIC_SHARED(uint4, fp8_smem);
  const LinearLaunch p = ops[blockIdx.z];  // a copy: the output stores cannot make its fields reload
  if (int64_t(blockIdx.x) * T::kRows >= p.n_rows || int64_t(blockIdx.y) * T::kTokens >= p.n_tokens) return;
  linear_fp8_tile<K, T>(p, reinterpret_cast<uint8_t*>(fp8_smem));
}

// The multiprocessors of the current device, looked up once per device.
int device_sm_count() {
  static std::atomic<int> counts[64] = {};
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  int n = device < 64 ? counts[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    if (device < 64) counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

template <WeightKind K, class T>
void launch_tiles(const LinearLaunch* one, const LinearLaunch* ops, int n_ops, int64_t max_rows, int64_t max_tokens,
                  cudaStream_t stream) {
  const int smem = 2 * T::kStageBytes;
  const dim3 grid(unsigned((max_rows + T::kRows - 1) / T::kRows), unsigned((max_tokens + T::kTokens - 1) / T::kTokens),
                  unsigned(n_ops));
  DI_CHECK_MSG(grid.y <= 65535, "too many tokens for one linear launch");
  static std::atomic<uint64_t> one_done{0}, grouped_done{0};  // per K and T: this instantiation's kernels
  if (one) {
    allow_shared_bytes(linear_fp8_kernel<K, T>, smem, one_done);
    launch_kernel(linear_fp8_kernel<K, T>, grid, T::kThreads, smem, stream, *one);
  } else {
    allow_shared_bytes(linear_fp8_grouped_kernel<K, T>, smem, grouped_done);
    launch_kernel(linear_fp8_grouped_kernel<K, T>, grid, T::kThreads, smem, stream, ops);
  }
  DI_CUDA_CHECK_LAUNCH();
}

// The tile never changes a sum (kernels.h). kFastest: the big one where the tokens fill more than half of it
// and its grid gives every SM a block, else the small one.
template <WeightKind K>
void launch_kind(const LinearLaunch* one, const LinearLaunch* ops, int n_ops, int64_t max_rows, int64_t max_tokens,
                 Fp8TileChoice choice, cudaStream_t stream) {
  const int64_t big_blocks = ((max_rows + BigTile::kRows - 1) / BigTile::kRows) *
                             ((max_tokens + BigTile::kTokens - 1) / BigTile::kTokens) * n_ops;
  const bool big = choice == Fp8TileChoice::kBig ||
                   (choice == Fp8TileChoice::kFastest && max_tokens > SmallTile::kTokens && big_blocks >= device_sm_count());
  if (big) launch_tiles<K, BigTile>(one, ops, n_ops, max_rows, max_tokens, stream);
  else launch_tiles<K, SmallTile>(one, ops, n_ops, max_rows, max_tokens, stream);
}

void launch(const LinearLaunch* one, const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows,
            int64_t max_tokens, Fp8TileChoice choice, cudaStream_t stream) {
  DI_CHECK(max_rows > 0 && max_tokens > 0 && n_ops > 0 && n_ops <= 65535);
  switch (kind) {
    case WeightKind::kFp8: launch_kind<WeightKind::kFp8>(one, ops, n_ops, max_rows, max_tokens, choice, stream); break;
    case WeightKind::kFp4: launch_kind<WeightKind::kFp4>(one, ops, n_ops, max_rows, max_tokens, choice, stream); break;
    default: DI_CHECK_MSG(false, "the FP8-operand linear takes e4m3 or e2m1 weights only");
  }
}

}  // namespace

void launch_linear_fp8_codes(const LinearLaunch& p, cudaStream_t stream) {
  DI_CHECK(p.x_codes && p.x_scales && p.x_e4m3_block > 0);
  const int64_t blocks = (linear_fp8_code_items(p) + kPrepassWarps - 1) / kPrepassWarps;
  if (blocks == 0) return;
  DI_CHECK_MSG(blocks < (int64_t(1) << 31), "too many tokens for one prepass launch");
  launch_kernel(x_codes_kernel, unsigned(blocks), kPrepassWarps * 32, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_linear_fp8_codes_grouped(const LinearLaunch* ops, int n_ops, int64_t max_items, cudaStream_t stream) {
  if (n_ops == 0 || max_items == 0) return;
  DI_CHECK(n_ops <= 65535);
  const int64_t blocks = (max_items + kPrepassWarps - 1) / kPrepassWarps;
  DI_CHECK_MSG(blocks < (int64_t(1) << 31), "too many tokens for one prepass launch");
  launch_kernel(x_codes_grouped_kernel, dim3(unsigned(blocks), unsigned(n_ops)), kPrepassWarps * 32, 0, stream, ops);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_linear_fp8(const LinearLaunch& p, cudaStream_t stream, Fp8TileChoice choice) {
  DI_CHECK(p.k_pad % 32 == 0 && p.x_codes && p.x_scales && linear_fp8_supports(p.kind, p.block, p.x_e4m3_block));
  launch(&p, nullptr, 1, p.kind, p.n_rows, p.n_tokens, choice, stream);
}

void launch_linear_fp8_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows, int64_t max_tokens,
                               cudaStream_t stream, Fp8TileChoice choice) {
  if (n_ops == 0) return;
  launch(nullptr, ops, n_ops, kind, max_rows, max_tokens, choice, stream);
}

}  // namespace deepinfer::cuda
