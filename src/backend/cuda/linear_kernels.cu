// The linear op on the GPU, portable path (every architecture): each warp owns R weight rows and a group of
// TT tokens; the 32 lanes stride over 16-byte chunks of the rows (16 e4m3, 8 bf16 or 32 e2m1 codes), decode
// them in registers, apply the chunk's e8m0 block scale to the decoded weight (exact: a power of two) and
// accumulate x * w with fp32 FMAs; a butterfly sums the lanes. Weights are read once per token group.
//
// Batch invariance: an output's arithmetic (which lane takes which chunk, the FMA order inside a chunk,
// the butterfly) depends only on K, never on the number of tokens in the call or the token group size TT,
// so a token's outputs are bit-identical whatever batch it is computed in (chunked prefill and batched
// decode rely on that, as on the CPU).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 4;        // warps per block
constexpr int kRowsPerWarp = 2;  // R

template <WeightKind K> struct KindTraits;
template <> struct KindTraits<WeightKind::kBf16> { static constexpr int kChunk = 8; };
template <> struct KindTraits<WeightKind::kFp8> { static constexpr int kChunk = 16; };
template <> struct KindTraits<WeightKind::kFp4> { static constexpr int kChunk = 32; };

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant after unrolling
}

// Elements 4g..4g+3 of a 16-byte chunk, times the chunk's scale s (1 for bf16).
template <WeightKind K>
__device__ __forceinline__ void decode4(const uint4& raw, int g, float s, float w[4]) {
  if constexpr (K == WeightKind::kBf16) {
    const uint32_t a = word(raw, 2 * g), b = word(raw, 2 * g + 1);
    w[0] = __uint_as_float(a << 16);
    w[1] = __uint_as_float(a & 0xffff0000u);
    w[2] = __uint_as_float(b << 16);
    w[3] = __uint_as_float(b & 0xffff0000u);
  } else if constexpr (K == WeightKind::kFp8) {
    const uint32_t a = word(raw, g);
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = e4m3_value((a >> (8 * i)) & 0xffu) * s;
  } else {  // packed e2m1: element 2i in the low nibble of byte i
    const uint32_t a = word(raw, g / 2) >> (16 * (g % 2));
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = e2m1_value((a >> (4 * i)) & 0xfu) * s;
  }
}

// At most 168 registers (3 blocks of 128 threads per SM): left uncapped, ptxas hoists a whole chunk's x
// loads for TT = 8 (up to 255 registers) and spills on sm_100a and sm_120; capped, no variant spills.
template <WeightKind K, int TT>
__global__ void __launch_bounds__(kWarps * 32, 3) linear_kernel(const LinearLaunch p) {
  constexpr int kChunk = KindTraits<K>::kChunk, R = kRowsPerWarp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
  if (n0 >= p.n_rows) return;  // the whole warp leaves; no block-wide barrier follows
  const int64_t t0 = int64_t(blockIdx.y) * TT;
  const int n_valid_t = int(p.n_tokens - t0 < TT ? p.n_tokens - t0 : TT);
  const int n_chunks = int(p.k_pad / kChunk);  // k_pad < 2^31 elements

  const uint4* wrow[R];
  const uint8_t* srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t n = p.row_begin + (n0 + r < p.n_rows ? n0 + r : p.n_rows - 1);  // a spare row repeats the last
    wrow[r] = reinterpret_cast<const uint4*>(p.w + n * p.row_pitch);
    srow[r] = K == WeightKind::kFp8 ? p.scale + (n / p.block) * p.scale_pitch
              : K == WeightKind::kFp4 ? p.scale + n * p.scale_pitch : nullptr;
  }
  const float4* x4 = reinterpret_cast<const float4*>(p.x + t0 * p.k_pad);
  const int64_t x4_pitch = p.k_pad / 4;

  float acc[R][TT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[r][t] = 0.0f;

  // A lane's chunks in ascending order, U at a time: the U x R loads of a step are all in flight before the
  // first is used (one or two tokens need that many to keep HBM busy; at TT >= 4 the x loads are enough,
  // and the registers are better spent on accumulators: U > 1 spilled there). The FMA order is the same
  // for every U, so batch invariance holds.
  constexpr int U = TT == 1 ? 4 : TT == 2 ? 2 : 1;
  auto load = [&](int c, uint4 raw[R], float s[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      raw[r] = __ldg(wrow[r] + c);
      if constexpr (K == WeightKind::kFp8) {
        const int kb = (c * kChunk) / p.block;  // a chunk wholly in the padding may pass the last block
        s[r] = e8m0_value(__ldg(srow[r] + (kb < p.scale_pitch ? kb : int(p.scale_pitch) - 1)));
      }
      else if constexpr (K == WeightKind::kFp4) s[r] = e8m0_value(__ldg(srow[r] + c));
      else s[r] = 1.0f;
    }
  };
  auto multiply = [&](int c, const uint4 raw[R], const float s[R]) {
#pragma unroll
    for (int g = 0; g < kChunk / 4; ++g) {
      float w[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r) decode4<K>(raw[r], g, s[r], w[r]);
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        if (t < n_valid_t) {  // uniform across the warp
          const float4 xv = __ldg(x4 + t * x4_pitch + c * (kChunk / 4) + g);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            acc[r][t] = __fmaf_rn(xv.x, w[r][0], acc[r][t]);
            acc[r][t] = __fmaf_rn(xv.y, w[r][1], acc[r][t]);
            acc[r][t] = __fmaf_rn(xv.z, w[r][2], acc[r][t]);
            acc[r][t] = __fmaf_rn(xv.w, w[r][3], acc[r][t]);
          }
        }
      }
    }
  };
  int c = lane;
#pragma unroll 1
  for (; c + 32 * (U - 1) < n_chunks; c += 32 * U) {
    uint4 raw[U][R];
    float s[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) load(c + 32 * u, raw[u], s[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) multiply(c + 32 * u, raw[u], s[u]);
  }
  if constexpr (U > 1) {
#pragma unroll 1
    for (; c < n_chunks; c += 32) {
      uint4 raw[R];
      float s[R];
      load(c, raw, s);
      multiply(c, raw, s);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[r][t] = warp_sum(acc[r][t]);
  // Lane r * TT + t writes output (r, t): the values are the same on every lane after the butterfly.
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (lane == r * TT + t && n0 + r < p.n_rows && t < n_valid_t) {
        const int64_t o = (t0 + t) * p.n_rows + n0 + r;
        p.out[o] = apply_epilogue(p.epilogue, acc[r][t], p.bias ? p.bias[o] : 0.0f);
      }
    }
  }
}

template <WeightKind K>
void launch_kind(const LinearLaunch& p, cudaStream_t stream) {
  const int64_t rows_per_block = int64_t(kWarps) * kRowsPerWarp;
  const unsigned grid_x = unsigned((p.n_rows + rows_per_block - 1) / rows_per_block);
  const dim3 block(kWarps * 32);
  auto grid = [&](int tt) { return dim3(grid_x, unsigned((p.n_tokens + tt - 1) / tt)); };
  if (p.n_tokens == 1) launch_kernel(linear_kernel<K, 1>, grid(1), block, 0, stream, p);
  else if (p.n_tokens == 2) launch_kernel(linear_kernel<K, 2>, grid(2), block, 0, stream, p);
  else if (p.n_tokens <= 4) launch_kernel(linear_kernel<K, 4>, grid(4), block, 0, stream, p);
  else launch_kernel(linear_kernel<K, 8>, grid(8), block, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_linear(const LinearLaunch& p, cudaStream_t stream) {
  DI_CHECK(p.k_pad % 32 == 0 && p.n_rows > 0 && p.n_tokens > 0);
  DI_CHECK_MSG((p.n_tokens + 7) / 8 <= 65535, "too many tokens for one linear launch");
  switch (p.kind) {
    case WeightKind::kBf16: launch_kind<WeightKind::kBf16>(p, stream); break;
    case WeightKind::kFp8: launch_kind<WeightKind::kFp8>(p, stream); break;
    case WeightKind::kFp4: launch_kind<WeightKind::kFp4>(p, stream); break;
  }
}

}  // namespace deepinfer::cuda
