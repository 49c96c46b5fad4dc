// Device helpers shared by the kernels: bf16 rounding (nearest even, as round_bf16_from_float on the CPU),
// warp and block sums in a fixed order (so a result never depends on scheduling), and the storage codecs
// decoded by exponent placement (exact for normals and subnormals; needs IEEE subnormals, i.e. no
// -ftz / -use_fast_math).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// e4m3fn code -> value: exponent and mantissa placed at float bits 20..26, rescaled by 2^120.
__device__ __forceinline__ float e4m3_value(uint32_t code) {
  const float m = __uint_as_float((code & 0x7fu) << 20) * 0x1p120f;
  return (code & 0x80u) ? -m : m;
}
// e2m1 code (low 4 bits) -> value: exponent and mantissa at float bits 22..24, rescaled by 2^126.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const float m = __uint_as_float((code & 0x7u) << 22) * 0x1p126f;
  return (code & 0x8u) ? -m : m;
}
// e8m0 scale byte -> 2^(byte - 127); byte 0 is 2^-127 (a float subnormal), 0xff is NaN.
__device__ __forceinline__ float e8m0_value(uint32_t byte) {
  if (byte == 0xffu) return __uint_as_float(0x7fc00000u);
  if (byte == 0u) return 0x1p-127f;
  return __uint_as_float(byte << 23);
}

// A linear output from its fp32 accumulator (backend.h's Epilogue): the transcendental ones in double.
__device__ __forceinline__ float apply_epilogue(LinearEpilogue e, float acc, float bias) {
  switch (e) {
    case LinearEpilogue::kBf16: return round_bf16(acc);
    case LinearEpilogue::kF32: return acc;
    case LinearEpilogue::kF32AddBias: return float(double(acc) + double(bias));
    case LinearEpilogue::kSqrtSoftplus: {
      const double a = acc;
      return float(sqrt(a > 30 ? a + log1p(exp(-a)) : log1p(exp(a))));
    }
  }
  return 0.0f;
}

// XOR butterfly: every lane ends with the same sum (each step adds the same two operands on both lanes).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024): warp butterflies, then the warp sums in
// warp order. `scratch` holds 33 floats of shared memory; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int w = 0; w < n_warps; ++w) total += scratch[w];
    scratch[32] = total;
  }
  __syncthreads();
  return scratch[32];
}

}  // namespace deepinfer::cuda
