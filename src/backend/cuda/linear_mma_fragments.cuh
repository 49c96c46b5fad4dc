// The pieces both tensor-core linear kernels build their mma fragments from (linear_mma_kernel.cu: operands
// loaded to registers per warp; linear_mma_staged_kernel.cu: operands staged once per block in shared
// memory). Both run the same mmas on the same fragments in the same order, so they give the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/ptx_instructions.cuh"

namespace deepinfer::cuda {

constexpr int kMaxSlices = 16;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {  // exact for bf16 values
  return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

// Splits x into three bf16 terms whose sum is x exactly (truncation keeps every remainder exact).
__device__ __forceinline__ void split3(float x, float& hi, float& mid, float& lo) {
  hi = __uint_as_float(__float_as_uint(x) & 0xffff0000u);
  const float r = x - hi;
  mid = __uint_as_float(__float_as_uint(r) & 0xffff0000u);
  lo = __uint_as_float(__float_as_uint(r - mid) & 0xffff0000u);
}

// A lane's 8 x values split (split3); true when any has low bits (a nonzero mid term, which any nonzero lo term
// implies): the warp's vote over that (__any_sync) decides whether its mid and lo mmas run.
__device__ __forceinline__ bool split8(const float x[8], float hi[8], float mid[8], float lo[8]) {
  bool low_bits = false;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    split3(x[i], hi[i], mid[i], lo[i]);
    low_bits |= mid[i] != 0.0f;
  }
  return low_bits;
}

// The stored bytes of 8 weights of row n at k = k0 .. k0 + 7 (k0 a multiple of 8) and their scale: bf16 16
// bytes, e4m3 8 (v.x, v.y), e2m1 4 (v.x). Loading is apart from decoding so that a lane can have the loads of
// several chunks in flight before it decodes the first.
struct Raw8 {
  uint4 v;
  float s;
};

template <WeightKind K>
__device__ __forceinline__ Raw8 load_raw8(const LinearLaunch& p, int64_t n, int k0) {
  const uint8_t* row = p.w + n * p.row_pitch;
  Raw8 r{};
  if constexpr (K == WeightKind::kBf16) {
    r.v = __ldg(reinterpret_cast<const uint4*>(row) + k0 / 8);
  } else if constexpr (K == WeightKind::kFp8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(row) + k0 / 8);
    r.v.x = v.x;
    r.v.y = v.y;
    const int kb = k0 / p.block;  // a run wholly in the padding may pass the last scale block
    r.s = e8m0_value(__ldg(p.scale + (n / p.block) * p.scale_pitch + (kb < p.scale_pitch ? kb : int(p.scale_pitch) - 1)));
  } else {  // one e8m0 scale per 32 values
    r.v.x = __ldg(reinterpret_cast<const uint32_t*>(row) + k0 / 8);
    const int kb = k0 / 32;
    r.s = e8m0_value(__ldg(p.scale + n * p.scale_pitch + (kb < p.scale_pitch ? kb : int(p.scale_pitch) - 1)));
  }
  return r;
}

// The 8 weights, scaled, as floats holding bf16 values. e2m1: element 2i in the low nibble of byte i.
template <WeightKind K>
__device__ __forceinline__ void decode8(const Raw8& r, float w[8]) {
  if constexpr (K == WeightKind::kBf16) {
    const uint32_t u[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = __uint_as_float(u[i] << 16);
      w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  } else if constexpr (K == WeightKind::kFp8) {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = e4m3_value(((i < 4 ? r.v.x : r.v.y) >> (8 * (i % 4))) & 0xffu) * r.s;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = e2m1_value((r.v.x >> (4 * i)) & 0xfu) * r.s;
  }
}

// K slices of at least 1024 values (32 chunks), at most kMaxSlices: set by K alone.
struct SliceSplit {
  int slices = 1, slice_chunks = 1;
};
inline SliceSplit slice_split(int64_t k_pad) {
  const int n_chunks = int(k_pad / 32);
  SliceSplit s;
  s.slices = std::min(kMaxSlices, std::max(1, (n_chunks + 31) / 32));
  s.slice_chunks = (n_chunks + s.slices - 1) / s.slices;
  return s;
}

}  // namespace deepinfer::cuda
