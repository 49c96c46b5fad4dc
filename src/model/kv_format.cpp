// Row codecs of the packed KV formats. Packing recovers a scale per block from the QDQ'd values themselves:
// for power-of-two (e8m0) scales the smallest power of two that brings the block's amax within the element
// format's range always works (a value q * s0 of the QDQ is q * 2^k under it, still a code); for e4m3 scales
// (V4.1 compressed rows) amax / c is tried for every e2m1 magnitude c. Every value is then checked by decoding.
#include "model/kv_format.h"

#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "core/status.h"
#include "model/config.h"
#include "model/ops_avx512.h"

namespace deepinfer {

namespace {

struct E4m3Table {
  float value[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) value[c] = e4m3_to_float(uint8_t(c));
  }
};
const E4m3Table& e4m3_table() {
  static const E4m3Table table;
  return table;
}

bool same_bits(float a, float b) { return float_to_bits(a) == float_to_bits(b); }

// The e4m3 code of q when q is exactly an e4m3 value (|q| <= 448, signed zero kept).
bool e4m3_exact_code(float q, uint8_t* code) {
  const uint32_t bits = float_to_bits(q);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag == 0) {
    *code = sign;
    return true;
  }
  const int e = int(mag >> 23) - 127;
  if (e > 8) return false;                        // too large, inf or nan
  if (e >= -6) {                                  // normal: at most 3 mantissa bits
    if (mag & 0xfffffu) return false;
    const uint32_t c = (uint32_t(e + 7) << 3) | ((mag >> 20) & 7u);
    if (c >= 0x7f) return false;                  // 480 would be the NaN code
    *code = uint8_t(sign | c);
    return true;
  }
  const float m = std::fabs(q) * 512.0f;          // subnormal: multiples of 2^-9 below 2^-6 (exact scaling)
  if (m < 1.0f || m > 7.0f || m != std::floor(m)) return false;
  *code = uint8_t(sign | uint32_t(m));
  return true;
}

// The e2m1 code of q when q is exactly an e2m1 value.
bool e2m1_exact_code(float q, uint8_t* code) {
  static constexpr int8_t kCodeOfTwice[13] = {0, 1, 2, 3, 4, -1, 5, -1, 6, -1, -1, -1, 7};
  const float m2 = std::fabs(q) * 2.0f;
  if (!(m2 <= 12.0f) || m2 != std::floor(m2)) return false;
  const int c = kCodeOfTwice[int(m2)];
  if (c < 0) return false;
  *code = uint8_t((std::signbit(q) ? 8 : 0) | c);
  return true;
}

float block_amax(const float* v, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax;
}

// Element codes of n values under a power-of-two scale (e8m0 code out). fp4: one code per byte here.
template <bool kFp4>
bool pack_pow2_block(const float* v, int64_t n, uint8_t* codes, uint8_t* scale_code) {
  const float amax = block_amax(v, n);
  if (!std::isfinite(amax)) return false;
  const double q_max = kFp4 ? 6.0 : 448.0;
  const double s = amax == 0 ? 1.0 : pow2_scale_at_least(double(amax), q_max);
  const int code = std::ilogb(s) + 127;
  if (code < 0 || code > 254) return false;
  *scale_code = uint8_t(code);
  const float sf = e8m0_to_float(uint8_t(code));
  for (int64_t i = 0; i < n; ++i) {
    const float q = v[i] / sf;
    const bool ok = kFp4 ? e2m1_exact_code(q, &codes[i]) : e4m3_exact_code(q, &codes[i]);
    if (!ok) return false;
    const float back = (kFp4 ? kE2M1Values[codes[i]] : e4m3_table().value[codes[i]]) * sf;
    if (!same_bits(back, v[i])) return false;
  }
  return true;
}

// e2m1 codes of n values under an e4m3 scale (the V4.1 QDQ4E rule: s = e4m3(amax / 6)).
bool pack_e4m3_scaled_fp4_block(const float* v, int64_t n, uint8_t* codes, uint8_t* scale_code) {
  const float amax = block_amax(v, n);
  if (!std::isfinite(amax)) return false;
  static constexpr float kMagnitudes[] = {6.0f, 4.0f, 3.0f, 2.0f, 1.5f, 1.0f, 0.5f};
  auto try_scale = [&](float s, uint8_t sc) {
    for (int64_t i = 0; i < n; ++i) {
      if (!e2m1_exact_code(s == 0 ? v[i] : v[i] / s, &codes[i])) return false;
      if (!same_bits(kE2M1Values[codes[i]] * s, v[i])) return false;
    }
    *scale_code = sc;
    return true;
  };
  if (amax == 0) return try_scale(0.0f, 0x00);  // every value a signed zero
  for (float c : kMagnitudes) {
    const float s = amax / c;
    uint8_t sc = 0;
    if (s > 0 && e4m3_exact_code(s, &sc) && try_scale(s, sc)) return true;
  }
  return false;
}

void put_nibbles(const uint8_t* codes, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; i += 2) out[i / 2] = uint8_t(codes[i] | (i + 1 < n ? codes[i + 1] << 4 : 0));
}

}  // namespace

KvRowFormat kv_row_format(KvRowKind kind, int64_t n_values, int64_t n_rope) {
  DI_CHECK(n_values > 0 && n_rope >= 0 && n_rope < n_values);
  KvRowFormat f;
  f.kind = kind;
  f.n_values = n_values;
  switch (kind) {
    case KvRowKind::kV4Kv:
      f.n_rope = n_rope;
      f.block = 64;
      f.n_scales = (n_values - n_rope + 63) / 64;
      f.row_bytes = ((n_values - n_rope) + 2 * n_rope + f.n_scales + 7) / 8 * 8;
      break;
    case KvRowKind::kV41Kv:
      f.block = 32;
      f.n_scales = (n_values + 31) / 32;
      f.row_bytes = n_values + f.n_scales;
      break;
    case KvRowKind::kV41Fp4:
      f.block = 16;
      f.n_scales = (n_values + 15) / 16;
      f.row_bytes = (n_values + 1) / 2 + f.n_scales;
      break;
    case KvRowKind::kFp4Key:
      f.block = 32;
      f.n_scales = (n_values + 31) / 32;
      f.row_bytes = (n_values + 1) / 2 + f.n_scales;
      break;
  }
  return f;
}

KvFormats kv_formats_of(const ModelConfig& c) {
  if (c.is_v41()) {
    return {kv_row_format(KvRowKind::kV41Kv, c.head_dim), kv_row_format(KvRowKind::kV41Fp4, c.head_dim),
            kv_row_format(KvRowKind::kFp4Key, c.index_head_dim)};
  }
  return {kv_row_format(KvRowKind::kV4Kv, c.head_dim, c.rope_head_dim),
          kv_row_format(KvRowKind::kV4Kv, c.head_dim, c.rope_head_dim), kv_row_format(KvRowKind::kFp4Key, c.index_head_dim)};
}

bool pack_kv_row(const KvRowFormat& f, const float* v, uint8_t* out) {
  const int64_t n = f.n_values - f.n_rope;  // values with element codes
  uint8_t codes[1024];
  const bool fp4 = f.kind == KvRowKind::kV41Fp4 || f.kind == KvRowKind::kFp4Key;
  const int64_t codes_bytes = fp4 ? (n + 1) / 2 : n;
  uint8_t* scales = out + codes_bytes + 2 * f.n_rope;
  for (int64_t b = 0; b < f.n_scales; ++b) {
    const int64_t b0 = b * f.block, len = std::min(f.block, n - b0);
    DI_CHECK(len <= int64_t(sizeof(codes)));
    bool ok = false;
    switch (f.kind) {
      case KvRowKind::kV4Kv:
      case KvRowKind::kV41Kv: ok = pack_pow2_block<false>(v + b0, len, out + b0, &scales[b]); break;
      case KvRowKind::kFp4Key: ok = pack_pow2_block<true>(v + b0, len, codes, &scales[b]); break;
      case KvRowKind::kV41Fp4: ok = pack_e4m3_scaled_fp4_block(v + b0, len, codes, &scales[b]); break;
    }
    if (!ok) return false;
    if (fp4) put_nibbles(codes, len, out + b0 / 2);  // blocks are even-sized, so each starts on a byte
  }
  for (int64_t i = 0; i < f.n_rope; ++i) {  // kV4Kv: bf16 rope, little endian
    const uint32_t bits = float_to_bits(v[n + i]);
    if (bits & 0xffffu) return false;
    out[n + 2 * i] = uint8_t(bits >> 16);
    out[n + 2 * i + 1] = uint8_t(bits >> 24);
  }
  std::fill(scales + f.n_scales, out + f.row_bytes, uint8_t(0));
  return true;
}

void unpack_kv_row(const KvRowFormat& f, const uint8_t* row, float* out) {
  const int64_t n = f.n_values - f.n_rope;
  switch (f.kind) {
    case KvRowKind::kV4Kv:
    case KvRowKind::kV41Kv: {
      const float* table = e4m3_table().value;
      const uint8_t* scales = row + n + 2 * f.n_rope;
      const bool simd = ops_avx512_available();
      for (int64_t b = 0; b < f.n_scales; ++b) {
        const float s = e8m0_to_float(scales[b]);
        const int64_t b0 = b * f.block, b1 = std::min(n, b0 + f.block);
        if (simd) {
          unpack_e4m3_avx512(row + b0, b1 - b0, s, out + b0);
        } else {
          for (int64_t i = b0; i < b1; ++i) out[i] = table[row[i]] * s;
        }
      }
      for (int64_t i = 0; i < f.n_rope; ++i) {
        out[n + i] = bits_to_float((uint32_t(row[n + 2 * i]) | uint32_t(row[n + 2 * i + 1]) << 8) << 16);
      }
      break;
    }
    case KvRowKind::kV41Fp4:
    case KvRowKind::kFp4Key: {
      const uint8_t* scales = row + (n + 1) / 2;
      const bool e4m3_scales = f.kind == KvRowKind::kV41Fp4;
      const bool simd = ops_avx512_available() && f.block % 2 == 0;  // every block starts at a whole byte
      for (int64_t b = 0; b < f.n_scales; ++b) {
        const float s = e4m3_scales ? e4m3_table().value[scales[b]] : e8m0_to_float(scales[b]);
        const int64_t b0 = b * f.block, b1 = std::min(n, b0 + f.block);
        if (simd) {
          unpack_e2m1_avx512(row + b0 / 2, b1 - b0, s, out + b0);
        } else {
          for (int64_t i = b0; i < b1; ++i) out[i] = kE2M1Values[(row[i / 2] >> (4 * (i & 1))) & 0xf] * s;
        }
      }
      break;
    }
  }
}

void unpack_kv_rows(const KvRowFormat& f, const uint8_t* rows, int64_t n_rows, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) unpack_kv_row(f, rows + r * f.row_bytes, out + r * f.n_values);
}

}  // namespace deepinfer
