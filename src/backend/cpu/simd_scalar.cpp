// The portable kernel family (any CPU, and the fallback for weights the SIMD families do not handle):
// linear decodes one row exactly to fp32 at a time into a per-thread buffer, eight fp32 partial sums per
// token; dot products likewise. Sparse attention has no entry here: the driver's portable loop serves it.
// Also owns the shared tables of simd_kernels.h and the level -> family table.
#include <algorithm>
#include <bit>
#include <string>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/simd_kernels.h"
#include "backend/cpu/weight_decode.h"
#include "core/status.h"

namespace deepinfer::cpu {

namespace {

constexpr std::array<float, 256> make_e8m0_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 255; ++i) {
    float v = 1.0f;
    for (int e = i - 127; e > 0; --e) v *= 2.0f;
    for (int e = i - 127; e < 0; ++e) v *= 0.5f;  // 2^-127 is an exact fp32 subnormal
    t[size_t(i)] = v;
  }
  t[255] = __builtin_nanf("");
  return t;
}

bool scalar_supports(const LinearWeight& w) {
  return w.dtype == DType::kBF16 || w.dtype == DType::kF8E4M3 || w.dtype == DType::kI8;
}

bool scalar_pack_x(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t k, int64_t out_stride,
                   bool /*fp4_order*/, void* out) {
  for (int64_t t = t0; t < t1; ++t) {
    float* dst = static_cast<float*>(out) + t * out_stride;
    std::copy_n(x + t * x_stride, k, dst);
    std::fill(dst + k, dst + out_stride, 0.0f);
  }
  return true;
}

void scalar_tile(const LinearWeight& w, int64_t row0, int64_t n_rows, const PackedX& x, float* c, int64_t cs) {
  thread_local std::vector<float> row;
  const int64_t K = w.n_in;
  row.resize(size_t(K));
  const float* xd = static_cast<const float*>(x.data);
  for (int64_t i = 0; i < n_rows; ++i) {
    decode_weight_row(w, row0 + i, row.data());
    for (int64_t t = 0; t < x.n_tokens; ++t) {
      const float* xt = xd + t * x.stride;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= K; k += 8)
        for (int j = 0; j < 8; ++j) acc[j] += xt[k + j] * row[size_t(k + j)];
      float total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; k < K; ++k) total += xt[k] * row[size_t(k)];
      c[t * cs + i] = total;
    }
  }
}

float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  float total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; k < n; ++k) total += a[k] * b[k];
  return total;
}

void scalar_dot_tiles(const void* w, int64_t ws, int64_t n_rows, const void* x, int64_t xs, int64_t n_tokens,
                      int64_t kp, float* c, int64_t cs) {
  const float* wf = static_cast<const float*>(w);
  const float* xf = static_cast<const float*>(x);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < n_rows; ++r) c[t * cs + r] = dot8(xf + t * xs, wf + r * ws, kp);
}

void scalar_index_scores(const void* keys, const void* q, const float* weights, int64_t n_heads, int64_t kp,
                         int64_t stride, int64_t j0, int64_t j1, float* /*dots*/, float* scores) {
  const float* kf = static_cast<const float*>(keys);
  const float* qf = static_cast<const float*>(q);
  for (int64_t j = j0; j < j1; ++j) {
    float total = 0;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float s = round_bf16_from_float(dot8(qf + h * stride, kf + j * stride, kp));
      total += round_bf16_from_float(std::max(s, 0.0f) * weights[h]);
    }
    scores[j] = round_bf16_from_float(total);
  }
}

float scalar_sum_squares(const float* x, int64_t n) { return dot8(x, x, n); }

}  // namespace

extern const std::array<float, 256> kE8m0Values = make_e8m0_table();
namespace {
// e2m1 code c (0..15) times an e8m0 scale's value, in fp32: the entries of kE2m1Scaled.
constexpr float e2m1_scaled(float scale, size_t c) {
  constexpr float kCodes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (c < 8 ? kCodes[c] : -kCodes[c - 8]) * scale;
}
}  // namespace

extern const std::array<E2m1ScaledRow, 256> kE2m1Scaled = []() constexpr {
  const std::array<float, 256> scale = make_e8m0_table();
  std::array<E2m1ScaledRow, 256> t{};
  for (size_t s = 0; s < 256; ++s)
    for (size_t c = 0; c < 16; ++c) t[s][c] = e2m1_scaled(scale[s], c);
  return t;
}();

extern const std::array<E2m1Bf16Row, 256> kE2m1Bf16 = []() constexpr {
  const std::array<float, 256> scale = make_e8m0_table();
  std::array<E2m1Bf16Row, 256> t{};
  for (size_t s = 0; s < 256; ++s) {
    for (size_t c = 0; c < 32; ++c) {
      const uint32_t bits = std::bit_cast<uint32_t>(e2m1_scaled(scale[s], c % 16));
      t[s][c] = (bits & 0x7F800000u) == 0 ? uint16_t((bits >> 16) & 0x8000u) : uint16_t(bits >> 16);
    }
  }
  return t;
}();

extern const E4m3Bf16Bytes kE4m3Bf16 = []() constexpr {
  E4m3Bf16Bytes t{};
  for (int c = 0; c < 128; ++c) {
    const int e = c >> 3, m = c & 7;
    // (1 + m/8) * 2^(e-7), or m/8 * 2^-6 for e = 0; magnitude 127 follows the formula (480).
    float v = e == 0 ? float(m) / 512.0f : float(8 + m) / 8.0f;
    for (int i = 0; i < e - 7; ++i) v *= 2.0f;
    for (int i = e; i < 7 && e > 0; ++i) v /= 2.0f;
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    t.hi[size_t(c)] = uint8_t(bits >> 24);
    t.lo[size_t(c)] = uint8_t(bits >> 16);
  }
  return t;
}();

const SimdKernels kSimdKernelsScalar = {
    SimdLevel::kScalar, 1, 4, false, std::numeric_limits<int64_t>::max(), 1,
    scalar_supports, scalar_pack_x, scalar_tile, nullptr,
    scalar_dot_tiles,
    nullptr, nullptr, nullptr,
    scalar_index_scores, scalar_sum_squares,
};

const SimdKernels& simd_kernels(SimdLevel level) {
  DI_CHECK_MSG(simd_level_supported(level), std::string("SIMD level not supported by this CPU: ") + simd_level_name(level));
  switch (level) {
    case SimdLevel::kScalar: return kSimdKernelsScalar;
    case SimdLevel::kAvx2: return kSimdKernelsAvx2;
    case SimdLevel::kAvx512: return kSimdKernelsAvx512;
    case SimdLevel::kAvx512Bf16: return kSimdKernelsAvx512Bf16;
    case SimdLevel::kAvx512Bf16Quant: return kSimdKernelsAvx512Bf16Quant;
    case SimdLevel::kAmxBf16: return amx_simd_kernels();
  }
  return kSimdKernelsScalar;
}

const SimdKernels& fp32_simd_kernels(SimdLevel level) {
  const bool bf16 = level == SimdLevel::kAvx512Bf16 || level == SimdLevel::kAvx512Bf16Quant ||
                    level == SimdLevel::kAmxBf16;
  return simd_kernels(bf16 ? SimdLevel::kAvx512 : level);
}

}  // namespace deepinfer::cpu
