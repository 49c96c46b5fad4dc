// Decoding one row of a stored linear weight (bf16, e4m3 + e8m0 block scales, packed e2m1 + e8m0 per 32)
// into real values. Every decoded value is exact (code value times a power of two).
#pragma once

#include <cstdint>

#include "core/dtypes.h"
#include "model/weights.h"

namespace deepinfer {

// Writes W[row, 0..n_in) as T (float or double). Exact for both.
template <typename T>
inline void decode_weight_row(const LinearWeight& w, int64_t row, T* out) {
  const int64_t k_total = w.n_in;
  switch (w.dtype) {
    case DType::kBF16: {
      const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data) + row * k_total;
      for (int64_t k = 0; k < k_total; ++k) out[k] = T(bf16_to_float(src[k]));
      break;
    }
    case DType::kF8E4M3: {
      const uint8_t* src = w.data + row * k_total;
      const int64_t n_kb = (k_total + w.block - 1) / w.block;
      const uint8_t* scale_row = w.scale + (row / w.block) * n_kb;
      for (int64_t kb = 0; kb < n_kb; ++kb) {
        const T s = T(e8m0_to_float(scale_row[kb]));
        const int64_t k_end = kb * w.block + w.block < k_total ? kb * w.block + w.block : k_total;
        for (int64_t k = kb * w.block; k < k_end; ++k) out[k] = T(e4m3_to_float(src[k])) * s;
      }
      break;
    }
    case DType::kI8: {  // packed e2m1: element 2i in the low nibble, 2i+1 in the high nibble
      const uint8_t* src = w.data + row * (k_total / 2);
      const uint8_t* scale_row = w.scale + row * (k_total / 32);
      for (int64_t k = 0; k < k_total; k += 2) {
        const T s = T(e8m0_to_float(scale_row[k / 32]));
        out[k] = T(e2m1_to_float(src[k / 2] & 0xf)) * s;
        out[k + 1] = T(e2m1_to_float(src[k / 2] >> 4)) * s;
      }
      break;
    }
    default:
      DI_CHECK_MSG(false, "unsupported linear weight dtype");
  }
}

}  // namespace deepinfer
