// The AVX512-BF16 family's traits struct S and its packing helpers, shared by simd_avx512bf16.cpp (S) and
// simd_avx512bf16quant.cpp (SQuant, which also takes FP8 and FP4 weights and needs AVX512-VBMI). Included
// by those two files INSIDE their target region and namespace; nowhere else (no include guard on purpose).
// The including file includes <immintrin.h>, <algorithm>, <cstdint>, <cstring>, <vector> and simd_kernels.h.

#include "backend/cpu/simd_avx512_ops.h"

// 16 floats -> bf16 bits; sets bits of *bad where a value is not a bf16 value or is a nonzero below 2^-126.
inline __m256i to_bf16_bits(__m512 v, __mmask16* bad) {
  const __m512i bits = _mm512_castps_si512(v);
  const __mmask16 low = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0xFFFF));
  const __mmask16 exp_zero = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));
  const __mmask16 nonzero = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7FFFFFFF));
  *bad = __mmask16(*bad | low | (exp_zero & nonzero));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16));
}

// Lanes [0, n) of a 16-lane mask, n clamped to [0, 16].
inline __mmask16 first_lanes(int64_t n) { return __mmask16(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1u); }

bool pack_x_bf16(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t k, int64_t out_stride,
                 bool fp4_order, void* out) {
  __mmask16 bad = 0;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t t = t0; t < t1; ++t) {
    const float* src = x + t * x_stride;
    uint16_t* dst = static_cast<uint16_t*>(out) + t * out_stride;
    if (fp4_order) {  // each 32-element chunk: its even elements, then its odd ones (the packed nibbles' order)
      for (int64_t i = 0; i < out_stride; i += 32) {
        const __m512 a = _mm512_maskz_loadu_ps(first_lanes(k - i), src + i);
        const __m512 b = _mm512_maskz_loadu_ps(first_lanes(k - i - 16), src + i + 16);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), to_bf16_bits(_mm512_permutex2var_ps(a, even, b), &bad));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), to_bf16_bits(_mm512_permutex2var_ps(a, odd, b), &bad));
      }
      continue;
    }
    for (int64_t i = 0; i < out_stride; i += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(first_lanes(k - i), src + i);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), to_bf16_bits(v, &bad));
    }
  }
  return bad == 0;
}

// (row 2j, row 2j+1) -> [head_dim] u32 of two bf16 (low half = row 2j); nullptr rows are zeros.
bool pack_v_pairs_bf16(const float* const* rows, int64_t r0, int64_t r1, int64_t head_dim, uint32_t* out) {
  __mmask16 bad = 0;
  const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
  for (int64_t j = r0; j < r1; j += 2) {
    const float* a = rows[j];
    const float* b = rows[j + 1];
    uint32_t* dst = out + (j / 2) * head_dim;
    for (int64_t d = 0; d < head_dim; d += 16) {
      const __mmask16 m = first_lanes(head_dim - d);
      const __m512i va = a ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, a + d)) : _mm512_setzero_si512();
      const __m512i vb = b ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, b + d)) : _mm512_setzero_si512();
      bad = __mmask16(bad | _mm512_test_epi32_mask(_mm512_or_si512(va, vb), lo16));
      const __m512i pair = _mm512_or_si512(_mm512_srli_epi32(va, 16), _mm512_andnot_si512(lo16, vb));
      _mm512_mask_storeu_epi32(dst + d, m, pair);
    }
  }
  return bad == 0;
}

struct S : Avx512Ops {
  using Elem = uint16_t;
  using W = __m512bh;
  static constexpr int64_t kChunk = 32;
  static constexpr int kDirectR = 4, kDirectT = 4;
  // Register GEMVs: every row prefetched into L2, as in the fp32 AVX-512 family (Intel's Xeons run this family's bf16
  // rows, the head above all). 2-core Xeon, kernel_bench bf16 16384 x 4096 GEMV, alternating builds: one core
  // 13.4-13.8 -> 14.8-15.5 GB/s, two 26.0-26.9 -> 27.2-30.8. The quant family (AMD) turns it off.
  static constexpr bool kDirectPrefetchToL2 = true;
  static constexpr int kTileR = 4, kTileT = 6;
  static constexpr bool kPairedV = true;

  static constexpr int kPvHeads = 6, kPvVectors = 4;

  static F zero() { return _mm512_setzero_ps(); }
  static F dot(F acc, W a, W b) { return _mm512_dpbf16_ps(acc, a, b); }
  static W load_w(const uint16_t* p) { return (W)_mm512_loadu_si512(p); }
  static void store_w(uint16_t* p, W w) { _mm512_storeu_si512(p, (__m512i)w); }
  static W decode_bf16(const uint16_t* p) { return load_w(p); }
  // No decode_fp8 / decode_fp4 (see simd_avx512bf16.cpp): FP8 and FP4 weights go to the fp32 AVX-512 family
  // for every token count, so a token's sums never depend on the batch (SQuant, simd_avx512bf16quant.cpp, adds
  // them).
  static bool pack_x(const float* x, int64_t xs, int64_t t0, int64_t t1, int64_t k, int64_t kp, bool fp4, void* out) {
    return pack_x_bf16(x, xs, t0, t1, k, kp, fp4, out);
  }
  static bool pack_v_pairs(const float* const* rows, int64_t r0, int64_t r1, int64_t head_dim, uint32_t* out) {
    return pack_v_pairs_bf16(rows, r0, r1, head_dim, out);
  }

  // PV: V from the packed pairs, P as one u32 pair of bf16 per (head, pair).
  struct PvSource {
    const uint32_t* v = nullptr;
    int64_t head_dim = 0;
  };
  using PvRow = uint32_t;
  static void pv_prepare(const AttentionLayout& a, const float* p, int64_t n_heads, PvSource* src,
                         std::vector<uint32_t>* pairs, const PvRow** rows, int64_t* stride) {
    const int64_t n_pairs = a.n_rows / 2;
    pairs->resize(size_t(n_heads * n_pairs));
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* ph = p + h * a.n_rows;
      uint32_t* dst = pairs->data() + h * n_pairs;
      int64_t jp = 0;
      for (; jp + 16 <= n_pairs; jp += 16) {
        const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(ph + 2 * jp));
        const __m512i y = _mm512_castps_si512(_mm512_loadu_ps(ph + 2 * jp + 16));
        const __m512i e = _mm512_permutex2var_epi32(x, even, y), o = _mm512_permutex2var_epi32(x, odd, y);
        _mm512_storeu_si512(dst + jp, _mm512_or_si512(_mm512_srli_epi32(e, 16), _mm512_andnot_si512(lo16, o)));
      }
      for (; jp < n_pairs; ++jp) {
        dst[jp] = (float_to_bits(ph[2 * jp]) >> 16) | (float_to_bits(ph[2 * jp + 1]) & 0xFFFF0000u);
      }
    }
    *src = PvSource{static_cast<const uint32_t*>(a.v_packed), a.head_dim};
    *rows = pairs->data();
    *stride = n_pairs;
  }
  static W pv_v(const PvSource& s, int64_t jp, int64_t d) { return (W)_mm512_loadu_si512(s.v + jp * s.head_dim + d); }
  static W pv_p(const PvRow* row, int64_t jp) { return (W)_mm512_set1_epi32(int(row[jp])); }
};
