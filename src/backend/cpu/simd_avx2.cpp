// The AVX2+FMA kernel family: weights decoded exactly to fp32 in registers (or into the per-thread tile),
// fp32 FMA on 8 lanes. fp4 codes decode through an 8-entry magnitude table plus the sign bit. The fp32
// exp is the Cody-Waite + Cephes polynomial of simd_avx512_ops.h on 8 lanes.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/simd_kernels.h"
#include "core/dtypes.h"
#include "core/status.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* temporaries.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace deepinfer::cpu::avx2 {

alignas(32) constexpr float kE2m1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
// Entry i of the lookup table is pre-XORed with i << 28: the code shifted left by 28 (sign bit at bit 31)
// also carries the index bits into bits 28..30, and XOR-ing it onto the looked-up entry cancels them, so
// one XOR applies the sign (instead of a mask and an OR).
alignas(32) constexpr uint32_t kE2m1IndexBits[8] = {0u << 28, 1u << 28, 2u << 28, 3u << 28,
                                                    4u << 28, 5u << 28, 6u << 28, 7u << 28};

inline __m256 fp8_raw(const uint8_t* p) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20), _mm256_set1_epi32(int(0x87F00000u))));
}

inline __m256 bf16_to_f32(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// The fp4 lookup table for one e8m0 scale: magnitudes times the scale (exact: a power of two), each entry
// pre-XORed with its index bits (kE2m1IndexBits).
inline __m256 fp4_table(float scale) {
  const __m256 scaled = _mm256_mul_ps(_mm256_load_ps(kE2m1Magnitudes), _mm256_set1_ps(scale));
  return _mm256_xor_ps(scaled, _mm256_load_ps(reinterpret_cast<const float*>(kE2m1IndexBits)));
}

// 8 codes (one per 32-bit lane in bits 0..3; bits 4..7 may hold anything) -> values from fp4_table.
inline __m256 fp4_lookup(__m256i codes, __m256 table) {
  const __m256 entry = _mm256_permutevar8x32_ps(table, codes);
  return _mm256_xor_ps(entry, _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

#include "backend/cpu/fp32_family_common.h"

struct Avx2Ops {
  using F = __m256;
  static constexpr int64_t kLanes = 8;
  static F fzero() { return _mm256_setzero_ps(); }
  static F fset1(float v) { return _mm256_set1_ps(v); }
  static F fload(const float* p) { return _mm256_loadu_ps(p); }
  static void fstore(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fadd(F a, F b) { return _mm256_add_ps(a, b); }
  static F fsub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F fmul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fdiv(F a, F b) { return _mm256_div_ps(a, b); }
  static F fmax(F a, F b) { return _mm256_max_ps(a, b); }
  static F ffma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static float fhsum(F v) { return hsum(v); }
  static float fhmax(F v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  static F fbf16(F v) {
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u))));
  }
  static F fexp(F x) {
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  }
};

struct S : Avx2Ops, Fp32PvRows {
  using Elem = float;
  struct W {
    __m256 a, b;
  };
  static constexpr int64_t kChunk = 16;
  // Direct mode: 2 rows x up to 3 tokens, 4 rows for one token (decode). Tile mode: 2 rows x 6 tokens =
  // 12 accumulators, stepped one 8-lane half of a chunk at a time (kParts), which covers the FMA latency.
  static constexpr int kDirectR = 2, kDirectT = 3;
  static constexpr int direct_rows_for(DType, int t) { return t == 1 ? 4 : kDirectR; }
  static constexpr int kTileR = 2, kTileT = 6;
  static constexpr int kParts = 2;
  static constexpr bool kPairedV = false;
  static constexpr int kPvHeads = 3, kPvVectors = 2;

  static F zero() { return _mm256_setzero_ps(); }
  static F dot(F acc, W w, W x) { return _mm256_fmadd_ps(w.b, x.b, _mm256_fmadd_ps(w.a, x.a, acc)); }
  static W load_w(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static F load_part(const float* p, int part) { return _mm256_loadu_ps(p + 8 * part); }  // part 0 = W::a
  static void store_part(float* p, W w, int part) { _mm256_storeu_ps(p, part == 0 ? w.a : w.b); }
  static void store_w(float* p, W w) {
    _mm256_storeu_ps(p, w.a);
    _mm256_storeu_ps(p + 8, w.b);
  }
  static W decode_bf16(const uint16_t* p) { return {bf16_to_f32(p), bf16_to_f32(p + 8)}; }
  static W decode_fp8(const uint8_t* p, float mult) {
    const __m256 m = _mm256_set1_ps(mult);
    return {_mm256_mul_ps(fp8_raw(p), m), _mm256_mul_ps(fp8_raw(p + 8), m)};
  }
  // The raw bits only (e4m3 value * 2^-120): the scaled-x direct mode multiplies x by 2^(s - 7) instead.
  static W decode_fp8_raw(const uint8_t* p) { return {fp8_raw(p), fp8_raw(p + 8)}; }
  static W decode_fp8_wide(const uint8_t* p, float mult) {
    const __m256 rebias = _mm256_set1_ps(0x1p120f), m = _mm256_set1_ps(mult);
    return {_mm256_mul_ps(_mm256_mul_ps(fp8_raw(p), rebias), m), _mm256_mul_ps(_mm256_mul_ps(fp8_raw(p + 8), rebias), m)};
  }
  // 8 bytes = 16 codes: a = even elements (low nibbles), b = odd elements.
  static W decode_fp4(const uint8_t* p, uint8_t scale) { return decode_fp4_with(p, fp4_table(kE8m0Values[scale])); }
  // 16 bytes = 32 codes = the two chunks of one e8m0 scale block, sharing one table.
  static constexpr bool kFp4Pairs = true;
  static void decode_fp4_pair(const uint8_t* p, uint8_t scale, W* first, W* second) {
    const __m256 table = fp4_table(kE8m0Values[scale]);
    *first = decode_fp4_with(p, table);
    *second = decode_fp4_with(p + 8, table);
  }
  static W decode_fp4_with(const uint8_t* p, __m256 table) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return {fp4_lookup(v, table), fp4_lookup(_mm256_srli_epi32(v, 4), table)};
  }
  template <int R>
  static void reduce(const F* acc, float* out) {
    for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
  }
  static bool pack_x(const float* x, int64_t xs, int64_t t0, int64_t t1, int64_t k, int64_t kp, bool fp4, void* out) {
    return pack_x_fp32<8>(x, xs, t0, t1, k, kp, fp4, out);
  }

  // PV (Fp32PvRows): the V rows and P values of pair jp.
  static W pv_v(const PvSource& s, int64_t jp, int64_t d) {
    const float* row = s.v + 2 * jp * s.stride + d;
    return {_mm256_loadu_ps(row), _mm256_loadu_ps(row + s.stride)};
  }
  static W pv_p(const PvRow* row, int64_t jp) { return {_mm256_set1_ps(row[2 * jp]), _mm256_set1_ps(row[2 * jp + 1])}; }
};

#include "backend/cpu/linear_family.h"
#include "backend/cpu/attention_family.h"
}  // namespace deepinfer::cpu::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace deepinfer::cpu {

namespace {
namespace fam = avx2::family;
using S8 = avx2::S;
}  // namespace

const SimdKernels kSimdKernelsAvx2 = {
    SimdLevel::kAvx2, S8::kChunk, 4, S8::kPairedV, S8::kDirectT, S8::kTileT,
    fam::supports<S8>, S8::pack_x, fam::tile<S8>, fam::tile_x<S8>,
    fam::dot_tiles_packed<S8>,
    fam::attention_pack_kv<S8>, fam::attention_pack_q<S8>, fam::attention_attend<S8>,
    fam::index_scores_packed<S8>, fam::sum_squares<S8>,
};

}  // namespace deepinfer::cpu
