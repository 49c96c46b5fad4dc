// Exact elementwise ops of the golden precision contract. Each output is computed in double from its
// (already rounded) inputs and rounded once; products of bf16/fp32 values are exact in double.
#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "core/status.h"
#include "model/ops_avx512.h"

namespace deepinfer {

double exp_fixed(double x) {
  if (!(std::fabs(x) <= kExpFixedMaxArg)) return std::exp(x);
  const double n = std::nearbyint(x * kLog2e);
  double r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  double p = kExpTaylor[13];
  for (int k = 12; k >= 0; --k) p = std::fma(p, r, kExpTaylor[k]);
  return std::ldexp(p, int(n));  // exact: p in [0.7, 1.5] and |n| <= 1010 keep the result normal
}

double exp_fixed_sum(const float* x, int64_t n, double shift, double* e) {
  double sums[8] = {};
  int64_t i = ops_avx512_available() ? exp_fixed_sum_avx512(x, n, shift, e, sums) : 0;
  for (; i < n; ++i) {
    const double v = exp_fixed(double(x[i]) - shift);
    if (e) e[i] = v;
    sums[i % 8] += v;
  }
  double total = 0;
  for (const double s : sums) total += s;
  return total;
}

void swiglu(const float* a, const float* b, int64_t n, double limit, double weight, float* out) {
  int64_t i = ops_avx512_available() ? swiglu_avx512(a, b, n, limit, weight, out) : 0;
  for (; i < n; ++i) {
    const double av = std::min(double(a[i]), limit);
    const double bv = std::clamp(double(b[i]), -limit, limit);
    out[i] = round_bf16(av / (1.0 + exp_fixed(-av)) * bv * weight);
  }
}

namespace {
double sigmoid(double z) { return 1.0 / (1.0 + exp_fixed(-z)); }

// max(floor_value, |x[i]|) over [b0, b1), NaNs skipped (std::max keeps its first argument against a NaN).
double block_amax(const float* x, int64_t b0, int64_t b1, double floor_value) {
  if (ops_avx512_available()) return std::max(floor_value, double(abs_max_avx512(x + b0, b1 - b0)));
  double amax = floor_value;
  for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(double(x[i])));
  return amax;
}

// One fp8 QDQ block with scale s: x[i] = f32(e4m3_round(x[i] / s) * s).
void qdq_fp8_block(float* x, int64_t n, double s) {
  if (ops_avx512_available()) return qdq_fp8_block_avx512(x, n, s);
  for (int64_t i = 0; i < n; ++i) x[i] = float(e4m3_round(double(x[i]) / s) * s);
}

// One fp4 QDQ block with scale s: x[i] = f32(e2m1_round(x[i] / s) * s).
void qdq_fp4_block(float* x, int64_t n, double s) {
  if (ops_avx512_available()) return qdq_fp4_block_avx512(x, n, s);
  for (int64_t i = 0; i < n; ++i) x[i] = float(e2m1_round(double(x[i]) / s) * s);
}
}  // namespace

double sum_squares_32_lanes(const float* x, int64_t n) {
  if (ops_avx512_available()) return sum_squares_32_lanes_avx512(x, n);
  double lanes[32] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % 32] += double(x[i]) * x[i];
  for (int half = 16; half > 0; half /= 2) {
    for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
  }
  return lanes[0];
}

double engram_gate(float* h, const uint16_t* q_weight, const uint16_t* k_weight, const float* key, const float* val,
                   int64_t n, double eps) {
  double dot[32] = {};  // in sum_squares_32_lanes' order
  for (int64_t d = 0; d < n; ++d) {
    const double qk = double(bf16_to_float(q_weight[d])) * bf16_to_float(k_weight[d]);
    dot[d % 32] += double(h[d]) * qk * key[d];
  }
  for (int half = 16; half > 0; half /= 2) {
    for (int l = 0; l < half; ++l) dot[l] += dot[l + half];
  }
  const double hh = sum_squares_32_lanes(h, n), kk = sum_squares_32_lanes(key, n);
  const double tc = dot[0] / (std::sqrt(hh / double(n) + eps) * std::sqrt(kk / double(n) + eps) * std::sqrt(double(n)));
  const double z = (tc > 0 ? 1.0 : tc < 0 ? -1.0 : 0.0) * std::sqrt(std::max(std::fabs(tc), 1e-6));
  const double gate = round_f32(sigmoid(z));
  for (int64_t d = 0; d < n; ++d) h[d] = round_bf16(double(h[d]) + gate * val[d]);
  return gate;
}

void rmsnorm(const float* x, const uint16_t* weight, int64_t n, double eps, float* out) {
  const double sq = sum_squares_32_lanes(x, n);
  const double r = std::sqrt(sq / double(n) + eps);
  for (int64_t i = ops_avx512_available() ? rmsnorm_scale_avx512(x, weight, n, r, out) : 0; i < n; ++i) {
    const double w = weight ? double(bf16_to_float(weight[i])) : 1.0;
    out[i] = round_bf16(w * x[i] / r);
  }
}

void qdq_fp8(float* x, int64_t n, int64_t block) {
  const double min_amax = double(1e-4f);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const double s = pow2_scale_at_least(block_amax(x, b0, b1, min_amax), 448.0);
    qdq_fp8_block(x + b0, b1 - b0, s);
  }
}

void qdq_fp4(float* x, int64_t n, int64_t block) {
  const double min_amax = 6.0 * 0x1p-126;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const double s = pow2_scale_at_least(block_amax(x, b0, b1, min_amax), 6.0);
    qdq_fp4_block(x + b0, b1 - b0, s);
  }
}

namespace {
// 2^ceil(log2 v) for v > 0 (v itself when it is a power of two).
double pow2ceil(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  return m == 0.5 ? v : std::ldexp(1.0, e);
}
}  // namespace

void qdq_fp8_v41(float* x, int64_t n, int64_t block) {
  const float inv448 = 1.0f / 448.0f;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const float amax = float(block_amax(x, b0, b1, double(1e-4f)));
    const double s = pow2ceil(double(amax * inv448));  // fp32 multiply, as the kernel does
    qdq_fp8_block(x + b0, b1 - b0, s);
  }
}

void qdq_fp4_pow2_v41(float* x, int64_t n, int64_t block) {
  const float inv6 = 1.0f / 6.0f;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const float amax = float(block_amax(x, b0, b1, 6.0 * 0x1p-126));
    const double s = pow2ceil(double(amax * inv6));
    qdq_fp4_block(x + b0, b1 - b0, s);
  }
}

void qdq_fp4_e4m3_scale(float* x, int64_t n, int64_t block) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const float amax = float(block_amax(x, b0, b1, 6.0 * 0x1p-9));
    const double s = e4m3_round(double(amax / 6.0f));  // fp32 division, then onto the e4m3 grid
    for (int64_t i = b0; i < b1; ++i) {
      const float scaled = x[i] / float(s);              // fp32 division (one rounding)
      x[i] = float(e2m1_round(double(scaled)) * s);
    }
  }
}

void hadamard_128(float* x) {
  if (ops_avx512_available()) return hadamard_128_avx512(x);
  double v[128];
  for (int i = 0; i < 128; ++i) v[i] = x[i];
  for (int half = 1; half < 128; half *= 2) {  // natural-order butterfly: (a + b, a - b)
    for (int i = 0; i < 128; i += 2 * half) {
      for (int j = i; j < i + half; ++j) {
        const double a = v[j], b = v[j + half];
        v[j] = a + b;
        v[j + half] = a - b;
      }
    }
  }
  const double scale = double(float(1.0 / std::sqrt(128.0)));  // f32(128^-0.5)
  for (int i = 0; i < 128; ++i) x[i] = round_bf16(v[i] * scale);
}

double head_rms_inverse(double sum_sq, int64_t head_dim, double eps) {
  const double ms = round_bf16(sum_sq / double(head_dim));  // A5
  const double ms_eps = round_bf16(ms + eps);               // A6
  return round_bf16(1.0 / std::sqrt(ms_eps));               // A7: one rounding
}

void head_rms_normalize(float* q, int64_t n_heads, int64_t head_dim, double eps) {
  if (ops_avx512_available()) return head_rms_normalize_avx512(q, n_heads, head_dim, eps);
  for (int64_t h = 0; h < n_heads; ++h) {
    float* x = q + h * head_dim;
    double sum = 0;
    for (int64_t i = 0; i < head_dim; ++i) sum += double(round_bf16(double(x[i]) * x[i]));  // A4
    const double r = head_rms_inverse(sum, head_dim, eps);
    for (int64_t i = 0; i < head_dim; ++i) x[i] = round_bf16(double(x[i]) * r);              // A8
  }
}

void RopeTable::apply(float* x, int64_t pos, bool inverse) const { apply_heads(x, 1, 0, pos, inverse); }

void RopeTable::cos_sin(int64_t pos, float* out) const {
  for (size_t i = 0; i < freqs.size(); ++i) {
    const float angle = round_f32(double(pos) * double(freqs[i]));
    out[2 * i] = round_f32(std::cos(double(angle)));
    out[2 * i + 1] = round_f32(std::sin(double(angle)));
  }
}

void RopeTable::cos_sin_rows(std::span<const int64_t> positions, std::vector<float>& out) const {
  const size_t width = 2 * freqs.size();
  out.resize(positions.size() * width);
  for (size_t t = 0; t < positions.size(); ++t) cos_sin(positions[t], &out[t * width]);
}

void RopeTable::apply_heads(float* x, int64_t n_heads, int64_t stride, int64_t pos, bool inverse) const {
  // Kept as floats (the f32 roundings of apply()), so nothing can hold them in double precision instead. A
  // thread's calls come per token and head range (for_token_ranges), so the last position's values are kept
  // with the table they came from: the double cos / sin of every angle took as long as the rotations.
  thread_local std::vector<float> angles, cached_freqs;
  thread_local int64_t cached_pos = -1;
  if (pos != cached_pos || cached_freqs != freqs) {
    angles.resize(2 * freqs.size());
    cos_sin(pos, angles.data());
    cached_freqs = freqs;
    cached_pos = pos;
  }
  rope_rotate_heads(x, n_heads, stride, angles.data(), int64_t(freqs.size()), inverse);
}

void rope_rotate_heads(float* x, int64_t n_heads, int64_t stride, const float* cos_sin, int64_t n_pairs, bool inverse) {
  const int64_t done = ops_avx512_available() ? rope_rotate_avx512(x, n_heads, stride, cos_sin, n_pairs, inverse) : 0;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * stride;
    for (int64_t i = done; i < n_pairs; ++i) {
      const double c = cos_sin[size_t(2 * i)];
      double s = cos_sin[size_t(2 * i + 1)];
      if (inverse) s = -s;
      const double x0 = xh[2 * i], x1 = xh[2 * i + 1];
      xh[2 * i] = round_bf16(x0 * c - x1 * s);
      xh[2 * i + 1] = round_bf16(x0 * s + x1 * c);
    }
  }
}

RopeTable make_rope_table(int rope_dim, double theta) {
  RopeTable t;
  for (int i = 0; i < rope_dim / 2; ++i) t.freqs.push_back(round_f32(std::pow(theta, -2.0 * i / rope_dim)));
  return t;
}

RopeTable make_yarn_rope_table(int rope_dim, double theta, double factor, int64_t original_max_pos,
                               double beta_fast, double beta_slow) {
  auto correction = [&](double rotations) {
    return rope_dim * std::log(double(original_max_pos) / (2.0 * M_PI * rotations)) / (2.0 * std::log(theta));
  };
  const double low = std::max(std::floor(correction(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction(beta_slow)), double(rope_dim - 1));
  if (low == high) high = low + 0.001;
  RopeTable t;
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double base = std::pow(theta, -2.0 * i / rope_dim);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    t.freqs.push_back(round_f32(base / factor * ramp + base * (1.0 - ramp)));
  }
  return t;
}

HcCoefficients hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int sinkhorn_iters,
                                 double hc_eps) {
  HcCoefficients c{};
  for (int k = 0; k < 4; ++k) {
    c.pre[k] = round_f32(sigmoid(double(mixes[k]) * scale[0] + base[k]) + hc_eps);            // B2
    c.post[k] = round_f32(2.0 * sigmoid(double(mixes[4 + k]) * scale[1] + base[4 + k]));     // B3
  }
  for (int j = 0; j < 4; ++j) {  // B4: row softmax over k, plus eps
    double z[4], zmax = -INFINITY, total = 0;
    for (int k = 0; k < 4; ++k) {
      z[k] = double(mixes[8 + 4 * j + k]) * scale[2] + base[8 + 4 * j + k];
      zmax = std::max(zmax, z[k]);
    }
    for (int k = 0; k < 4; ++k) total += exp_fixed(z[k] - zmax);
    for (int k = 0; k < 4; ++k) c.comb[j][k] = round_f32(exp_fixed(z[k] - zmax) / total + hc_eps);
  }
  auto normalize_columns = [&] {
    for (int k = 0; k < 4; ++k) {
      double sum = 0;
      for (int j = 0; j < 4; ++j) sum += c.comb[j][k];
      for (int j = 0; j < 4; ++j) c.comb[j][k] = round_f32(double(c.comb[j][k]) / (sum + hc_eps));
    }
  };
  auto normalize_rows = [&] {
    for (int j = 0; j < 4; ++j) {
      double sum = 0;
      for (int k = 0; k < 4; ++k) sum += c.comb[j][k];
      for (int k = 0; k < 4; ++k) c.comb[j][k] = round_f32(double(c.comb[j][k]) / (sum + hc_eps));
    }
  };
  normalize_columns();                                             // B5
  for (int it = 1; it < sinkhorn_iters; ++it) {                    // B6
    normalize_rows();
    normalize_columns();
  }
  return c;
}

void hc_head_pre(const float* mixes, const float* scale, const float* base, double hc_eps, float* pre) {
  for (int k = 0; k < 4; ++k) pre[k] = round_f32(sigmoid(double(mixes[k]) * scale[0] + base[k]) + hc_eps);
}

void hc_collapse(const float* h, const float* pre, int64_t n, float* u) {
  if (ops_avx512_available()) return hc_collapse_avx512(h, pre, n, u);
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0;
    for (int k = 0; k < 4; ++k) acc += double(pre[k]) * h[k * n + i];
    u[i] = round_bf16(acc);
  }
}

void hc_expand(const float* h, const float* x, const HcCoefficients& c, int64_t n, float* h_out) {
  hc_expand_columns(h, x, c, n, 0, n, h_out);
}

void hc_expand_columns(const float* h, const float* x, const HcCoefficients& c, int64_t n, int64_t i0, int64_t i1,
                       float* h_out) {
  if (ops_avx512_available()) return hc_expand_columns_avx512(h, x, c, n, i0, i1, h_out);
  for (int k = 0; k < 4; ++k) {
    for (int64_t i = i0; i < i1; ++i) {
      double acc = double(c.post[k]) * x[i];
      for (int j = 0; j < 4; ++j) acc += double(c.comb[j][k]) * h[j * n + i];
      h_out[k * n + i] = round_bf16(acc);
    }
  }
}

float max_value(const float* x, int64_t n) {
  float lanes[8];
  std::fill(lanes, lanes + 8, -INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lanes[j] = std::max(lanes[j], x[i + j]);
  }
  for (; i < n; ++i) lanes[0] = std::max(lanes[0], x[i]);
  float best = lanes[0];
  for (const float v : lanes) best = std::max(best, v);
  return best;
}

int64_t argmax(const float* x, int64_t n) {
  const float best = max_value(x, n);
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;
}

}  // namespace deepinfer
