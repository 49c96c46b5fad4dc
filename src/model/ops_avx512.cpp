#include "model/ops_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtypes.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* temporaries.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace deepinfer {

bool ops_avx512_available() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return yes;
}

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl")
#endif

namespace {

// round_to_mantissa_bits (dtypes.h) on 8 lanes: the same integer rounding of the bits.
template <int kBits>
inline __m512d round_mantissa_pd(__m512d v) {
  constexpr int kDrop = 52 - kBits;
  const __m512i b = _mm512_castpd_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi64(b, kDrop), _mm512_set1_epi64(1));
  const __m512i r = _mm512_add_epi64(b, _mm512_add_epi64(_mm512_set1_epi64((int64_t(1) << (kDrop - 1)) - 1), lsb));
  return _mm512_castsi512_pd(_mm512_and_si512(r, _mm512_set1_epi64(~((int64_t(1) << kDrop) - 1))));
}

// All 8 lanes zero or with a biased double exponent in [lo, hi].
inline bool all_in_range(__m512d v, int64_t lo, int64_t hi) {
  const __m512i e = _mm512_and_si512(_mm512_srli_epi64(_mm512_castpd_si512(v), 52), _mm512_set1_epi64(0x7ff));
  const __mmask8 ok = _mm512_cmp_epu64_mask(e, _mm512_set1_epi64(lo), _MM_CMPINT_NLT) &
                      _mm512_cmp_epu64_mask(e, _mm512_set1_epi64(hi), _MM_CMPINT_LE);
  return __mmask8(ok | _mm512_cmp_pd_mask(v, _mm512_setzero_pd(), _CMP_EQ_OQ)) == 0xFF;
}

// f applied to each of the 8 lanes: the scalar fallback of the rounding helpers below.
template <class F>
inline __m512d each_lane(__m512d v, F f) {
  alignas(64) double d[8];
  _mm512_store_pd(d, v);
  for (double& x : d) x = f(x);
  return _mm512_load_pd(d);
}

// round_bf16 of 8 lanes, as doubles. The fast path is its bf16-normal branch without overflow
// (2^-126 <= |v| < 2^127, where rounding cannot pass the largest bf16); other vectors go lane by lane.
inline __m512d round_bf16_pd(__m512d v) {
  if (all_in_range(v, 1023 - 126, 1023 + 126)) return round_mantissa_pd<7>(v);
  return each_lane(v, [](double x) { return double(round_bf16(x)); });
}

// e4m3_round of 8 lanes: its e4m3-normal branch (finite, |v| >= 2^-6), clamped to +-448.
inline __m512d e4m3_round_pd(__m512d v) {
  if (all_in_range(v, 1023 - 6, 2046)) {
    const __m512d r = round_mantissa_pd<3>(v);
    return _mm512_min_pd(_mm512_max_pd(r, _mm512_set1_pd(-448.0)), _mm512_set1_pd(448.0));
  }
  return each_lane(v, [](double x) { return e4m3_round(x); });
}

// e2m1_round of 8 lanes (finite lanes; others go lane by lane): |v| >= 1 keeps one mantissa bit, clamped to
// +-6; |v| < 1 rounds to the subnormal quantum 0.5 (v * 2 and the * 0.5 are exact, as the scalar v / 0.5).
inline __m512d e2m1_round_pd(__m512d v) {
  const __m512i e = _mm512_and_si512(_mm512_srli_epi64(_mm512_castpd_si512(v), 52), _mm512_set1_epi64(0x7ff));
  if (_mm512_cmp_epu64_mask(e, _mm512_set1_epi64(0x7ff), _MM_CMPINT_EQ) != 0) {
    return each_lane(v, [](double x) { return e2m1_round(x); });
  }
  const __mmask8 normal = _mm512_cmp_epu64_mask(e, _mm512_set1_epi64(1023), _MM_CMPINT_NLT);
  const __m512d r_normal =
      _mm512_min_pd(_mm512_max_pd(round_mantissa_pd<1>(v), _mm512_set1_pd(-6.0)), _mm512_set1_pd(6.0));
  const __m512d r_small = _mm512_mul_pd(
      _mm512_roundscale_pd(_mm512_mul_pd(v, _mm512_set1_pd(2.0)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
      _mm512_set1_pd(0.5));
  return _mm512_mask_blend_pd(normal, r_small, r_normal);
}

// hadamard_128's butterfly step (a + b, a - b) between lanes i and i ^ half of one vector (half = 1, 2, 4): the
// partner's lanes come from a permute; a + b equals b + a exactly.
template <int kHalf>
inline __m512d butterfly_in_vector(__m512d v) {
  __m512d partner;
  if constexpr (kHalf == 1) partner = _mm512_permute_pd(v, 0x55);
  else if constexpr (kHalf == 2) partner = _mm512_permutex_pd(v, _MM_SHUFFLE(1, 0, 3, 2));
  else partner = _mm512_shuffle_f64x2(v, v, _MM_SHUFFLE(1, 0, 3, 2));
  constexpr __mmask8 kUpper = kHalf == 1 ? 0xAA : kHalf == 2 ? 0xCC : 0xF0;  // lanes with i & half: a - b there
  return _mm512_mask_blend_pd(kUpper, _mm512_add_pd(v, partner), _mm512_sub_pd(partner, v));
}

inline __mmask8 tail_mask(int64_t left) { return left >= 8 ? __mmask8(0xFF) : __mmask8((1u << left) - 1u); }

// 8 floats (the masked-off lanes zero) as doubles.
inline __m512d load_pd(const float* p, __mmask8 m) { return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p)); }
inline void store_ps(float* p, __mmask8 m, __m512d v) { _mm256_mask_storeu_ps(p, m, _mm512_cvtpd_ps(v)); }

// exp_fixed (ops.h) of 8 lanes: its operations where every |x| <= kExpFixedMaxArg, and +0 (std::exp's) for a lane of
// -inf (a masked logit: a constrained draw has mostly those); else the scalar function per lane.
inline __m512d exp_fixed_pd(__m512d x) {
  const __mmask8 minus_inf = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-INFINITY), _CMP_EQ_OQ);
  if (__mmask8(_mm512_cmp_pd_mask(_mm512_abs_pd(x), _mm512_set1_pd(kExpFixedMaxArg), _CMP_LE_OQ) | minus_inf) != 0xFF) {
    return each_lane(x, [](double v) { return exp_fixed(v); });
  }
  x = _mm512_mask_mov_pd(x, minus_inf, _mm512_setzero_pd());  // computed as e^0, then zeroed
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);  // nearbyint
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kExpTaylor[13]);
  for (int j = 12; j >= 0; --j) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kExpTaylor[j]));
  return _mm512_maskz_mov_pd(__mmask8(~minus_inf), _mm512_scalef_pd(p, k));
}

}  // namespace

void hc_expand_columns_avx512(const float* h, const float* x, const HcCoefficients& c, int64_t n, int64_t i0, int64_t i1,
                              float* h_out) {
  for (int k = 0; k < 4; ++k) {
    const __m512d post = _mm512_set1_pd(double(c.post[k]));
    __m512d comb[4];
    for (int j = 0; j < 4; ++j) comb[j] = _mm512_set1_pd(double(c.comb[j][k]));
    for (int64_t i = i0; i < i1; i += 8) {
      const __mmask8 m = tail_mask(i1 - i);
      __m512d acc = _mm512_mul_pd(post, load_pd(x + i, m));
      for (int j = 0; j < 4; ++j) acc = _mm512_add_pd(acc, _mm512_mul_pd(comb[j], load_pd(h + j * n + i, m)));
      store_ps(h_out + k * n + i, m, round_bf16_pd(acc));
    }
  }
}

void hc_collapse_avx512(const float* h, const float* pre, int64_t n, float* u) {
  __m512d p[4];
  for (int k = 0; k < 4; ++k) p[k] = _mm512_set1_pd(double(pre[k]));
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = tail_mask(n - i);
    __m512d acc = _mm512_setzero_pd();  // from +0, as the scalar loop: a -0 sum comes out +0
    for (int k = 0; k < 4; ++k) acc = _mm512_add_pd(acc, _mm512_mul_pd(p[k], load_pd(h + k * n + i, m)));
    store_ps(u + i, m, round_bf16_pd(acc));
  }
}

double sum_squares_32_lanes_avx512(const float* x, int64_t n) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};  // lanes 8q..8q+7
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int q = 0; q < 4; ++q) {
      const __m512d v = load_pd(x + i + 8 * q, 0xFF);
      acc[q] = _mm512_add_pd(acc[q], _mm512_mul_pd(v, v));  // the square is exact: no fused form differs
    }
  }
  alignas(64) double lanes[32];
  for (int q = 0; q < 4; ++q) _mm512_store_pd(lanes + 8 * q, acc[q]);
  for (int l = 0; i < n; ++i, ++l) lanes[l] += double(x[i]) * x[i];
  for (int half = 16; half > 0; half /= 2) {
    for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
  }
  return lanes[0];
}

int64_t rmsnorm_scale_avx512(const float* x, const uint16_t* weight, int64_t n, double r, float* out) {
  const __m512d rv = _mm512_set1_pd(r);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m512d w = _mm512_set1_pd(1.0);
    if (weight) {  // 8 bf16 weights: their bits in the high half of fp32 lanes
      const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(weight + i)));
      w = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
    }
    store_ps(out + i, 0xFF, round_bf16_pd(_mm512_div_pd(_mm512_mul_pd(w, load_pd(x + i, 0xFF)), rv)));
  }
  return i;
}

void head_rms_normalize_avx512(float* q, int64_t n_heads, int64_t head_dim, double eps) {
  // The squares are bf16 values (8 significant bits), so when their binary exponents span at most max_spread,
  // every partial sum of them is a multiple of the smallest one's last bit and below 2^53 of those: exact in
  // double, the same in any order. Then 8 lanes of partial sums give the scalar loop's in-order sum (whose
  // chain of dependent adds took most of this function's time); otherwise (a wider span, inf, NaN) the squares
  // are summed in order.
  const int64_t max_spread = 45 - int64_t(std::bit_width(uint64_t(head_dim)));
  const __m512i exp_mask = _mm512_set1_epi64(0x7ff);
  for (int64_t hd = 0; hd < n_heads; ++hd) {
    float* x = q + hd * head_dim;
    __m512d lanes = _mm512_setzero_pd();
    __m512i e_hi = _mm512_setzero_si512(), e_lo = exp_mask;  // biased exponents of the nonzero squares
    for (int64_t i = 0; i < head_dim; i += 8) {
      const __m512d v = load_pd(x + i, tail_mask(head_dim - i));
      const __m512d sq = round_bf16_pd(_mm512_mul_pd(v, v));
      const __m512i e = _mm512_and_si512(_mm512_srli_epi64(_mm512_castpd_si512(sq), 52), exp_mask);
      e_hi = _mm512_max_epu64(e_hi, e);
      e_lo = _mm512_mask_min_epu64(e_lo, _mm512_cmp_pd_mask(sq, _mm512_setzero_pd(), _CMP_NEQ_UQ), e_lo, e);
      lanes = _mm512_add_pd(lanes, sq);
    }
    const int64_t hi = int64_t(_mm512_reduce_max_epu64(e_hi)), lo = int64_t(_mm512_reduce_min_epu64(e_lo));
    double sum = 0;
    if (hi < 0x7ff && hi - lo <= max_spread) {
      sum = _mm512_reduce_add_pd(lanes);
    } else {  // rounded 8 at a time and summed in order, as the scalar loop does
      for (int64_t i = 0; i < head_dim; i += 8) {
        const __m512d v = load_pd(x + i, tail_mask(head_dim - i));
        alignas(64) double sq[8];
        _mm512_store_pd(sq, round_bf16_pd(_mm512_mul_pd(v, v)));
        for (int64_t l = 0; l < std::min<int64_t>(8, head_dim - i); ++l) sum += sq[l];
      }
    }
    const __m512d r = _mm512_set1_pd(head_rms_inverse(sum, head_dim, eps));
    for (int64_t i = 0; i < head_dim; i += 8) {
      const __mmask8 m = tail_mask(head_dim - i);
      store_ps(x + i, m, round_bf16_pd(_mm512_mul_pd(load_pd(x + i, m), r)));
    }
  }
}

int64_t rope_rotate_avx512(float* x, int64_t n_heads, int64_t stride, const float* cos_sin, int64_t n_pairs,
                           bool inverse) {
  // Four pairs per vector, lanes (x0, x1): the even lane x0 c - x1 s, the odd lane x1 c + x0 s. Each product of
  // two floats is exact in double, so both sums round once, as the scalar loop's x0 c - x1 s and x0 s + x1 c.
  const int64_t n4 = n_pairs / 4 * 4;
  __m512d c[8], sn[8];  // the cosines (c, c) and the sines (-s, s) of pairs 4k .. 4k + 3, for up to 32 pairs
  const int64_t n_vectors = n4 / 4;
  if (n_vectors > 8) return 0;  // rope dims above 64: the caller's scalar loop
  const __m512d sign = inverse ? _mm512_set_pd(-1, 1, -1, 1, -1, 1, -1, 1) : _mm512_set_pd(1, -1, 1, -1, 1, -1, 1, -1);
  for (int64_t k = 0; k < n_vectors; ++k) {
    const __m512d cs = load_pd(cos_sin + 8 * k, 0xFF);  // c0 s0 c1 s1 ...
    c[k] = _mm512_movedup_pd(cs);                                        // c0 c0 c1 c1 ...
    sn[k] = _mm512_mul_pd(_mm512_permute_pd(cs, 0xFF), sign);           // -s0 s0 -s1 s1 ... (exact)
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * stride;
    for (int64_t k = 0; k < n_vectors; ++k) {
      const __m512d v = load_pd(xh + 8 * k, 0xFF);
      const __m512d swapped = _mm512_permute_pd(v, 0x55);  // x1 x0 ...
      const __m512d r = _mm512_add_pd(_mm512_mul_pd(v, c[k]), _mm512_mul_pd(swapped, sn[k]));
      store_ps(xh + 8 * k, 0xFF, round_bf16_pd(r));
    }
  }
  return n4;
}

int64_t swiglu_avx512(const float* a, const float* b, int64_t n, double limit, double weight, float* out) {
  const __m512d lim = _mm512_set1_pd(limit), neg_lim = _mm512_set1_pd(-limit), w = _mm512_set1_pd(weight);
  const __m512d one = _mm512_set1_pd(1.0);
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8) {
    // min_pd(x, y) is x < y ? x : y, std::min(v, limit) is limit < v ? limit : v: the same, NaN included.
    const __m512d av = _mm512_min_pd(lim, load_pd(a + i, 0xFF));
    const __m512d bv = _mm512_min_pd(lim, _mm512_max_pd(neg_lim, load_pd(b + i, 0xFF)));  // std::clamp's order
    const __m512d x =  // -av: the sign bit flipped
        _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(av), _mm512_set1_epi64(INT64_MIN)));
    const __m512d e = exp_fixed_pd(x);
    const __m512d y = _mm512_mul_pd(_mm512_mul_pd(_mm512_div_pd(av, _mm512_add_pd(one, e)), bv), w);
    store_ps(out + i, 0xFF, round_bf16_pd(y));
  }
  return n8;
}

int64_t exp_fixed_sum_avx512(const float* x, int64_t n, double shift, double* e, double* sums) {
  const __m512d s = _mm512_set1_pd(shift);
  __m512d acc = _mm512_loadu_pd(sums);
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8) {
    const __m512d v = exp_fixed_pd(_mm512_sub_pd(load_pd(x + i, 0xFF), s));
    if (e) _mm512_storeu_pd(e + i, v);
    acc = _mm512_add_pd(acc, v);
  }
  _mm512_storeu_pd(sums, acc);
  return n8;
}

float abs_max_avx512(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), magnitude));
    m = _mm512_max_ps(a, m);  // a NaN in a yields m, the second operand
  }
  return _mm512_reduce_max_ps(m);
}

namespace {
// x / s for the QDQ blocks: times 1 / s when s is a power of two (V4's scales, and V4.1's FP4 ones). 1 / s is
// then exact, so both give the same real number rounded once, at a fraction of the cost (the divisions had set
// the pace of every activation QDQ).
struct DivideBy {
  __m512d s, inverse;
  bool power_of_two;
  explicit DivideBy(double scale) : s(_mm512_set1_pd(scale)), inverse(_mm512_set1_pd(1.0 / scale)) {
    int e = 0;
    power_of_two = std::frexp(scale, &e) == 0.5 && std::isfinite(1.0 / scale);  // not for subnormal scales
  }
  __m512d operator()(__m512d v) const { return power_of_two ? _mm512_mul_pd(v, inverse) : _mm512_div_pd(v, s); }
};
}  // namespace

void qdq_fp8_block_avx512(float* x, int64_t n, double s) {
  const DivideBy divide(s);
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = tail_mask(n - i);
    store_ps(x + i, m, _mm512_mul_pd(e4m3_round_pd(divide(load_pd(x + i, m))), divide.s));
  }
}

void qdq_fp4_block_avx512(float* x, int64_t n, double s) {
  const DivideBy divide(s);
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = tail_mask(n - i);
    store_ps(x + i, m, _mm512_mul_pd(e2m1_round_pd(divide(load_pd(x + i, m))), divide.s));
  }
}

namespace {
// 16 bytes from p, of which the first n (<= 16) are read (byte-masked loads need AVX512BW, not assumed here).
inline __m128i load_bytes(const uint8_t* p, int64_t n) {
  if (n >= 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  alignas(16) uint8_t part[16] = {};
  std::memcpy(part, p, size_t(n));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(part));
}
}  // namespace

void unpack_e4m3_avx512(const uint8_t* codes, int64_t n, float s, float* out) {
  // e4m3_to_float's bit placement: exponent and mantissa at float bits 20..26, times 2^120 (exact for
  // subnormal codes too), the sign moved to bit 31, and NaN for the two codes with every low bit set.
  const __m512i low_bits = _mm512_set1_epi32(0x7f), sign_bit = _mm512_set1_epi32(0x80);
  const __m512 rescale = _mm512_set1_ps(0x1p120f), nan = _mm512_set1_ps(NAN), scale = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512i c = _mm512_cvtepu8_epi32(load_bytes(codes + i, n - i));
    const __m512i low = _mm512_and_si512(c, low_bits);
    const __m512 magnitude = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(low, 20)), rescale);
    __m512 v = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(magnitude), _mm512_slli_epi32(_mm512_and_si512(c, sign_bit), 24)));
    v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(low, low_bits), v, nan);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, scale));
  }
}

void unpack_e2m1_avx512(const uint8_t* packed, int64_t n, float s, float* out) {
  const __m512 values = _mm512_loadu_ps(kE2M1Values), scale = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    // Byte j of the 8 widened to lanes 2j and 2j + 1; the odd lanes take the high nibble.
    const __m512i bytes = _mm512_cvtepu8_epi32(load_bytes(packed + i / 2, (std::min<int64_t>(16, n - i) + 1) / 2));
    const __m512i pairs = _mm512_permutexvar_epi32(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), bytes);
    const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i nibbles = _mm512_and_si512(_mm512_srlv_epi32(pairs, shifts), _mm512_set1_epi32(0xf));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_permutexvar_ps(nibbles, values), scale));
  }
}

void hadamard_128_avx512(float* x) {
  __m512d v[16];
  for (int k = 0; k < 16; ++k) v[k] = load_pd(x + 8 * k, 0xFF);
  for (int k = 0; k < 16; ++k) v[k] = butterfly_in_vector<4>(butterfly_in_vector<2>(butterfly_in_vector<1>(v[k])));
  for (int half = 1; half < 16; half *= 2) {  // element strides 8, 16, 32, 64: whole vectors
    for (int k = 0; k < 16; k += 2 * half) {
      for (int j = k; j < k + half; ++j) {
        const __m512d a = v[j], b = v[j + half];
        v[j] = _mm512_add_pd(a, b);
        v[j + half] = _mm512_sub_pd(a, b);
      }
    }
  }
  const __m512d scale = _mm512_set1_pd(double(float(1.0 / std::sqrt(128.0))));
  for (int k = 0; k < 16; ++k) store_ps(x + 8 * k, 0xFF, round_bf16_pd(_mm512_mul_pd(v[k], scale)));
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

}  // namespace deepinfer

#pragma GCC diagnostic pop
