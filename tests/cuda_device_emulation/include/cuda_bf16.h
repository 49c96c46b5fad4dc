// <cuda_bf16.h> for the device emulation (../README.md): the bf16 type and the two conversions the kernels use,
// with the hardware's rounding (cvt.rn.bf16.f32: round to nearest even; NaN to the canonical 0x7fff).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return {uint16_t(0x7fffu)};
  return {uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 v) { return std::bit_cast<float>(uint32_t(v.bits) << 16); }
