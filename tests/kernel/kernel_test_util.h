// Helpers for the kernel tests: random stored weights (bf16, e4m3 + e8m0 blocks, packed e2m1 + e8m0 per 32)
// and activations, the SIMD levels to test (each forced through make_fast_backend_with_level, skipped with a
// reason when the CPU lacks it), and the comparison figures of STYLE.md: calc_diff = 1 - 2 sum(xy) /
// sum(x^2 + y^2), max abs / rel error, and how many bf16 outputs differ by 1, 2 or more ulps.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/fast_backend.h"
#include "core/dtypes.h"
#include "model/weights.h"

namespace deepinfer::testing {

inline const std::vector<SimdLevel>& all_simd_levels() {
  static const std::vector<SimdLevel> levels = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512,
                                                SimdLevel::kAvx512Bf16, SimdLevel::kAvx512Bf16Quant,
                                                SimdLevel::kAmxBf16};
  return levels;
}

inline std::string level_test_name(const ::testing::TestParamInfo<SimdLevel>& info) {
  return simd_level_name(info.param);
}

#define DI_SKIP_UNLESS_SUPPORTED(level)                                                                  \
  do {                                                                                                   \
    if (!::deepinfer::simd_level_supported(level))                                                       \
      GTEST_SKIP() << "this CPU lacks the instruction sets of SIMD level " << ::deepinfer::simd_level_name(level); \
  } while (0)

// A stored weight with its own bytes.
struct OwnedWeight {
  std::vector<uint8_t> data, scale;
  LinearWeight w;
};

inline uint16_t bf16_of(float bf16_value) { return bf16_bits(bf16_value); }

// bf16 [n, k], values N(0, 1/sqrt(k)) rounded to bf16.
inline OwnedWeight random_bf16_weight(std::mt19937& rng, int64_t n, int64_t k) {
  OwnedWeight o;
  std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(float(k)));
  o.data.resize(size_t(n * k * 2));
  auto* p = reinterpret_cast<uint16_t*>(o.data.data());
  for (int64_t i = 0; i < n * k; ++i) p[i] = bf16_of(round_bf16_from_float(dist(rng)));
  o.w = LinearWeight{DType::kBF16, n, k, o.data.data(), nullptr, 0};
  return o;
}

// e4m3 [n, k] with e8m0 [ceil(n/B), ceil(k/B)]: codes uniform over the finite codes, scale bytes in
// [scale_lo, scale_hi] (a real checkpoint's are about 2^-12..2^-6, i.e. bytes 115..121).
inline OwnedWeight random_fp8_weight(std::mt19937& rng, int64_t n, int64_t k, int block, int scale_lo = 112,
                                     int scale_hi = 124) {
  OwnedWeight o;
  std::uniform_int_distribution<int> code(0, 253), sc(scale_lo, scale_hi);
  o.data.resize(size_t(n * k));
  for (auto& b : o.data) {
    int c = code(rng);
    if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes
    b = uint8_t(c);
  }
  const int64_t nb = (n + block - 1) / block, kb = (k + block - 1) / block;
  o.scale.resize(size_t(nb * kb));
  for (auto& s : o.scale) s = uint8_t(sc(rng));
  o.w = LinearWeight{DType::kF8E4M3, n, k, o.data.data(), o.scale.data(), block};
  return o;
}

// Packed e2m1 [n, k/2] with e8m0 [n, k/32].
inline OwnedWeight random_fp4_weight(std::mt19937& rng, int64_t n, int64_t k, int scale_lo = 116, int scale_hi = 124) {
  OwnedWeight o;
  std::uniform_int_distribution<int> byte(0, 255), sc(scale_lo, scale_hi);
  o.data.resize(size_t(n * k / 2));
  for (auto& b : o.data) b = uint8_t(byte(rng));
  o.scale.resize(size_t(n * k / 32));
  for (auto& s : o.scale) s = uint8_t(sc(rng));
  o.w = LinearWeight{DType::kI8, n, k, o.data.data(), o.scale.data(), 0};
  return o;
}

// bf16 values N(0, stddev) (as the model's activations are).
inline std::vector<float> random_bf16_values(std::mt19937& rng, int64_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16_from_float(dist(rng));
  return v;
}

// A stored weight of the given type: random_bf16_weight, random_fp8_weight (scale blocks of `block`) or
// random_fp4_weight (any other dtype: packed e2m1), with scale bytes in [scale_lo, scale_hi] (0: the generator's
// default range).
inline OwnedWeight random_linear_weight(std::mt19937& rng, DType dtype, int64_t n, int64_t k, int block,
                                        int scale_lo = 0, int scale_hi = 0) {
  if (dtype == DType::kBF16) return random_bf16_weight(rng, n, k);
  if (dtype == DType::kF8E4M3)
    return scale_lo ? random_fp8_weight(rng, n, k, block, scale_lo, scale_hi) : random_fp8_weight(rng, n, k, block);
  return scale_lo ? random_fp4_weight(rng, n, k, scale_lo, scale_hi) : random_fp4_weight(rng, n, k);
}

// Values on the QDQ4 grid of 32-blocks (e2m1 times a power of two), as the indexer's q and keys are.
inline std::vector<float> fp4_grid_values(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int> code(0, 15), scale(-6, 2);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 32) {
    const float s = std::ldexp(1.0f, scale(rng));
    for (int64_t i = b; i < std::min(n, b + 32); ++i) v[size_t(i)] = e2m1_to_float(uint8_t(code(rng))) * s;
  }
  return v;
}

// Comparison of a fast result with the reference.
struct Diff {
  double calc_diff = 0, max_abs = 0, max_rel = 0;
  int64_t n = 0, n_differ = 0, n_1ulp = 0, n_2ulp = 0, n_more = 0;  // bf16 ulp distance histogram
  bool finite = true;
};

// One bf16 step at the magnitude of r (2^(exponent of |r| - 7); |r| below 1e-30 counts as 1e-30): the unit
// of the tests' bounds on bf16 outputs.
inline double bf16_ulp(float r) { return std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 1e-30f)) - 7); }

// Distance in bf16 steps between two bf16 values (same sign assumed near; counts across zero).
inline int64_t bf16_ulps(float a, float b) {
  auto key = [](float v) {
    const int32_t bits = int32_t(float_to_bits(v) >> 16);
    return bits & 0x8000 ? -(bits & 0x7fff) : bits;
  };
  return std::abs(int64_t(key(a)) - int64_t(key(b)));
}

inline Diff compare(const std::vector<float>& ref, const std::vector<float>& got, bool bf16_outputs) {
  Diff d;
  double xy = 0, xx_yy = 0;
  d.n = int64_t(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double x = ref[i], y = got[i];
    if (!std::isfinite(y)) d.finite = false;
    xy += x * y;
    xx_yy += x * x + y * y;
    const double e = std::fabs(x - y);
    d.max_abs = std::max(d.max_abs, e);
    if (x != 0) d.max_rel = std::max(d.max_rel, e / std::fabs(x));
    if (ref[i] != got[i]) {
      ++d.n_differ;
      if (bf16_outputs) {
        const int64_t u = bf16_ulps(ref[i], got[i]);
        if (u == 1) ++d.n_1ulp;
        else if (u == 2) ++d.n_2ulp;
        else ++d.n_more;
      }
    }
  }
  d.calc_diff = xx_yy > 0 ? 1.0 - 2.0 * xy / xx_yy : 0.0;
  return d;
}

inline void print_diff(const std::string& what, const Diff& d) {
  std::printf("  %-58s calc_diff %.3e  max_abs %.3e  max_rel %.3e  differ %lld/%lld (1ulp %lld, 2ulp %lld, more %lld)\n",
              what.c_str(), d.calc_diff, d.max_abs, d.max_rel, (long long)d.n_differ, (long long)d.n,
              (long long)d.n_1ulp, (long long)d.n_2ulp, (long long)d.n_more);
}

}  // namespace deepinfer::testing
