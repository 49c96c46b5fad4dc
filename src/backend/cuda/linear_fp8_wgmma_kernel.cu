// The linear op on FP8 operands for prompt tokens on Hopper's warpgroup MMA (DEEPINFER_CUDA_PROMPT_LINEAR=wgmma):
// wgmma.mma_async m64n128k32 with e4m3 A (weight codes) and B (x codes) read from shared memory through matrix
// descriptors, fp32 D in registers. sm_90a only: every other architecture builds a kernel that traps, and the
// backend refuses the path unless the device is compute capability 9.0. The per-output sequence is kernels.h's
// (section "FP8-operand linear on wgmma"); this file must not change it by tile, token count or grouping. It
// takes the x codes and scales of linear_fp8_kernel.cu's prepass (launch_linear_fp8_codes) unchanged.
//
// Block: 2 warpgroups (256 threads) own 128 weight rows (warpgroup w: rows 64 w .. 64 w + 63) x 128 tokens (both
// warpgroups read the same x codes). K goes through shared memory in 128-wide chunks, kStages stages: the copies
// of chunks c + 1 .. c + 3 are in flight while chunk c's wgmmas run. Per 32-wide step: one wgmma from a zero
// accumulator (scale-d = 0) into registers d, then acc = fmaf(d, sx * sw, acc); one warpgroup scales while the
// other's wgmma runs. That scaling is one FMA per output per step, as much issue as the wgmma's tensor time, so
// it is kept to that where it can be: where the block's rows share an e4m3 scale block (RowScales::kPerBlock, V4's
// 128-row blocks) the staging stores sx * sw, and each thread's x scales are one 16-byte load per 16 tokens.
//
// Shared layout (the canonical K-major layout without swizzle): a [R][128] tile of codes is core matrices of 8
// rows x 16 bytes (128 contiguous bytes, row r at 16 r), core matrix (r / 8, k / 16) at ((r / 8) * 8 + k / 16) *
// 128. So core matrices adjacent in K are 128 bytes apart (the descriptor's leading byte offset) and adjacent in
// rows 1024 (its stride byte offset), and step s of a chunk starts at byte 256 s.
#include <cuda_runtime.h>

#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_fp8_common.cuh"
#include "backend/cuda/ptx_wgmma_instructions.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kRows = 128, kTokens = 128;  // a block's tile: 2 warpgroups of m64 x n128
constexpr int kThreads = 256;
constexpr int kChunk = 128;                // K values per stage
constexpr int kSteps = kChunk / 32;        // wgmma steps per chunk
constexpr int kStages = 4;                 // chunk c (read) and c + 1 .. c + 3 (copies in flight)
// One stage: weight codes [kRows][kChunk], x codes [kTokens][kChunk] (both core-matrix tiled), then float
// scales w [kSteps][kRows] and x [kSteps][kTokens].
constexpr int kWBytes = kRows * kChunk, kXBytes = kTokens * kChunk;
constexpr int kStageBytes = kWBytes + kXBytes + 4 * kSteps * (kRows + kTokens);
constexpr int kSharedBytes = kStages * kStageBytes;  // 144 KB

// What a chunk stages through registers: FP4 weight bytes (decoded at the store) and both scale rows.
template <WeightKind K>
struct RegisterLoads {
  static constexpr int kW4 = K == WeightKind::kFp4 ? kRows * (kChunk / 32) / kThreads : 0;  // 16-byte pieces
  static constexpr int kWScales = kSteps * kRows / kThreads, kXScales = kSteps * kTokens / kThreads;
  uint4 w4[kW4 > 0 ? kW4 : 1];
  float w_scale[kWScales], x_scale[kXScales];
};

// How a block's rows get their weight scales (each choice gives the same products sx * sw, exact powers of two):
// kPerRow (e2m1, or a warp across an e4m3 scale-block edge): each row its own; kPerWarp: the warp's 16 rows share
// one; kPerBlock: all of the block's rows share one (e4m3 blocks of 128 rows, the block's rows inside one), which
// the staging multiplies into the staged x scales, so that a step's scaling is one FMA per output.
enum class RowScales { kPerRow, kPerWarp, kPerBlock };

#if DI_WGMMA_DEVICE_CODE

constexpr int kAhead = kStages - 1;  // chunks in flight ahead of the one read
constexpr int kCoreBytes = 128, kLeadingBytes = 128, kStrideBytes = 1024;
static_assert(kStageBytes % 1024 == 0);

// Byte offset of code (r, k) in a core-matrix tiled [R][kChunk] tile.
__device__ __forceinline__ constexpr int tiled_offset(int r, int k) {
  return ((r / 8) * (kChunk / 16) + k / 16) * kCoreBytes + (r % 8) * 16 + k % 16;
}

// A shared-memory matrix descriptor: start address, leading (K) and stride (row) byte offsets, all >> 4; no
// swizzle (bits 62-63 zero), base offset 0.
__device__ __forceinline__ uint64_t matrix_descriptor(const uint8_t* tile) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  return uint64_t((address & 0x3ffffu) >> 4) | (uint64_t(kLeadingBytes >> 4) << 16) | (uint64_t(kStrideBytes >> 4) << 32);
}


// Where token tt's x scale sits in a step's row of kTokens: token 16 m + 8 h + 2 c + e at 16 m + 4 c + 2 h + e, so
// that the four a thread scales with (D columns 8 q + 2 c + e, q = 2 m, 2 m + 1) are one 16-byte load.
__device__ __forceinline__ int scale_slot(int tt) {
  return (tt & ~15) | ((tt & 6) << 1) | ((tt >> 2) & 2) | (tt & 1);
}

// Issues chunk c's copies into `stage` (cp.async, core-matrix tiled: 8 consecutive threads fill one core
// matrix) and its register loads into `r`.
template <WeightKind K>
__device__ __forceinline__ void load_chunk(const LinearLaunch& p, int64_t row0, int64_t t0, int c, uint8_t* stage,
                                           RegisterLoads<K>& r, bool per_block) {
  const int tid = threadIdx.x;
  const int64_t kc = int64_t(c) * kChunk;
  if constexpr (K == WeightKind::kFp8) {  // 8 pieces of 16 codes a row
#pragma unroll
    for (int i = 0; i < kRows * 8 / kThreads; ++i) {
      const int item = tid + i * kThreads, q = (item >> 3) & 7, rr = (item >> 6) * 8 + (item & 7);
      if (kc + 16 * q < p.k_pad) {
        const int64_t n = p.row_begin + min(row0 + rr, p.n_rows - 1);  // a spare row repeats the last
        cp_async16(stage + tiled_offset(rr, 16 * q), p.w + n * p.row_pitch + kc + 16 * q);
      }
    }
  } else {  // 4 pieces of 32 packed values a row, to registers
#pragma unroll
    for (int i = 0; i < RegisterLoads<K>::kW4; ++i) {
      const int item = tid + i * kThreads, q = (item >> 3) & 3, rr = (item >> 5) * 8 + (item & 7);
      r.w4[i] = make_uint4(0, 0, 0, 0);
      if (kc + 32 * q < p.k_pad) {
        const int64_t n = p.row_begin + min(row0 + rr, p.n_rows - 1);
        r.w4[i] = __ldg(reinterpret_cast<const uint4*>(p.w + n * p.row_pitch + (kc + 32 * q) / 2));
      }
    }
  }
  uint8_t* x_codes = stage + kWBytes;
#pragma unroll
  for (int i = 0; i < kTokens * 8 / kThreads; ++i) {
    const int item = tid + i * kThreads, q = (item >> 3) & 7, tt = (item >> 6) * 8 + (item & 7);
    if (kc + 16 * q < p.k_pad) {
      const int64_t t = t0 + tt;
      if (t < p.n_tokens) cp_async16(x_codes + tiled_offset(tt, 16 * q), p.x_codes + t * p.k_pad + kc + 16 * q);
      else cp_async16_zero(x_codes + tiled_offset(tt, 16 * q), p.x_codes);  // a spare token: zero codes
    }
  }
#pragma unroll
  for (int i = 0; i < RegisterLoads<K>::kWScales; ++i) {
    const int item = tid + i * kThreads, s = item / kRows, rr = item % kRows;
    const int64_t j = int64_t(c) * kSteps + s;
    r.w_scale[i] = 0.0f;
    if (32 * j < p.k_pad) r.w_scale[i] = weight_scale<K>(p, p.row_begin + min(row0 + rr, p.n_rows - 1), j);
  }
  const int64_t n_xb = (p.k_pad + p.x_e4m3_block - 1) / p.x_e4m3_block;
#pragma unroll
  for (int i = 0; i < RegisterLoads<K>::kXScales; ++i) {
    const int item = tid + i * kThreads, s = item / kTokens, tt = item % kTokens;
    const int64_t j = int64_t(c) * kSteps + s, t = t0 + tt;
    r.x_scale[i] = 0.0f;  // a spare token's outputs are never written
    if (32 * j < p.k_pad && t < p.n_tokens) {
      r.x_scale[i] = __ldg(p.x_scales + t * n_xb + 32 * j / p.x_e4m3_block);
      if (per_block) r.x_scale[i] *= weight_scale<K>(p, p.row_begin + row0, j);  // sx * sw, as kPerRow multiplies
    }
  }
}

// The register half of a chunk's staging: FP4 codes through the LUT, and the scales.
template <WeightKind K>
__device__ __forceinline__ void store_chunk(const RegisterLoads<K>& r, uint8_t* stage) {
  const int tid = threadIdx.x;
  if constexpr (K == WeightKind::kFp4) {
#pragma unroll
    for (int i = 0; i < RegisterLoads<K>::kW4; ++i) {
      const int item = tid + i * kThreads, q = (item >> 3) & 3, rr = (item >> 5) * 8 + (item & 7);
      const uint4 v = r.w4[i];  // value 2i in the low nibble of byte i; codes 32 q .. 32 q + 31 of row rr
      *reinterpret_cast<uint4*>(stage + tiled_offset(rr, 32 * q)) =
          make_uint4(e2m1x4_to_e4m3x4(v.x), e2m1x4_to_e4m3x4(v.x >> 16), e2m1x4_to_e4m3x4(v.y), e2m1x4_to_e4m3x4(v.y >> 16));
      *reinterpret_cast<uint4*>(stage + tiled_offset(rr, 32 * q + 16)) =
          make_uint4(e2m1x4_to_e4m3x4(v.z), e2m1x4_to_e4m3x4(v.z >> 16), e2m1x4_to_e4m3x4(v.w), e2m1x4_to_e4m3x4(v.w >> 16));
    }
  }
  float* w_scales = reinterpret_cast<float*>(stage + kWBytes + kXBytes);  // [kSteps][kRows]
  float* x_scales = w_scales + kSteps * kRows;                            // [kSteps][kTokens], tokens permuted
#pragma unroll
  for (int i = 0; i < RegisterLoads<K>::kWScales; ++i) w_scales[tid + i * kThreads] = r.w_scale[i];
#pragma unroll
  for (int i = 0; i < RegisterLoads<K>::kXScales; ++i) {
    const int item = tid + i * kThreads, s = item / kTokens, tt = item % kTokens;
    x_scales[s * kTokens + scale_slot(tt)] = r.x_scale[i];
  }
}

// acc += one finished step's d, scaled: acc = fmaf(d, sx * sw, acc) per register, in step order. The thread's
// rows are r0 and r0 + 8 of the block (registers 4 q + 0, 1 and 4 q + 2, 3), its tokens 8 q + 2 (lane % 4) + 0, 1.
template <RowScales kScales>
__device__ __forceinline__ void scale_step(const float (&d)[64], float (&acc)[64], const uint8_t* stage, int s, int r0) {
  const int lane = threadIdx.x & 31;
  const float* w_scales = reinterpret_cast<const float*>(stage + kWBytes + kXBytes) + s * kRows;
  const float* x_scales = reinterpret_cast<const float*>(stage + kWBytes + kXBytes) + kSteps * kRows + s * kTokens;
  const float sw0 = kScales == RowScales::kPerBlock ? 1.0f : w_scales[r0];
  const float sw1 = kScales == RowScales::kPerRow ? w_scales[r0 + 8] : sw0;
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    const float4 sx = *reinterpret_cast<const float4*>(x_scales + 16 * m + 4 * (lane & 3));  // scale_slot's order
    const float sx_q[2][2] = {{sx.x, sx.y}, {sx.z, sx.w}};  // [q - 2 m][e]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = 2 * m + h;
      // kPerBlock: the staged scale is already sx * sw.
      const float s00 = kScales == RowScales::kPerBlock ? sx_q[h][0] : sx_q[h][0] * sw0;
      const float s01 = kScales == RowScales::kPerBlock ? sx_q[h][1] : sx_q[h][1] * sw0;
      const float s10 = kScales == RowScales::kPerRow ? sx_q[h][0] * sw1 : s00;
      const float s11 = kScales == RowScales::kPerRow ? sx_q[h][1] * sw1 : s01;
      acc[4 * q + 0] = fmaf(d[4 * q + 0], s00, acc[4 * q + 0]);
      acc[4 * q + 1] = fmaf(d[4 * q + 1], s01, acc[4 * q + 1]);
      acc[4 * q + 2] = fmaf(d[4 * q + 2], s10, acc[4 * q + 2]);
      acc[4 * q + 3] = fmaf(d[4 * q + 3], s11, acc[4 * q + 3]);
    }
  }
}

// Chunk c's steps: per step one wgmma from a zero accumulator into d, wait for it, then d into acc. Within a
// warpgroup nothing overlaps; the other warpgroup's wgmma runs on the tensor cores while this one scales (a
// second register set per warpgroup, to overlap within it, made ptxas serialize the wgmmas: its C7514 warning).
// Every warp of a warpgroup must run the same wgmma instructions (.sync.aligned), so only the scaling branches
// on `scales`, which may differ between the warps (RowScales::kPerWarp is warp-uniform).
__device__ __forceinline__ void multiply_chunk(int c, int n_steps_total, const uint8_t* stage, int warpgroup, int r0,
                                               RowScales scales, float (&acc)[64], float (&d)[64]) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (c * kSteps + s >= n_steps_total) break;  // block-uniform: only the last chunk of a K not a multiple of 128 is short
    const uint64_t a = matrix_descriptor(stage + warpgroup * (64 / 8) * kStrideBytes + s * 2 * kLeadingBytes);
    const uint64_t b = matrix_descriptor(stage + kWBytes + s * 2 * kLeadingBytes);
    wgmma_fence();  // d was last read by the previous step's scaling
    wgmma_m64n128k32(d, a, b);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(d);
    if (scales == RowScales::kPerBlock) scale_step<RowScales::kPerBlock>(d, acc, stage, s, r0);
    else if (scales == RowScales::kPerWarp) scale_step<RowScales::kPerWarp>(d, acc, stage, s, r0);
    else scale_step<RowScales::kPerRow>(d, acc, stage, s, r0);
  }
}

// One block's tile (grid x: row tiles, y: token tiles): every chunk of K in ascending order, then the epilogue.
template <WeightKind K>
__device__ __forceinline__ void linear_wgmma_tile(const LinearLaunch& p, uint8_t* smem) {
  const int tid = threadIdx.x, warpgroup = tid / 128, lane = tid & 31;
  const int64_t row0 = int64_t(blockIdx.x) * kRows, t0 = int64_t(blockIdx.y) * kTokens;
  const int r0 = 64 * warpgroup + 16 * ((tid / 32) % 4) + lane / 4;  // the thread's rows: r0, r0 + 8
  const int n_steps = int(p.k_pad / 32), n_chunks = (n_steps + kSteps - 1) / kSteps;
  float acc[64], d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f, d[i] = 0.0f;
  // Block-uniform: the block's real rows lie in one e4m3 scale block; else warp-uniform: the warp's 16 rows do.
  bool per_block = false;
  RowScales scales = RowScales::kPerRow;
  if constexpr (K == WeightKind::kFp8) {
    const int64_t first = p.row_begin + row0, last = p.row_begin + min(row0 + kRows, p.n_rows) - 1;
    per_block = first / p.block == last / p.block;
    const int64_t warp_first = first + (r0 & ~15);
    if (per_block) scales = RowScales::kPerBlock;
    else if (warp_first / p.block == (warp_first + 15) / p.block) scales = RowScales::kPerWarp;
  }

  RegisterLoads<K> r;
#pragma unroll
  for (int c = 0; c < kAhead; ++c) {
    if (c < n_chunks) {
      load_chunk<K>(p, row0, t0, c, smem + c * kStageBytes, r, per_block);
      store_chunk<K>(r, smem + c * kStageBytes);
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int c = 0; c < n_chunks; ++c) {
    // Chunk c's copies (this thread's) have landed; the fence makes them and the plain stores visible to the
    // wgmmas (the async proxy), the barrier everyone's. Stage (c + kAhead) % kStages was chunk c - 1's, whose
    // wgmmas and scale reads every thread finished before the barrier.
    cp_async_wait<kAhead - 1>();
    fence_proxy_async();
    __syncthreads();
    const int next = c + kAhead;  // block-uniform
    uint8_t* next_stage = smem + (next % kStages) * kStageBytes;
    if (next < n_chunks) load_chunk<K>(p, row0, t0, next, next_stage, r, per_block);
    cp_async_commit();
    const uint8_t* stage = smem + (c % kStages) * kStageBytes;
    multiply_chunk(c, n_steps, stage, warpgroup, r0, scales, acc, d);
    if (next < n_chunks) store_chunk<K>(r, next_stage);
  }

#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int64_t rr = row0 + r0 + 8 * ((i >> 1) & 1);
    const int64_t t = t0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
    if (rr < p.n_rows && t < p.n_tokens) {
      const int64_t o = t * p.n_rows + rr;
      p.out[o] = apply_epilogue(p.epilogue, acc[i], p.bias ? p.bias[o] : 0.0f);
    }
  }
}

#endif  // sm_90a

template <WeightKind K>
__global__ void __launch_bounds__(kThreads, 1) linear_wgmma_kernel(const LinearLaunch p) {
#if DI_WGMMA_DEVICE_CODE
  DI_DYNAMIC_SHARED(__align__(1024) uint8_t, wgmma_smem);
  linear_wgmma_tile<K>(p, wgmma_smem);
#elif defined(__CUDA_ARCH__)
  __trap();  // not sm_90a: the backend never launches it there
#endif
}

// Grouped: blockIdx.z picks the op; a block past its own op's rows or tokens returns at once, whole.
template <WeightKind K>
__global__ void __launch_bounds__(kThreads, 1) linear_wgmma_grouped_kernel(const LinearLaunch* ops) {
#if DI_WGMMA_DEVICE_CODE
  DI_DYNAMIC_SHARED(__align__(1024) uint8_t, wgmma_smem);
  const LinearLaunch p = ops[blockIdx.z];  // a copy: the output stores cannot make its fields reload
  if (int64_t(blockIdx.x) * kRows >= p.n_rows || int64_t(blockIdx.y) * kTokens >= p.n_tokens) return;
  linear_wgmma_tile<K>(p, wgmma_smem);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

template <WeightKind K>
void launch_kind(const LinearLaunch* one, const LinearLaunch* ops, int n_ops, int64_t max_rows, int64_t max_tokens,
                 cudaStream_t stream) {
  const dim3 grid(unsigned((max_rows + kRows - 1) / kRows), unsigned((max_tokens + kTokens - 1) / kTokens), unsigned(n_ops));
  DI_CHECK_MSG(grid.y <= 65535, "too many tokens for one linear launch");
  static std::atomic<uint64_t> one_done{0}, grouped_done{0};  // per K: this instantiation's kernels
  if (one) {
    allow_shared_bytes(linear_wgmma_kernel<K>, kSharedBytes, one_done);
    launch_kernel(linear_wgmma_kernel<K>, grid, kThreads, kSharedBytes, stream, *one);
  } else {
    allow_shared_bytes(linear_wgmma_grouped_kernel<K>, kSharedBytes, grouped_done);
    launch_kernel(linear_wgmma_grouped_kernel<K>, grid, kThreads, kSharedBytes, stream, ops);
  }
  DI_CUDA_CHECK_LAUNCH();
}

void launch(const LinearLaunch* one, const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows,
            int64_t max_tokens, cudaStream_t stream) {
  DI_CHECK(max_rows > 0 && max_tokens > 0 && n_ops > 0 && n_ops <= 65535);
  switch (kind) {
    case WeightKind::kFp8: launch_kind<WeightKind::kFp8>(one, ops, n_ops, max_rows, max_tokens, stream); break;
    case WeightKind::kFp4: launch_kind<WeightKind::kFp4>(one, ops, n_ops, max_rows, max_tokens, stream); break;
    default: DI_CHECK_MSG(false, "the FP8-operand linear takes e4m3 or e2m1 weights only");
  }
}

}  // namespace

void launch_linear_fp8_wgmma(const LinearLaunch& p, cudaStream_t stream) {
  DI_CHECK(p.k_pad % 32 == 0 && p.x_codes && p.x_scales && linear_fp8_supports(p.kind, p.block, p.x_e4m3_block));
  launch(&p, nullptr, 1, p.kind, p.n_rows, p.n_tokens, stream);
}

void launch_linear_fp8_wgmma_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows,
                                     int64_t max_tokens, cudaStream_t stream) {
  if (n_ops == 0) return;
  launch(nullptr, ops, n_ops, kind, max_rows, max_tokens, stream);
}

}  // namespace deepinfer::cuda
