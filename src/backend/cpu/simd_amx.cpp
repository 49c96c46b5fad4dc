// The kAmxBf16 linear family: weights decoded exactly to bf16 (as the kAvx512Bf16Quant family decodes them) into
// 16-row A tiles, activations laid out as VNNI B tiles of 16 tokens, and TDPBF16PS sums them into 16 x 16 fp32
// tiles. The other ops of the level (attention, indexer, mHC dots) are kAvx512Bf16's.
//
// Invariant (batch invariance): every token count takes the same TDPBF16PS steps. An output element (row, token)
// is C[row][token] of one accumulator tile, which adds the 32-element chunks of K in order, one instruction per
// chunk, and an element of a tile does not depend on the tile's other rows or columns; so a token's sums are
// the same bits whether it shares a call with 0 or 500 other tokens. Sums differ from the fp32 and vdpbf16ps
// families' in the last bits (TDPBF16PS rounds differently inside a chunk), not across token counts.
//
// Why: TDPBF16PS multiplies 16 x 32 by 32 x 16 bf16 values (8192 multiply-adds) in one instruction; a 2-core
// Xeon (Sapphire Rapids class) measures 6.3-7.4 TFLOP/s with it against 450-480 for fp32 FMA, whose prefill
// GEMMs stopped at ~45% of that peak for want of L1 bandwidth (README, stop 30).
//
// Loop orders (all take the same TDPBF16PS steps per output element):
//   - bf16 weights, up to 16 tokens, whole row groups: the A tiles load straight from the weight rows, one
//     16-row group after the other;
//   - up to 16 tokens (decode, most routed experts of a prefill): one row group after the other, K in steps of
//     kStepChunks chunks, each step decoded into a small L1 buffer while the previous one is multiplied; the
//     group's accumulator stays in a tile register for all of K (FP8 groups inside one scale block carry their
//     scales on x instead, scale_x_tiles);
//   - more tokens: K panels of kPanelChunks chunks, each decoded once into L1 and multiplied with every 16-token
//     block, the blocks' accumulators saved between panels.
//
// Cost (measured, README stop 31): the decode's stores and the tile loads overlap only partly (a tile load waits
// for the store buffer to drain), so one token's GEMV of FP8 / FP4 weights runs at 0.7-0.9x the fp32 family's
// rate and a batch-1 decode step at ~0.8x; a 512-token prefill runs 2.2-2.4x faster. Hence the default fast
// backend runs prompt tokens' linear ops on this level and generated tokens on avx512bf16
// (best_prompt_simd_level); DEEPINFER_SIMD=amxbf16 runs every token here.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/simd_kernels.h"
#include "core/amx.h"
#include "core/dtypes.h"
#include "core/status.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* temporaries.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,amx-tile,amx-bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,amx-tile,amx-bf16")
#endif

namespace deepinfer::cpu::amx {

#include "backend/cpu/simd_avx512bf16_ops.h"

#include "backend/cpu/simd_avx512bf16quant_ops.h"

constexpr int64_t kChunk = 32;        // K elements per TDPBF16PS: one 64-byte A-tile row
constexpr int64_t kChunkElems = 16 * kChunk;  // one decoded 16-row A tile (1 KB)
constexpr int64_t kBlockTokens = 16;  // tokens per B tile (a 64-byte row holds 16 bf16 pairs)
constexpr int kMaxGroups = int(kTileModeRows / 16);
static_assert(kMaxGroups == 4, "four accumulator tiles: the unit's row groups");
// Chunks per decode step with up to 16 tokens: a row group's step is 4 or 8 tiles of 1 KB (L1), a row's 128
// bytes of FP8 or FP4 codes. kernel_bench, two threads, one token, FP8 / FP4 GB/s: steps of 1-2 chunks 11-16,
// 4 16-21, 8 13-18 / 18-19 (the decode's stores and the tile products overlap better in mid-sized batches).
template <DType D>
constexpr int64_t kStepChunks = D == DType::kF8E4M3 ? 4 : 8;
// Chunks per K panel with more than 16 tokens: 8 x 4 KB of A tiles, reused by every token block from L1.
constexpr int64_t kPanelChunks = 8;

// Tile registers: accumulators 0-3 (one per row group), B in 5, A alternating over 4, 6 and 7 so that a load
// need not wait for the previous product to have read its tile. (GCC's tile intrinsics paste the register
// number into their assembly text, so it is spelled out as a literal at each use.)

// Tiles for a block of n tokens: C and B have n columns of 4 bytes (fp32 sums; bf16 pairs).
void configure_tiles(int64_t n_tokens) {
  AmxTileConfig cfg;
  for (int t : {0, 1, 2, 3}) cfg.rows[t] = 16, cfg.colsb[t] = uint16_t(4 * n_tokens);
  for (int t : {4, 6, 7}) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  cfg.rows[5] = 16;
  cfg.colsb[5] = uint16_t(4 * n_tokens);
  load_amx_tile_config(cfg);
}

// One chunk of every row group: group g's A tile at a + g * group_bytes (rows a_stride bytes apart), the B tile
// at b (rows b_stride bytes apart).
template <int G>
inline void multiply_chunk(const void* a, int64_t a_stride, int64_t group_bytes, const uint16_t* b, int64_t b_stride) {
  const auto* a0 = static_cast<const uint8_t*>(a);
  _tile_loadd(5, b, b_stride);
  _tile_loadd(4, a0, a_stride);
  _tile_dpbf16ps(0, 4, 5);
  if constexpr (G > 1) {
    _tile_loadd(6, a0 + group_bytes, a_stride);
    _tile_dpbf16ps(1, 6, 5);
  }
  if constexpr (G > 2) {
    _tile_loadd(7, a0 + 2 * group_bytes, a_stride);
    _tile_dpbf16ps(2, 7, 5);
  }
  if constexpr (G > 3) {
    _tile_loadd(4, a0 + 3 * group_bytes, a_stride);
    _tile_dpbf16ps(3, 4, 5);
  }
}
// The same from decoded tiles: G tiles of one chunk, kChunkElems apart.
template <int G>
inline void multiply_chunk(const uint16_t* a, const uint16_t* b, int64_t b_stride) {
  multiply_chunk<G>(a, 64, 2 * kChunkElems, b, b_stride);
}

template <int G>
inline void zero_accumulators() {
  _tile_zero(0);
  if constexpr (G > 1) _tile_zero(1);
  if constexpr (G > 2) _tile_zero(2);
  if constexpr (G > 3) _tile_zero(3);
}

// Accumulator tile g to / from sums + g * 256 (16 rows of `stride` bytes).
template <int G>
inline void save_accumulators(float* sums, int64_t stride) {
  _tile_stored(0, sums, stride);
  if constexpr (G > 1) _tile_stored(1, sums + 256, stride);
  if constexpr (G > 2) _tile_stored(2, sums + 512, stride);
  if constexpr (G > 3) _tile_stored(3, sums + 768, stride);
}
template <int G>
inline void load_accumulators(const float* sums, int64_t stride) {
  _tile_loadd(0, sums, stride);
  if constexpr (G > 1) _tile_loadd(1, sums + 256, stride);
  if constexpr (G > 2) _tile_loadd(2, sums + 512, stride);
  if constexpr (G > 3) _tile_loadd(3, sums + 768, stride);
}

// Saved accumulators of n tokens (row r's sums at sums + (r / 16) * 256 + (r % 16) * n) into c[t * cs + r] for
// the unit's n_rows rows.
inline void scatter_sums(const float* sums, int64_t n_tokens, int64_t n_rows, float* c, int64_t cs) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < n_rows; ++r) c[t * cs + r] = sums[(r / 16) * 256 + (r % 16) * n_tokens + t];
  }
}

// Where one weight row's codes and scales are.
struct Row {
  const uint8_t* data = nullptr;
  // FP8: the row block's e8m0 bytes, chunk c's at c >> chunk_shift (2^chunk_shift chunks per block);
  // FP4: one byte per chunk.
  const uint8_t* scale = nullptr;
};
// 32 e4m3 values (their bf16 bits) times 2^(s - 127): the scale added to the exponent field of every nonzero
// value. Exact while every product stays a normal bf16: e4m3 magnitudes lie in [2^-9, 480], so for s in
// [kMinExpScale, kMaxExpScale] (a real checkpoint's are about 115..121).
constexpr int kMinExpScale = 10, kMaxExpScale = 245;
inline S::W scale_exponents(S::W w, uint8_t s) {
  const __m512i v = (__m512i)w;
  const __mmask32 nonzero = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF));
  return (S::W)_mm512_mask_add_epi16(v, nonzero, v, _mm512_set1_epi16(int16_t((int(s) - 127) * 128)));
}

// FP8 chunk ch of a row: the exponent add, or (a scale byte outside that range) value times scale in fp32
// first, whose result vdpbf16ps / TDPBF16PS read as zero below 2^-126.
inline S::W fp8_chunk(S::W raw, const uint8_t* codes, uint8_t s) {
  if (s >= kMinExpScale && s <= kMaxExpScale) [[likely]] return scale_exponents(raw, s);
  return SQuant::decode_fp8_wide(codes, kE8m0Values[s]);
}

// 16 bytes = 32 e2m1 codes times the chunk's scale, as bf16, in the order fp4_element gives: the bytes broadcast
// to the four 128-bit lanes (a load, no shuffle), lane l shifted right by 4 l bits per word, and one vpermw looks
// the low five bits of every word up in the scale's row of kE2m1Bf16 (which repeats its 16 values, so the fifth
// bit does not matter). One shuffle per chunk where SQuant::decode_fp4 takes three: on Intel's cores every
// 512-bit shuffle queues on port 5, which bounded the FP4 decode.
inline S::W decode_fp4(const uint8_t* p, uint8_t scale) {
  const __m512i bytes = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i shifts = _mm512_set_epi64(0x000C000C000C000Cll, 0x000C000C000C000Cll, 0x0008000800080008ll,
                                          0x0008000800080008ll, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
  const __m512i table = _mm512_load_si512(kE2m1Bf16[scale].data());
  return (S::W)_mm512_permutexvar_epi16(_mm512_srlv_epi16(bytes, shifts), table);
}
// The element of a chunk that decode_fp4 puts at position j: word i of lane l (j = 8 l + i) holds nibble l of the
// 16 bytes' word i, i.e. element 4 i + l (byte b holds elements 2 b and 2 b + 1 in its low and high nibble).
// tile_x lays x out in the same order for FP4 weights.
constexpr int64_t fp4_element(int64_t j) { return 4 * (j % 8) + j / 8; }

// Decodes chunks [c0, c1) of one row into dst, chunk c at dst + (c - c0) * chunk_stride. The last chunk of a
// bf16 row may be partial (K % 32): its missing columns are zeros, as are x's. The row's pointers come by value:
// read through the Row, they were reloaded after every store (dst might have aliased them), a third of the FP4
// loop's instructions. kRawFp8: FP8 codes as their values alone (the scales ride on x, see scale_x_tiles).
template <DType D, bool kRawFp8 = false>
inline void decode_row(const uint8_t* data, const uint8_t* scale, int64_t K, int chunk_shift, int64_t c0, int64_t c1,
                       uint16_t* dst, int64_t chunk_stride) {
  if constexpr (D == DType::kBF16) {
    const auto* p = reinterpret_cast<const uint16_t*>(data);
    for (int64_t c = c0; c < c1; ++c, dst += chunk_stride) {
      const int64_t k = c * kChunk;
      const __mmask32 m = k + kChunk <= K ? ~__mmask32(0) : __mmask32((uint64_t(1) << (K - k)) - 1);
      _mm512_storeu_si512(dst, _mm512_maskz_loadu_epi16(m, p + k));
    }
  } else if constexpr (D == DType::kI8) {
#pragma GCC unroll 4
    for (int64_t c = c0; c < c1; ++c, dst += chunk_stride) {
      S::store_w(dst, decode_fp4(data + c * kChunk / 2, scale[c]));
    }
  } else {
    int64_t c = c0;
    for (; c + 2 <= c1; c += 2, dst += 2 * chunk_stride) {  // 64 codes per table lookup
      const uint8_t* codes = data + c * kChunk;
      S::W w0, w1;
      SQuant::decode_fp8_raw_pair(codes, &w0, &w1);
      if constexpr (kRawFp8) {
        S::store_w(dst, w0);
        S::store_w(dst + chunk_stride, w1);
      } else {
        S::store_w(dst, fp8_chunk(w0, codes, scale[c >> chunk_shift]));
        S::store_w(dst + chunk_stride, fp8_chunk(w1, codes + kChunk, scale[(c + 1) >> chunk_shift]));
      }
    }
    if (c < c1) {
      const uint8_t* codes = data + c * kChunk;
      const S::W raw = SQuant::decode_fp8_raw(codes);
      S::store_w(dst, kRawFp8 ? raw : fp8_chunk(raw, codes, scale[c >> chunk_shift]));
    }
  }
}

// Chunks [c0, c1) of the unit's rows into a: [chunk - c0][group][16 rows][32]; rows past n_rows are zeros.
template <DType D, bool kRawFp8 = false>
void decode_unit(const Row* rows, int64_t n_rows, int G, int64_t K, int chunk_shift, int64_t c0, int64_t c1,
                 uint16_t* a) {
  const int64_t chunk_stride = G * kChunkElems;
  for (int64_t r = 0; r < 16 * G; ++r) {
    uint16_t* dst = a + (r / 16) * kChunkElems + (r % 16) * kChunk;
    if (r < n_rows) {
      decode_row<D, kRawFp8>(rows[r].data, rows[r].scale, K, chunk_shift, c0, c1, dst, chunk_stride);
    } else {
      for (int64_t c = c0; c < c1; ++c) std::memset(dst + (c - c0) * chunk_stride, 0, kChunk * 2);
    }
  }
}

struct Scratch {
  AlignedVector<uint16_t> a;  // decoded A tiles
  AlignedVector<float> c;     // accumulators between K panels: [token block][group][16 x 16]
  AlignedVector<uint16_t> xs;  // FP8: x's B tiles times a scale block's scales (scale_x_tiles)
  const uint8_t* xs_scale = nullptr;  // the scale row and call they were made for, and whether they are exact
  uint64_t xs_call = ~uint64_t(0);
  bool xs_ok = false;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The B tiles of token block b: x.tiled from token 16 b on, [chunk][16 pairs][n tokens][2] (see tile_x).
inline const uint16_t* block_x(const PackedX& x, int64_t b) {
  return static_cast<const uint16_t*>(x.tiled) + b * kBlockTokens * x.k_padded;
}

// FP8 weights with up to 16 tokens: a row group inside one scale block (128 rows) has one scale per chunk, the
// same for all its rows, so it can multiply x instead: x' = x * 2^(s - 127) per chunk of the B tiles (xb, n_chunks
// chunks of 32 x T values), and the weights decode to their code values alone, two vector operations fewer per
// 32 weights. Every product w * x' is the same exact fp32 value as (w * 2^(s - 127)) * x, so the sums are the
// same bits as the other paths'. False (out is then not to be used) unless every x' is zero or a normal bf16 and
// every scale byte lies where the weights' own decode is exact (fp8_chunk).
bool scale_x_tiles(const uint16_t* xb, int64_t T, int64_t n_chunks, const uint8_t* scale, int chunk_shift,
                   uint16_t* out) {
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    const uint8_t sb = scale[ch >> chunk_shift];
    if (sb < kMinExpScale || sb > kMaxExpScale) return false;
    const __m512 m = _mm512_set1_ps(kE8m0Values[sb]);
    const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
    __mmask16 bad = 0;
    for (int64_t i = ch * kChunk * T, e = i + kChunk * T; i < e; i += 16) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + i));
      const __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)), m);
      const __m512i bits = _mm512_castps_si512(f);
      bad = __mmask16(bad | _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exp_mask), exp_mask));  // overflow
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), to_bf16_bits(f, &bad));
    }
    if (bad) return false;
  }
  return true;
}

// bf16 weights in whole row groups and chunks need no decode: the A tiles load straight from the rows (the first
// of a unit's rows at w, row_bytes apart), one row group at a time, prefetched kDirectPrefetchChunks ahead.
// Sixteen row streams at a time, not the unit's 64: kernel_bench, the whole 1 GB head on two threads, 64 streams
// 17.8-22 GB/s, 32 25.8, 16 28.5 (the avx512bf16 family: 28.6).
constexpr int64_t kDirectPrefetchChunks = 8;
template <int G>
void tile_rows_bf16(const uint8_t* w, int64_t row_bytes, const PackedX& x, float* c, int64_t cs) {
  const int64_t n_chunks = x.k_padded / kChunk, T = x.n_tokens;
  const uint16_t* xb = block_x(x, 0);
  alignas(64) float sums[kMaxGroups * 256];
  configure_tiles(T);
  for (int g = 0; g < G; ++g) {
    const uint8_t* wg = w + g * 16 * row_bytes;
    zero_accumulators<1>();
    for (int64_t ch = 0; ch < n_chunks; ++ch) {
      if (ch + kDirectPrefetchChunks < n_chunks) {
        const uint8_t* ahead = wg + (ch + kDirectPrefetchChunks) * 2 * kChunk;
        for (int64_t r = 0; r < 16; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + r * row_bytes), _MM_HINT_T0);
        }
      }
      multiply_chunk<1>(wg + ch * 2 * kChunk, row_bytes, 0, xb + ch * kChunk * T, 4 * T);
    }
    save_accumulators<1>(sums + g * 256, 4 * T);
  }
  scatter_sums(sums, T, 16 * G, c, cs);
  _tile_release();
}

// weight_end: one past the matrix's last byte (the prefetches stop there); rows are row_bytes apart.
template <DType D, int G>
void tile_rows(const Row* rows, int64_t n_rows, int64_t K, int chunk_shift, int64_t row_bytes,
               const uint8_t* weight_end, const PackedX& x, float* c, int64_t cs) {
  if constexpr (D == DType::kBF16) {
    if (x.n_tokens <= kBlockTokens && n_rows == 16 * G && K % kChunk == 0) {
      return tile_rows_bf16<G>(rows[0].data, row_bytes, x, c, cs);
    }
  }
  const int64_t n_chunks = x.k_padded / kChunk, T = x.n_tokens;
  Scratch& s = scratch();
  if (T <= kBlockTokens) {
    // One row group at a time (16 row streams, not 64), its steps double-buffered: step i + 1 is decoded
    // before step i is multiplied. Two groups at a time (two independent accumulator chains) measured slower:
    // kernel_bench, one token, two threads, FP8 19-21 -> 17-18 GB/s, FP4 17.5 -> 13.1.
    const uint16_t* xb = block_x(x, 0);
    constexpr int64_t kGroupStepElems = kStepChunks<D> * kChunkElems;
    if (s.a.size() < size_t(2 * kGroupStepElems)) s.a.resize(size_t(2 * kGroupStepElems));
    alignas(64) float sums[kMaxGroups * 256];
    const int64_t n_steps = (n_chunks + kStepChunks<D> - 1) / kStepChunks<D>;
    configure_tiles(T);
    for (int g = 0; g < G; ++g) {
      const Row* rg = rows + 16 * g;
      const int64_t ng = std::min<int64_t>(16, n_rows - 16 * g);
      // The next 16 rows (contiguous bytes; past the unit's last group, the next unit's first rows, which the
      // same thread usually takes next) go to L2 a slice per step, one sequential stream.
      const uint8_t* next = rows[0].data + (16 * g + 16) * row_bytes;
      const int64_t next_bytes = std::max<int64_t>(0, std::min<int64_t>(16 * row_bytes, weight_end - next));
      const int64_t slice = (next_bytes / n_steps + 63) / 64 * 64;
      // FP8: the scales onto x when the group lies in one scale block (rows of a block share the scale row);
      // x' is kept for the next groups of the same block.
      const uint16_t* bx = xb;
      bool raw = false;
      if constexpr (D == DType::kF8E4M3) {
        if (rg[0].scale == rg[ng - 1].scale) {
          if (s.xs_scale != rg[0].scale || s.xs_call != x.call_id) {
            if (s.xs.size() < size_t(T * x.k_padded)) s.xs.resize(size_t(T * x.k_padded));
            s.xs_ok = scale_x_tiles(xb, T, n_chunks, rg[0].scale, chunk_shift, s.xs.data());
            s.xs_scale = rg[0].scale;
            s.xs_call = x.call_id;
          }
          raw = s.xs_ok;
          if (raw) bx = s.xs.data();
        }
      }
      auto decode = [&](int64_t d0, int64_t d1, uint16_t* dst) {
        if (raw) decode_unit<D, true>(rg, ng, 1, K, chunk_shift, d0, d1, dst);
        else decode_unit<D>(rg, ng, 1, K, chunk_shift, d0, d1, dst);
      };
      zero_accumulators<1>();
      decode(0, std::min(n_chunks, kStepChunks<D>), s.a.data());
      for (int64_t c0 = 0, i = 0; c0 < n_chunks; c0 += kStepChunks<D>, ++i) {
        const int64_t c1 = std::min(n_chunks, c0 + kStepChunks<D>);
        const uint16_t* a = s.a.data() + (i % 2) * kGroupStepElems;
        for (int64_t b = i * slice, e = std::min(next_bytes, b + slice); b < e; b += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next + b), _MM_HINT_T1);
        }
        if (c1 < n_chunks) {
          decode(c1, std::min(n_chunks, c1 + kStepChunks<D>), s.a.data() + ((i + 1) % 2) * kGroupStepElems);
        }
        for (int64_t ch = c0; ch < c1; ++ch) {
          multiply_chunk<1>(a + (ch - c0) * kChunkElems, bx + ch * kChunk * T, 4 * T);
        }
      }
      save_accumulators<1>(sums + g * 256, 4 * T);
    }
    scatter_sums(sums, T, n_rows, c, cs);
  } else {
    // K panels of kPanelChunks chunks: each is decoded once into L1 and multiplied with every token block, whose
    // accumulators go to s.c between panels (tile stores and loads copy the fp32 bits: the same sums as tiles
    // held for all of K). Decoding the whole unit first left the A tiles in L2, and tile loads from L2 ran at a
    // third of the rate from L1.
    const int64_t n_blocks = (T + kBlockTokens - 1) / kBlockTokens;
    constexpr int64_t kPanelElems = kPanelChunks * G * kChunkElems;
    if (s.a.size() < size_t(kPanelElems)) s.a.resize(size_t(kPanelElems));
    if (s.c.size() < size_t(n_blocks * G * 256)) s.c.resize(size_t(n_blocks * G * 256));
    int64_t configured = 0;
    for (int64_t c0 = 0; c0 < n_chunks; c0 += kPanelChunks) {
      const int64_t c1 = std::min(n_chunks, c0 + kPanelChunks);
      decode_unit<D>(rows, n_rows, G, K, chunk_shift, c0, c1, s.a.data());
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t nb = std::min(kBlockTokens, T - b * kBlockTokens);
        if (nb != configured) configure_tiles(configured = nb);
        float* cb = s.c.data() + b * G * 256;
        if (c0 == 0) zero_accumulators<G>();
        else load_accumulators<G>(cb, 4 * nb);
        const uint16_t* xb = block_x(x, b);
        for (int64_t ch = c0; ch < c1; ++ch) {
          multiply_chunk<G>(s.a.data() + (ch - c0) * G * kChunkElems, xb + ch * kChunk * nb, 4 * nb);
        }
        save_accumulators<G>(cb, 4 * nb);
      }
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t nb = std::min(kBlockTokens, T - b * kBlockTokens);
      scatter_sums(s.c.data() + b * G * 256, nb, n_rows, c + b * kBlockTokens * cs, cs);
    }
  }
  _tile_release();
}

template <DType D>
void tile_dtype(const LinearWeight& w, int64_t row0, int64_t n_rows, const PackedX& x, float* c, int64_t cs) {
  Row rows[kTileModeRows];
  const int64_t K = w.n_in, n_kb = w.block > 0 ? (K + w.block - 1) / w.block : 0;
  const int chunk_shift = w.block >= kChunk ? std::countr_zero(uint64_t(w.block / kChunk)) : 0;
  const uint8_t* end = w.data + w.n_out * w.row_bytes();
  for (int64_t i = 0; i < n_rows; ++i) {
    rows[i].data = w.data + (row0 + i) * w.row_bytes();
    if constexpr (D == DType::kF8E4M3) rows[i].scale = w.scale + (row0 + i) / w.block * n_kb;
    if constexpr (D == DType::kI8) rows[i].scale = w.scale + (row0 + i) * (K / 32);
  }
  switch ((n_rows + 15) / 16) {
    case 1: return tile_rows<D, 1>(rows, n_rows, K, chunk_shift, w.row_bytes(), end, x, c, cs);
    case 2: return tile_rows<D, 2>(rows, n_rows, K, chunk_shift, w.row_bytes(), end, x, c, cs);
    case 3: return tile_rows<D, 3>(rows, n_rows, K, chunk_shift, w.row_bytes(), end, x, c, cs);
    default: return tile_rows<D, 4>(rows, n_rows, K, chunk_shift, w.row_bytes(), end, x, c, cs);
  }
}

void tile(const LinearWeight& w, int64_t row0, int64_t n_rows, const PackedX& x, float* c, int64_t cs) {
  DI_CHECK(n_rows > 0 && n_rows <= kTileModeRows && x.tiled != nullptr);
  switch (w.dtype) {
    case DType::kBF16: return tile_dtype<DType::kBF16>(w, row0, n_rows, x, c, cs);
    case DType::kF8E4M3: return tile_dtype<DType::kF8E4M3>(w, row0, n_rows, x, c, cs);
    case DType::kI8: return tile_dtype<DType::kI8>(w, row0, n_rows, x, c, cs);
    default: DI_CHECK_MSG(false, "amx family: unsupported weight dtype");
  }
}

// Token blocks [b0, b1) of the packed x in the B-tile layout: block b (n tokens, 16 but for the last) from
// element 16 b * k_padded on, chunk ch at + ch * 32 n, pair p of token t at + (p n + t) * 2. Each chunk's tile is
// the 16 x n transpose of its tokens' 16 bf16 pairs; for FP4 weights the chunk's elements are first put in the
// order decode_fp4 gives (fp4_element).
void tile_x(const PackedX& x, int64_t b0, int64_t b1, void* out) {
  alignas(64) uint16_t order[kChunk];  // position j of a chunk <- element order[j]
  for (int64_t j = 0; j < kChunk; ++j) order[j] = uint16_t(x.weight_dtype == DType::kI8 ? fp4_element(j) : j);
  const __m512i perm = _mm512_load_si512(order);
  const __m512i pair = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const auto* src = static_cast<const uint16_t*>(x.data);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = b * kBlockTokens, n = std::min(kBlockTokens, x.n_tokens - t0);
    const __m512i offsets = _mm512_mullo_epi32(pair, _mm512_set1_epi32(int(n)));  // pair p at p n
    auto* dst = reinterpret_cast<int*>(static_cast<uint16_t*>(out) + t0 * x.k_padded);
    for (int64_t t = 0; t < n; ++t) {
      const uint16_t* row = src + (t0 + t) * x.stride;
      for (int64_t k = 0; k < x.k_padded; k += kChunk) {
        const __m512i v = _mm512_permutexvar_epi16(perm, _mm512_loadu_si512(row + k));
        _mm512_i32scatter_epi32(dst + k / 2 * n + t, offsets, v, 4);
      }
    }
  }
}

// x in plain order (tile_x reorders it for FP4 weights).
bool pack_x(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t k, int64_t out_stride, bool /*fp4*/,
            void* out) {
  return pack_x_bf16(x, x_stride, t0, t1, k, out_stride, false, out);
}

bool supports(const LinearWeight& w) {
  switch (w.dtype) {
    case DType::kBF16: return true;
    case DType::kF8E4M3:  // a power-of-two number of chunks per scale block (chunk c's scale at c >> shift)
      return w.block > 0 && w.block % kChunk == 0 && std::has_single_bit(uint64_t(w.block / kChunk)) &&
             w.n_in % kChunk == 0;
    case DType::kI8: return w.n_in % kChunk == 0;
    default: return false;
  }
}

}  // namespace deepinfer::cpu::amx

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace deepinfer::cpu {

const SimdKernels& amx_simd_kernels() {
  static const SimdKernels kernels = [] {
    SimdKernels k = kSimdKernelsAvx512Bf16;  // attention, indexer and mHC dots: the same packed layouts
    k.level = SimdLevel::kAmxBf16;
    k.chunk = amx::kChunk;
    k.direct_tokens = 0;  // every call takes the B-tile layout (tile_x)
    k.tile_token_block = amx::kBlockTokens;
    k.supports = amx::supports;
    k.pack_x = amx::pack_x;
    k.tile = amx::tile;
    k.tile_x = amx::tile_x;
    return k;
  }();
  return kernels;
}

}  // namespace deepinfer::cpu
