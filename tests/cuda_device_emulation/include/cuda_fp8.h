// <cuda_fp8.h> for the device emulation (../README.md): the one conversion the kernels use, float to e4m3fn
// (cvt.rn.satfinite.e4m3x2.f32): round to nearest even, subnormals kept; with __NV_SATFINITE a magnitude past
// 448 (infinity included) gives +-448 (0x7e), without it 0x7f (NaN); NaN gives 0x7f.
#pragma once

#include <cmath>
#include <cstdint>

#include "block_runner.h"

using __nv_fp8_storage_t = unsigned char;
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate, __nv_fp8_interpretation_t kind) {
  ::deepinfer::device_emulation::require(kind == __NV_E4M3, "__nv_cvt_float_to_fp8: only e4m3 is emulated");
  const unsigned sign = std::signbit(x) ? 0x80u : 0u;
  if (std::isnan(x)) return 0x7f;
  const double a = std::fabs(double(x));
  unsigned code;
  if (std::isinf(a)) {
    code = 0x7fu;
  } else if (a < 0x1p-6) {
    code = unsigned(std::nearbyint(a * 0x1p9));  // subnormal steps of 2^-9; 8 steps is the smallest normal, code 8
  } else {
    int e = 0;
    const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
    double q = std::nearbyint((2 * m - 1) * 8);  // 3 mantissa bits, nearest even (the default rounding mode)
    int exponent = e - 1;
    if (q == 8) q = 0, ++exponent;
    code = exponent + 7 > 15 ? 0x7fu : unsigned((exponent + 7) << 3) | unsigned(q);
  }
  if (code > 0x7eu) code = saturate == __NV_SATFINITE ? 0x7eu : 0x7fu;
  return __nv_fp8_storage_t(sign | code);
}
