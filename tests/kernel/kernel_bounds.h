// The per-output error bounds the kernel tests hold a fast kernel (a CPU SIMD family, or the CUDA backend)
// to against the exact reference backend, one helper per op; `label` names the kernel under test in failure
// messages ("fast", "cuda"). Each reports at most 3 failing outputs, checks the STYLE.md figures, and returns
// them for print_diff.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/weight_decode.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {

// sum_k |x_k w_k| per output [t, n], in double: the scale of an fp32 accumulation error.
inline std::vector<double> linear_l1_mass(const LinearParams& p) {
  const LinearWeight& w = *p.weight;
  std::vector<double> row(size_t(w.n_in)), mass(size_t(p.n_tokens * p.n_rows));
  for (int64_t n = 0; n < p.n_rows; ++n) {
    decode_weight_row(w, p.row_begin + n, row.data());
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      double m = 0;
      for (int64_t k = 0; k < w.n_in; ++k) m += std::fabs(double(p.x[t * p.x_stride + k]) * row[size_t(k)]);
      mass[size_t(t * p.n_rows + n)] = m;
    }
  }
  return mass;
}

// A linear call's first T tokens of outputs [T, out_stride] against the reference's (same layout, mass from
// linear_l1_mass over at least T tokens): padding past n_rows untouched (-7), each output within 2 bf16 ulps
// of ref (bf16 outputs) + 2^-mass_bits of its mass; calc_diff < 1e-6 and, for bf16 outputs with limit_differ,
// at most 2% + 2 differ. worst_ratio (if given) gets the largest |err| past the ulps / mass seen.
inline Diff expect_linear_within_bounds(const std::vector<float>& ref, const std::vector<float>& got,
                                        const std::vector<double>& mass, int64_t T, int64_t n_rows, int64_t out_stride,
                                        bool bf16_out, const std::string& what, const char* label, int mass_bits = 16,
                                        bool limit_differ = true, double* worst_ratio = nullptr) {
  std::vector<float> ref_c, got_c;
  int64_t n_bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < out_stride; ++i) {
      const float r = ref[size_t(t * out_stride + i)], g = got[size_t(t * out_stride + i)];
      if (i >= n_rows) {
        EXPECT_EQ(g, -7.0f) << what << " wrote past n_rows";
        continue;
      }
      ref_c.push_back(r);
      got_c.push_back(g);
      const double m = mass[size_t(t * n_rows + i)], err = std::fabs(double(g) - double(r));
      const double ulp = bf16_out ? bf16_ulp(r) : 0.0;
      if (worst_ratio && m > 0) *worst_ratio = std::max(*worst_ratio, std::max(0.0, err - 2 * ulp) / m);
      const double bound = 2 * ulp + std::ldexp(m, -mass_bits) + 1e-30;
      if (!(err <= bound) && ++n_bad <= 3) {
        ADD_FAILURE() << what << " t=" << t << " row=" << i << " ref=" << r << " " << label << "=" << g << " bound=" << bound
                      << " mass=" << m;
      }
    }
  }
  const Diff d = compare(ref_c, got_c, bf16_out);
  EXPECT_TRUE(d.finite) << what;
  EXPECT_LT(d.calc_diff, 1e-6) << what;
  if (bf16_out && limit_differ) {
    EXPECT_LE(double(d.n_differ), 0.02 * double(d.n) + 2) << what;
  }
  return d;
}

// Sparse attention outputs [H, D]: each within 2 bf16 ulps + 2^-10 of its head's largest |ref|; calc_diff <
// 1e-5 and, unless the rows are fp32 values, at most 5% of the outputs differ.
inline Diff expect_attention_within_bounds(const std::vector<float>& ref, const std::vector<float>& got, int64_t H,
                                           int64_t D, bool fp32_rows, const std::string& what, const char* label) {
  int64_t n_bad = 0;
  for (int64_t h = 0; h < H; ++h) {
    float head_max = 0;
    for (int64_t d = 0; d < D; ++d) head_max = std::max(head_max, std::fabs(ref[size_t(h * D + d)]));
    for (int64_t d = 0; d < D; ++d) {
      const float r = ref[size_t(h * D + d)], g = got[size_t(h * D + d)];
      const double bound = 2 * bf16_ulp(r) + std::ldexp(double(head_max), -10);
      if (!(std::fabs(double(g) - double(r)) <= bound) && ++n_bad <= 3) {
        ADD_FAILURE() << what << " h=" << h << " d=" << d << " ref=" << r << " " << label << "=" << g;
      }
    }
  }
  const Diff d = compare(ref, got, true);
  EXPECT_TRUE(d.finite) << what;
  EXPECT_LT(d.calc_diff, 1e-5) << what;
  if (!fp32_rows) {
    EXPECT_LE(double(d.n_differ), 0.05 * double(d.n)) << what;
  }
  return d;
}

// Index scores [n_keys] of q [n_heads, dim], head weights w and keys [n_keys, dim]: each within 2 bf16 ulps +
// 2^-7 of sum_h |relu(q_h . K_j) w_h|; calc_diff < 1e-5.
inline Diff expect_index_scores_within_bounds(const std::vector<float>& q, const std::vector<float>& w,
                                              const std::vector<float>& keys, int64_t n_heads, int64_t dim,
                                              int64_t n_keys, const std::vector<float>& ref,
                                              const std::vector<float>& got, const char* label) {
  int64_t n_bad = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    double mass = 0;
    for (int64_t h = 0; h < n_heads; ++h) {
      double s = 0;
      for (int64_t d = 0; d < dim; ++d) s += double(q[size_t(h * dim + d)]) * keys[size_t(j * dim + d)];
      mass += std::fabs(std::max(s, 0.0) * w[size_t(h)]);
    }
    const float r = ref[size_t(j)], g = got[size_t(j)];
    if (!(std::fabs(double(g) - double(r)) <= 2 * bf16_ulp(r) + std::ldexp(mass, -7)) && ++n_bad <= 3) {
      ADD_FAILURE() << "key " << j << " ref=" << r << " " << label << "=" << g << " mass=" << mass;
    }
  }
  const Diff d = compare(ref, got, true);
  EXPECT_TRUE(d.finite);
  EXPECT_LT(d.calc_diff, 1e-5);
  return d;
}

// mHC mixes [n_tokens, n_mix] of x [n_tokens, width] and fn [n_mix, width] (eps 1e-6): each within 2 fp32 ulps
// + 2^-16 of sum_i |x_i fn_i| / rms(x); calc_diff < 1e-9.
inline Diff expect_hc_mix_within_bounds(const std::vector<float>& x, const std::vector<float>& fn, int64_t width,
                                        int64_t n_mix, int64_t n_tokens, const std::vector<float>& ref,
                                        const std::vector<float>& got, const char* label) {
  int64_t n_bad = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    double sq = 0;
    for (int64_t i = 0; i < width; ++i) sq += double(x[size_t(t * width + i)]) * x[size_t(t * width + i)];
    const double rms = std::sqrt(sq / double(width) + 1e-6);
    for (int64_t m = 0; m < n_mix; ++m) {
      double mass = 0;
      for (int64_t i = 0; i < width; ++i) mass += std::fabs(double(x[size_t(t * width + i)]) * fn[size_t(m * width + i)]);
      const float r = ref[size_t(t * n_mix + m)], g = got[size_t(t * n_mix + m)];
      const double bound = std::ldexp(mass / rms, -16) + 2 * std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 1e-30f)) - 23);
      if (!(std::fabs(double(g) - double(r)) <= bound) && ++n_bad <= 3) {
        ADD_FAILURE() << "t=" << t << " m=" << m << " ref=" << r << " " << label << "=" << g;
      }
    }
  }
  const Diff d = compare(ref, got, false);
  EXPECT_TRUE(d.finite);
  EXPECT_LT(d.calc_diff, 1e-9);
  return d;
}

}  // namespace deepinfer::testing
