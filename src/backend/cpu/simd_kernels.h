// The per-ISA kernel table of the fast backend: one SimdKernels per SimdLevel (simd_avx2.cpp,
// simd_avx512.cpp, simd_avx512bf16.cpp, simd_avx512bf16quant.cpp instantiate linear_family.h / attention_family.h in their target
// region; simd_scalar.cpp is portable C++). The drivers (linear_cpu.cpp; attention_cpu.cpp for sparse
// attention, indexer scores and mHC mixes) own threading, layouts and epilogues; a table entry owns only
// arithmetic on the slice it is given. Weights are decoded in registers (few tokens: "direct" mode) or
// into one small per-thread tile of kRowTile rows (many tokens: "tile" mode, reused by every block of
// tokens); a weight matrix is never expanded in memory. Accumulation is fp32 everywhere.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "core/aligned_vector.h"
#include "model/weights.h"

namespace deepinfer::cpu {

constexpr int64_t kRowTile = 16;  // weight rows per linear work unit: one thread decodes and owns them
// Tile mode's work unit: more rows share each pass over x, which for a prefill is megabytes that stream from
// L3 once per unit (with 16 rows that stream, not the FMAs, set the pace of a 512-token GEMM).
constexpr int64_t kTileModeRows = 64;

// Activations of one linear call packed for one family: [n_tokens, k_padded] elements (fp32, or bf16 bits
// for the bf16 family), zero padded past K; for fp4 weights each chunk holds its even elements first,
// then its odd ones (the order in which the packed nibbles decode).
struct PackedX {
  const void* data = nullptr;
  int64_t n_tokens = 0;
  int64_t k_padded = 0;
  int64_t stride = 0;  // elements between token rows (row_stride(k_padded))
  uint64_t call_id = 0;  // distinct per linear call: keys per-call caches derived from x
  DType weight_dtype = DType::kBF16;  // the call's weights: their chain count orders the tiled x (tile_x)
  // Tile mode (more than the family's direct_tokens): the same values interleaved by token blocks (tile_x);
  // nullptr otherwise.
  const void* tiled = nullptr;
};

// Row stride of packed rows and tiles: one cache line more than the padded length, so that rows of
// power-of-two length do not all map to the same L1 sets (4 KiB aliasing thrashed the tile kernel).
constexpr int64_t row_stride(int64_t k_padded, size_t elem_bytes) { return k_padded + int64_t(64 / elem_bytes); }

// One query token's sparse attention laid out by the driver: the non-empty slots compacted per 64-slot
// block ("segment", blocks without a non-empty slot dropped), each segment padded to an even length
// with nullptr rows (P = 0), and the buffers the family packs into.
struct AttentionLayout {
  const float* const* rows = nullptr;  // [n_rows] K = V rows of head_dim values; nullptr = pad
  int64_t n_rows = 0;                  // even
  const int64_t* seg_begin = nullptr;  // [n_seg + 1], even offsets
  const int64_t* seg_valid = nullptr;  // [n_seg] non-pad rows at the start of each segment (>= 1)
  int64_t n_seg = 0;
  const float* q = nullptr;            // [n_heads, head_dim]
  int64_t n_heads = 0, head_dim = 0;
  int64_t k_padded = 0;                // head_dim rounded up to the family's chunk
  int64_t stride = 0;                  // row_stride(k_padded) of k_packed / q_packed rows
  const float* sink = nullptr;         // [n_heads]
  float scale = 0;
  bool running_max = true;
  float* out = nullptr;                // [n_heads, head_dim]
  void* k_packed = nullptr;            // [round_up(n_rows, 4), stride] elements
  void* v_packed = nullptr;            // bf16 family: [n_rows / 2, head_dim] (j, j+1) bf16 pairs
  void* q_packed = nullptr;            // [n_heads, stride] elements
};

struct SimdKernels {
  SimdLevel level = SimdLevel::kScalar;
  int64_t chunk = 1;          // k elements per step; k_padded is a multiple of it
  size_t elem_bytes = 4;      // bytes per packed element (fp32, or bf16 bits)
  bool paired_v = false;      // attention packs V as bf16 pairs
  int64_t direct_tokens = 0;  // linear calls with more tokens run in tile mode, on PackedX::tiled
  int64_t tile_token_block = 0;  // tokens per block of the tiled layout

  // ---- linear ----
  // Whether this family handles the weight (dtype, e4m3 block a multiple of chunk).
  bool (*supports)(const LinearWeight& w) = nullptr;
  // Packs tokens [t0, t1) of x [*, x_stride] (first k values each) into out rows of out_stride elements
  // (zero padded past k). Returns false if some value cannot be packed exactly (bf16 family: a value that
  // is not a normal bf16).
  bool (*pack_x)(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t k, int64_t out_stride,
                 bool fp4_order, void* out) = nullptr;
  // c[t * c_stride + i] = sum_k x[t, k] * W[row0 + i, k] for every token of x and i < n_rows, at most kRowTile
  // rows, or kTileModeRows in tile mode (more than direct_tokens tokens).
  void (*tile)(const LinearWeight& w, int64_t row0, int64_t n_rows, const PackedX& x, float* c,
               int64_t c_stride) = nullptr;
  // Token blocks [b0, b1) of x (its plain rows) interleaved into out, laid out from token 0 for PackedX::tiled
  // (n_tokens * k_padded elements); nullptr: the family reads the plain rows in every mode.
  void (*tile_x)(const PackedX& x, int64_t b0, int64_t b1, void* out) = nullptr;

  // ---- dot products of packed rows (indexer, mHC): c[t * cs + r] = sum_k x[t, k] * w[r, k] ----
  // w [*, w_stride] holds round_up(n_rows, 4) readable rows; x [n_tokens, x_stride]; k_padded elements each.
  void (*dot_tiles)(const void* w, int64_t w_stride, int64_t n_rows, const void* x, int64_t x_stride,
                    int64_t n_tokens, int64_t k_padded, float* c, int64_t cs) = nullptr;

  // ---- sparse attention (one token) ----
  bool (*attention_pack_kv)(const AttentionLayout& a, int64_t r0, int64_t r1) = nullptr;  // r0, r1 even
  bool (*attention_pack_q)(const AttentionLayout& a, int64_t h0, int64_t h1) = nullptr;
  void (*attention_attend)(const AttentionLayout& a, int64_t h0, int64_t h1) = nullptr;

  // ---- indexer scores for keys [j0, j1) of packed keys / queries (rows of `stride` elements) ----
  // dots is scratch of [n_heads, j1 - j0].
  void (*index_scores)(const void* keys, const void* q, const float* weights, int64_t n_heads, int64_t k_padded,
                       int64_t stride, int64_t j0, int64_t j1, float* dots, float* scores) = nullptr;
  float (*sum_squares)(const float* x, int64_t n) = nullptr;
};

// The table of a level; the level must be supported by this CPU.
const SimdKernels& simd_kernels(SimdLevel level);
// The fp32 family of the level's width (the AVX-512 one for the bf16 levels; the level's own otherwise): it takes
// the weights and activations the bf16 family does not (FP8 and FP4 weights below kAvx512Bf16Quant, activations
// that are not bf16 values).
const SimdKernels& fp32_simd_kernels(SimdLevel level);

extern const SimdKernels kSimdKernelsScalar;
extern const SimdKernels kSimdKernelsAvx2;
extern const SimdKernels kSimdKernelsAvx512;
extern const SimdKernels kSimdKernelsAvx512Bf16;
extern const SimdKernels kSimdKernelsAvx512Bf16Quant;
// The kAmxBf16 table (simd_amx.cpp): kSimdKernelsAvx512Bf16 with the AMX linear family.
const SimdKernels& amx_simd_kernels();

// e8m0 byte -> its float value (2^(byte-127); byte 0 = 2^-127, 255 = NaN).
extern const std::array<float, 256> kE8m0Values;
// e8m0 byte -> the 16 e2m1 code values times that scale (code 0..15: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the
// negatives), each the fp32 product code value * kE8m0Values[byte]; 64-byte aligned rows.
struct alignas(64) E2m1ScaledRow : std::array<float, 16> {};
extern const std::array<E2m1ScaledRow, 256> kE2m1Scaled;
// The same values as bf16 bits for vpermw lookups: entries 0-15 are kE2m1Scaled's 16 (every one is a bf16
// value: at most two significant bits), 16-31 repeat them, so that a byte's low five bits index it as its
// low nibble alone. An fp32 value below 2^-126 becomes a signed zero (vdpbf16ps treats such operands as zero).
struct alignas(64) E2m1Bf16Row : std::array<uint16_t, 32> {};
extern const std::array<E2m1Bf16Row, 256> kE2m1Bf16;
// e4m3 magnitude (code & 0x7F) -> the bf16 bits of its value (0, 2^-9 .. 448), as high and low bytes for
// byte lookups (vpermi2b). Magnitude 127 (NaN in e4m3) is 480, as the fp32 families' bit-shift decode reads
// it, so that every mode gives the same sums.
struct alignas(64) E4m3Bf16Bytes {
  std::array<uint8_t, 128> hi, lo;
};
extern const E4m3Bf16Bytes kE4m3Bf16;

}  // namespace deepinfer::cpu
