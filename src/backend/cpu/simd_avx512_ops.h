// fp32 vector operations on 16 lanes (AVX-512F), the part of an ISA traits struct that the AVX-512 and
// AVX512-BF16 families share: arithmetic, horizontal sums (reduce4, reduce), bf16 rounding, fp32 exp, exact
// e4m3 / e2m1 decoding (the bf16 family converts the decoded e4m3 values to bf16; its e2m1 codes use a bf16
// table). Included by simd_avx512.cpp and simd_avx512bf16.cpp INSIDE their target region and namespace; nowhere
// else (no include guard on purpose).
//
// exp: Cody-Waite reduction by ln 2 and the Cephes expf polynomial (about 1 ulp on the arguments used
// here, x <= 0); arguments below -87.3 return 0 (the exact results there are below 2^-126).

// Sums of 4 vectors -> 4 floats.
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 t2 = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 t3 = _mm256_add_ps(_mm512_castps512_ps256(t2), _mm512_extractf32x8_ps(t2, 1));
  return _mm_add_ps(_mm256_castps256_ps128(t3), _mm256_extractf128_ps(t3, 1));
}

struct Avx512Ops {
  using F = __m512;
  static constexpr int64_t kLanes = 16;
  static F fzero() { return _mm512_setzero_ps(); }
  static F fset1(float v) { return _mm512_set1_ps(v); }
  static F fload(const float* p) { return _mm512_loadu_ps(p); }
  static void fstore(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fadd(F a, F b) { return _mm512_add_ps(a, b); }
  static F fsub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F fmul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fdiv(F a, F b) { return _mm512_div_ps(a, b); }
  static F fmax(F a, F b) { return _mm512_max_ps(a, b); }
  static F ffma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static float fhsum(F v) { return _mm512_reduce_add_ps(v); }
  // Horizontal sums of R vectors into out[0, R). Every R sums a vector's lanes in reduce4's order (the tile
  // kernels' R is 4), so that a row's result does not depend on how many rows its kernel's group has; four at
  // a time share reduce4's shuffles (one _mm512_reduce_add_ps per vector took ~3% of a 512-token prefill of
  // the V4-Flash benchmark model in the fused FP4 mode's sums).
  template <int R>
  static void reduce(const F* acc, float* out) {
    if constexpr (R % 4 == 0) {
      for (int r = 0; r < R; r += 4) _mm_storeu_ps(out + r, reduce4(acc[r], acc[r + 1], acc[r + 2], acc[r + 3]));
    } else {
      for (int r = 0; r < R; ++r) out[r] = _mm_cvtss_f32(reduce4(acc[r], acc[r], acc[r], acc[r]));
    }
  }
  static float fhmax(F v) { return _mm512_reduce_max_ps(v); }
  // Round to bf16, nearest even (finite inputs).
  static F fbf16(F v) {
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(int(0xffff0000u))));
  }
  // 16 e4m3 codes as their raw float bits: the code's value * 2^-120 (the e4m3 exponent lands in the float's
  // low exponent bits).
  static F fp8_raw(const uint8_t* p) {
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 20), _mm512_set1_epi32(int(0x87F00000u))));
  }
  // 16 e4m3 codes times mult = 2^(s - 7) for scale byte s <= 134 (linear_family.h): value * 2^(s - 127).
  static F fp8_scaled(const uint8_t* p, float mult) { return _mm512_mul_ps(fp8_raw(p), _mm512_set1_ps(mult)); }
  // The two-step decode for larger scale bytes: the value first, then times mult = 2^(s - 127).
  static F fp8_scaled_wide(const uint8_t* p, float mult) {
    return _mm512_mul_ps(_mm512_mul_ps(fp8_raw(p), _mm512_set1_ps(0x1p120f)), _mm512_set1_ps(mult));
  }
  // 16 bytes = 32 e2m1 codes times the e8m0 scale: *even = the low nibbles' values, *odd = the high ones'.
  // The table of the scale comes from kE2m1Scaled (a load, where multiplying the table by the scale here
  // took one of the two vector ports that the decode and the FMAs share; same values).
  static void fp4_values(const uint8_t* p, uint8_t scale, F* even, F* odd) {
    const __m512 table = _mm512_load_ps(kE2m1Scaled[scale].data());
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *even = _mm512_permutexvar_ps(v, table);
    *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
  }
  static F fexp(F x) {
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(__mmask16(~underflow), y, _mm512_castsi512_ps(e));
  }
};
