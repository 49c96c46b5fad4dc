// Storage codecs of the checkpoint and activation dtypes: bf16, e4m3 (OCP e4m3fn), e8m0, e2m1 (fp4),
// and the round-once helpers of the golden precision contract (round an exact double straight to bf16,
// never through float). Pure functions, no state; everything here is exact or round-to-nearest-even.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace deepinfer {

enum class DType { kBF16, kF16, kF32, kF64, kF8E4M3, kF8E8M0, kI8, kI16, kI32, kI64, kU8, kBool };

// Bytes per element as stored (I8 packed e2m1 counts as one byte holding two codes).
int dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses a safetensors dtype string ("BF16", "F8_E4M3", ...). Returns false for unknown names.
bool dtype_from_name(const char* name, DType* out);

inline float bits_to_float(uint32_t bits) { float f; std::memcpy(&f, &bits, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float bf16_to_float(uint16_t bits) { return bits_to_float(uint32_t(bits) << 16); }

// floor(log2 |x|) of a finite nonzero double that is not subnormal (its biased exponent minus the bias).
inline int double_exponent(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return int((b >> 52) & 0x7ff) - 1023;
}

// x rounded to `bits` mantissa bits, nearest even, at x's own exponent (a carry out of the mantissa moves
// to the next binade, which is the correctly rounded result). x finite; the caller handles the target
// format's subnormal range, where the quantum stops shrinking with the exponent.
inline double round_to_mantissa_bits(double x, int bits) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  const int drop = 52 - bits;
  b += ((uint64_t(1) << (drop - 1)) - 1) + ((b >> drop) & 1);
  b &= ~((uint64_t(1) << drop) - 1);
  double r;
  std::memcpy(&r, &b, 8);
  return r;
}

// Round a finite or infinite real (given exactly as a double) once to the nearest bf16, ties to even,
// bf16 subnormals included. Infinities and NaN pass through; overflow rounds to infinity.
inline float round_bf16(double x) {
  if (!std::isfinite(x) || x == 0.0) return float(x);
  if (double_exponent(x) >= -126) {              // bf16 normal range: integer rounding of the bits
    const double r = round_to_mantissa_bits(x, 7);
    if (std::fabs(r) > 0x1.fep127) return x > 0 ? INFINITY : -INFINITY;
    return float(r);                             // exact: r has at most 8 significant bits
  }
  int exp2 = 0;
  std::frexp(x, &exp2);                          // |x| = m * 2^exp2, m in [0.5, 1)
  int e = exp2 - 1;                              // floor(log2 |x|)
  if (e < -126) e = -126;                        // subnormal range: fixed quantum 2^-133
  const double quantum = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(x / quantum) * quantum;  // x / quantum is exact (power of two)
  if (std::fabs(r) > 0x1.fep127) return x > 0 ? INFINITY : -INFINITY;
  return float(r);                               // exact: r has at most 8 significant bits
}

inline uint16_t bf16_bits(float bf16_value) { return uint16_t(float_to_bits(bf16_value) >> 16); }

// Round a float to bf16 (nearest even), the fast path's conversion. Exact same result as round_bf16(double(f)).
inline float round_bf16_from_float(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7f800000u) == 0x7f800000u) return f;  // inf / nan
  b += 0x7fffu + ((b >> 16) & 1u);
  return bits_to_float(b & 0xffff0000u);
}

// Round an exact real once to float32, nearest even (IEEE conversion does exactly this).
inline float round_f32(double x) { return float(x); }

// ---- e4m3 (OCP float8_e4m3fn: bias 7, 3 mantissa bits, max 448, no infinities, 0x7f/0xff = NaN) ----
inline float e4m3_to_float(uint8_t code) {
  // Place exponent+mantissa at float bits 20..26 and rescale by 2^120: exact for normals and subnormals.
  const float magnitude = bits_to_float(uint32_t(code & 0x7f) << 20) * 0x1p120f;
  if ((code & 0x7f) == 0x7f) return NAN;
  return (code & 0x80) ? -magnitude : magnitude;
}
// Round v to the e4m3 grid, nearest even, saturating at +-448. Returns the grid value.
inline double e4m3_round(double v) {
  if (v == 0.0 || std::isnan(v)) return v;
  if (std::isfinite(v) && double_exponent(v) >= -6) {  // e4m3 normal range
    return std::clamp(round_to_mantissa_bits(v, 3), -448.0, 448.0);
  }
  int exp2 = 0;
  std::frexp(v, &exp2);
  int e = exp2 - 1;
  if (e < -6) e = -6;                            // subnormal quantum 2^-9
  const double quantum = std::ldexp(1.0, e - 3);
  double r = std::nearbyint(v / quantum) * quantum;
  if (r > 448.0) r = 448.0;
  if (r < -448.0) r = -448.0;
  return r;
}
// The storage code of an e4m3 grid value (v must already be on the grid).
uint8_t e4m3_code(double grid_value);

// ---- e8m0 (float8_e8m0fnu: value 2^(byte - 127), 0xff = NaN) ----
inline float e8m0_to_float(uint8_t code) {
  if (code == 0xff) return NAN;
  if (code == 0) return 0x1p-127f;
  return bits_to_float(uint32_t(code) << 23);
}

// ---- e2m1 (fp4: values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; code bit 3 = sign) ----
extern const float kE2M1Values[16];
inline float e2m1_to_float(uint8_t code) { return kE2M1Values[code & 0xf]; }
// Round v to the e2m1 grid, nearest even, saturating at +-6.
inline double e2m1_round(double v) {
  if (v == 0.0 || std::isnan(v)) return v;
  if (std::isfinite(v) && double_exponent(v) >= 0) {  // e2m1 normal range
    return std::clamp(round_to_mantissa_bits(v, 1), -6.0, 6.0);
  }
  int exp2 = 0;
  std::frexp(v, &exp2);
  int e = exp2 - 1;
  if (e < 0) e = 0;                              // subnormal quantum 0.5
  const double quantum = std::ldexp(1.0, e - 1);
  double r = std::nearbyint(v / quantum) * quantum;
  if (r > 6.0) r = 6.0;
  if (r < -6.0) r = -6.0;
  return r;
}
uint8_t e2m1_code(double grid_value);

// True when the n values are e4m3 grid values times one power of two, as a block of an activation QDQ is:
// divided by the smallest power of two that brings their largest magnitude to at most 448, each lands on the
// e4m3 grid (any larger power of two that does so leaves the same codes shifted, so this one always works).
bool is_scaled_e4m3_block(const float* x, int64_t n);

// Smallest power of two s with s * q_max >= a (exact comparison), for a > 0.
inline double pow2_scale_at_least(double a, double q_max) {
  int exp2 = 0;
  std::frexp(a / q_max, &exp2);                  // a/q_max in [2^(exp2-1), 2^exp2)
  double s = std::ldexp(1.0, exp2 - 2);          // start one below the estimate, then step up exactly
  while (s * q_max < a) s *= 2.0;
  return s;
}

}  // namespace deepinfer
