// What a row's draw and its candidates read a logit as (row_draw_kernel.cu, row_top_k_kernel.cu): s = f32(x / T) as
// model/token_draw.h gives it, and the order of (s, id) as one 32-bit key.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda {

namespace {  // each .cu file its own copy: the build compiles every file on its own (no -rdc)

// s = f32(x / T), a NaN as -inf.
__device__ __forceinline__ float scaled_logit(float x, float temperature) {
  const float v = __fdiv_rn(x, temperature);
  return v == v ? v : -__int_as_float(0x7f800000);
}

// The order of s as a key, larger first: s's bits made monotone (s never NaN here; -0 as +0). Of equal keys the lower
// id goes first (block_top_k.cuh's entries invert the id).
__device__ __forceinline__ uint32_t order_bits(float s) {
  const uint32_t b = __float_as_uint(s == 0.0f ? 0.0f : s);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float float_of_order_bits(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

}  // namespace

}  // namespace deepinfer::cuda
