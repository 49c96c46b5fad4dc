// One value of a packed cache row (model/kv_format.h), decoded as unpack_kv_row decodes it: code value times
// scale in one fp32 multiply, NaN codes included. launch_unpack_rows writes these values out; the attention's
// packed-rows path (DEEPINFER_CUDA_ATTENTION_ROWS=packed) reads them straight from the row bytes; both call
// this, so they give the same floats.
#pragma once

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

// e4m3_value with the NaN that unpack_kv_row's table gives the two codes whose low bits are all set.
__device__ __forceinline__ float e4m3_or_nan(uint32_t code) {
  return (code & 0x7fu) == 0x7fu ? __uint_as_float(0x7fc00000u) : e4m3_value(code);
}

// A row format as the decoder needs it: n_coded = n_values - n_rope coded values, then (kE4m3) n_rope bf16
// values, then one scale per `block` coded values.
struct PackedRowFormat {
  PackedRowKind kind = PackedRowKind::kE4m3;
  int32_t n_coded = 0, n_rope = 0, block = 1;
};

// Value d (< n_coded + n_rope) of the row at `row`.
__device__ __forceinline__ float packed_row_value(const PackedRowFormat& f, const uint8_t* row, int64_t d) {
  if (f.kind == PackedRowKind::kE4m3) {
    if (d < f.n_coded) return e4m3_or_nan(row[d]) * e8m0_value(row[f.n_coded + 2 * f.n_rope + d / f.block]);
    const int64_t k = d - f.n_coded;  // the bf16 rope values, little-endian
    return __uint_as_float((uint32_t(row[f.n_coded + 2 * k]) | uint32_t(row[f.n_coded + 2 * k + 1]) << 8) << 16);
  }
  const uint8_t scale = row[(f.n_coded + 1) / 2 + d / f.block];
  const float s = f.kind == PackedRowKind::kE2m1E4m3Scales ? e4m3_or_nan(scale) : e8m0_value(scale);
  return e2m1_value((row[d / 2] >> (4 * (d & 1))) & 0xfu) * s;
}

}  // namespace deepinfer::cuda
