// The kAvx512Bf16Quant family's traits struct SQuant: S (simd_avx512bf16_ops.h) plus the exact bf16 decodes of
// FP8 and FP4 weights. Shared by simd_avx512bf16quant.cpp (its linear family) and simd_amx.cpp (whose AMX tiles
// take the same decoded chunks). Included INSIDE the including file's target region and namespace, after
// simd_avx512bf16_ops.h; nowhere else (no include guard on purpose).

// e4m3 / e2m1 codes times their power-of-two block scale become exact bf16 values (3 / 1 mantissa bits; a value
// below 2^-126 becomes 0, as vdpbf16ps treats such operands anyway). Tile mode decodes e4m3 as the fp32 family
// does, then converts; e2m1 is looked up as bf16.
struct SQuant : S {
  // A single token's rows go one at a time, so that each thread reads one sequential stream: Zen 4 streams
  // that far faster than rows read chunk by chunk side by side (rows 1-8 KB apart). A 1 GB bf16 GEMV on 2
  // threads: 41-49 GB/s with 1 row, 28-35 with 4; kernel_bench, 2 threads: head slice 25-35 -> 28-46 GB/s, FP8
  // wq_b 15-16 -> 21-23. Two accumulator chains per row (chains_for) keep one row from waiting on the vdpbf16ps
  // latency (an FP4 chunk is only 16 bytes): kernel_bench FP4 expert on 2 threads, 4 rows with one chain ->
  // 1 row with two, 13-19 -> 27-29 GB/s. More tokens take 2 rows at a time (4 rows with two chains would need
  // 32 accumulators for 4 tokens). FP4 takes four chains: at two, its single-token GEMV still waited on the
  // latency (16 bytes of codes per vdpbf16ps); kernel_bench on a Zen 5, FP4 2048 x 4096 of one token, medians of
  // 4 alternating runs: one core 19.9 -> 24.4 GB/s (weights in L2: 20.2 -> 27.7), two threads 33.9 -> 42.8
  // (eight chains: no faster).
  static constexpr int chains_for(DType d) { return d == DType::kI8 ? 4 : 2; }
  static constexpr int direct_rows_for(DType, int t) { return t == 1 ? 1 : 2; }
  // Tile mode over a few token blocks (fused_max_blocks) decodes in registers, 2 rows x 12 tokens at a time
  // (linear_family.h, fused_panels): kernel_bench, FP4 expert with 12 tokens, alternating builds, one core
  // 116 / 116 / 110 -> 138 / 142 / 157 GFLOP/s, two 210 / 235 / 248 -> 248 / 291 / 259 (Zen 4). A full FP4
  // token block goes alone, 4 rows x 6 tokens at a time (fused_panels).
  static constexpr int kFusedRows = 2;
  // The register GEMVs' prefetches stay in L1, as tuned on Zen 4 / 5 (S's L2 prefetches are for Intel's Xeons).
  static constexpr bool kDirectPrefetchToL2 = false;
  // cvtne2ps_pbh(hi, lo): the second operand's 16 values become elements 0-15.
  static W decode_fp8(const uint8_t* p, float mult) {
    return _mm512_cvtne2ps_pbh(fp8_scaled(p + 16, mult), fp8_scaled(p, mult));
  }
  static W decode_fp8_wide(const uint8_t* p, float mult) {
    return _mm512_cvtne2ps_pbh(fp8_scaled_wide(p + 16, mult), fp8_scaled_wide(p, mult));
  }

  // The scaled-x direct mode (linear_family.h: x comes multiplied by each chunk's 2^(s - 127)): the codes'
  // own values, 64 at a time. vpermi2b looks each code's 7 magnitude bits up in the 128 high bytes and the
  // 128 low bytes of the values' bf16 bits (kE4m3Bf16), the sign bit is or-ed into the high bytes, and
  // unpacking low with high bytes makes the words. The unpack works within 128-bit lanes, so the codes are
  // first permuted (vpermb) such that the words come out in order: chunk 0 = codes 0-31, chunk 1 = 32-63.
  // Six vector operations per 64 codes, where the scaled decode takes about eighteen: kernel_bench FP8 wq_b on
  // one core in L2 12.7-13.3 -> 19.4-20.5 GB/s; a standalone 0.5 GB GEMV on 2 threads 16-18 -> 28 GB/s (a read
  // loop: 29-36).
  static constexpr float kFp8RawUnit = 1.0f;  // decode_fp8_raw gives the value itself (linear_family.h)
  static void decode_fp8_raw_pair(const uint8_t* p, W* w0, W* w1) { decode_fp8_codes(_mm512_loadu_si512(p), w0, w1); }
  // One chunk (an odd last chunk, or the zero-padded tail): the first 32 bytes only.
  static W decode_fp8_raw(const uint8_t* p) {
    W w0, w1;
    decode_fp8_codes(_mm512_maskz_loadu_epi8(0xFFFFFFFFull, p), &w0, &w1);
    return w0;
  }
  static void decode_fp8_codes(__m512i codes, W* w0, W* w1) {
    // Byte 16l + j (j < 8) of the permuted codes is code 8l + j, byte 16l + 8 + j is code 32 + 8l + j.
    alignas(64) static constexpr uint8_t kOrder[64] = {
        0,  1,  2,  3,  4,  5,  6,  7,  32, 33, 34, 35, 36, 37, 38, 39, 8,  9,  10, 11, 12, 13,
        14, 15, 40, 41, 42, 43, 44, 45, 46, 47, 16, 17, 18, 19, 20, 21, 22, 23, 48, 49, 50, 51,
        52, 53, 54, 55, 24, 25, 26, 27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63};
    const __m512i c = _mm512_permutexvar_epi8(_mm512_load_si512(kOrder), codes);
    const uint8_t* hi_table = kE4m3Bf16.hi.data();
    const uint8_t* lo_table = kE4m3Bf16.lo.data();
    const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(lo_table), c, _mm512_load_si512(lo_table + 64));
    __m512i hi = _mm512_permutex2var_epi8(_mm512_load_si512(hi_table), c, _mm512_load_si512(hi_table + 64));
    hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8(char(0x80)), 0xF8);  // hi | (c & 0x80)
    *w0 = (W)_mm512_unpacklo_epi8(lo, hi);
    *w1 = (W)_mm512_unpackhi_epi8(lo, hi);
  }
  // x' = x * m for 32 bf16 values (exact: scaled_x checks that every x' is a normal bf16 or zero).
  static void scale_x_chunk(const uint16_t* src, float m, uint16_t* dst) {
    const __m512i v = _mm512_loadu_si512(src);
    const __m512 mv = _mm512_set1_ps(m);
    const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
    const __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(b, mv), _mm512_mul_ps(a, mv)));
  }

  // 16 bytes = 32 codes: the even elements (low nibbles), then the odd ones (x is packed in the same order).
  // One vpermw looks all 32 up in the scale's bf16 row (kE2m1Bf16, the values fp4_values gives, as bf16):
  // words 0-15 are the bytes, whose low five bits pick the low nibble's entry (the row repeats its 16
  // values), words 16-31 the bytes >> 4. Three vector operations per 32 codes where decoding to fp32 and
  // converting took six: an L2-resident FP4 GEMV on one core went from 12 to 21 GB/s.
  static W decode_fp4(const uint8_t* p, uint8_t scale) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(codes));  // the 16 bytes twice
    const __m512i high_half_by_4 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i index = _mm512_srlv_epi16(bytes, high_half_by_4);
    return (W)_mm512_permutexvar_epi16(index, _mm512_load_si512(kE2m1Bf16[scale].data()));
  }
};
