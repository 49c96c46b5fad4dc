// The AVX-512 fp32 kernel family: weights decoded exactly to fp32 in registers (or into the per-thread
// tile), fp32 FMA on 16 lanes. Used on AVX-512 CPUs without BF16, and by the bf16 family's callers when
// activations are not bf16 values.
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
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif

namespace deepinfer::cpu::avx512 {

#include "backend/cpu/simd_avx512_ops.h"

inline __m512 bf16_to_f32(const uint16_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

#include "backend/cpu/fp32_family_common.h"

struct S : Avx512Ops, Fp32PvRows {
  using Elem = float;
  struct W {
    __m512 a, b;
  };
  static constexpr int64_t kChunk = 32;
  // Tile mode: 4 rows x 6 tokens = 24 accumulators, stepped one 16-lane half of a chunk at a time
  // (kParts), so that 4 + 1 operand registers leave room for them: enough independent FMA chains to keep
  // both FMA ports busy.
  static constexpr int kDirectR = 4, kDirectT = 4;
  static constexpr int kTileR = 4, kTileT = 6;
  static constexpr int kParts = 2;
  static constexpr bool kPairedV = false;
  // FP4 calls of up to 4 token blocks (an expert's share of a prefill, ~5-24 tokens) run fused (fused_panels):
  // each chunk decoded in registers and used at once by 2 rows x 12 tokens (24 accumulators, 4 weight and 2 x
  // registers), where the tile mode stored each decoded 4-row group and loaded it again for every 6-token
  // block. One core of the 2-core Ice Lake Xeon, kernel_bench FP4 2048 x 4096 from DRAM, alternating builds:
  // 5 / 7 / 9 / 10 / 13 / 16 tokens 68 / 66 / 66 / 88 / 77-81 / 88-91 -> 78 / 81 / 95 / 94 / 86 / 94 GFLOP/s;
  // alternating 512-token prefills of the V4-Flash benchmark model 60.5-64.3 -> 67.8-69.3 tokens/s. Pairs of
  // blocks, as FP8 in the other families: one-block passes of 4 rows would decode each chunk twice for 12
  // tokens, and this decode shares its two vector ports with the FMAs. FP8 keeps the tile mode (its prefill calls
  // have hundreds of tokens).
  static constexpr int kFusedRows = 2;
  static constexpr bool kFusedPairPasses = true;
  static constexpr bool fused_for(DType d) { return d == DType::kI8; }
  static void pin_w(W& w) { __asm__("" : "+v"(w.a), "+v"(w.b)); }
  static constexpr int kPvHeads = 4, kPvVectors = 4;
  // The register GEMVs prefetch every row (bf16 too) into L2, not L1 (linear_family.h, direct_kernel): this
  // family runs FP8 and FP4 on Intel's AVX-512 Xeons, where prefetches into L1 held its few fill buffers. 2-core
  // Xeon (AVX512-BF16), alternating builds: kernel_bench FP8 32768 x 1024 GEMV on one core +8-28% (two: mixed),
  // FP4 expert on two +6-15%; batch-1 decode of the V4-Flash benchmark model, three pairs, 11.96 / 12.06 / 11.81
  // -> 12.38 / 12.33 / 12.05 tokens/s (its FP8 GEMVs 21.3-21.8 -> 22.5-23.0 GB/s). Prefetching them two row
  // groups further ahead: within noise.
  static constexpr bool kDirectPrefetchToL2 = true;

  static F zero() { return _mm512_setzero_ps(); }
  static F dot(F acc, W w, W x) { return _mm512_fmadd_ps(w.b, x.b, _mm512_fmadd_ps(w.a, x.a, acc)); }
  static W load_w(const float* p) { return {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)}; }
  static W load_parts(const float* p, int64_t part_stride) { return {_mm512_loadu_ps(p), _mm512_loadu_ps(p + part_stride)}; }
  static F load_part(const float* p, int part) { return _mm512_loadu_ps(p + 16 * part); }  // part 0 = W::a
  static void store_part(float* p, W w, int part) { _mm512_storeu_ps(p, part == 0 ? w.a : w.b); }
  static void store_w(float* p, W w) {
    _mm512_storeu_ps(p, w.a);
    _mm512_storeu_ps(p + 16, w.b);
  }
  static W decode_bf16(const uint16_t* p) { return {bf16_to_f32(p), bf16_to_f32(p + 16)}; }
  static W decode_fp8(const uint8_t* p, float mult) { return {fp8_scaled(p, mult), fp8_scaled(p + 16, mult)}; }
  // The raw bits only (e4m3 value * 2^-120): the scaled-x direct mode multiplies x by 2^(s - 7) instead.
  static W decode_fp8_raw(const uint8_t* p) { return {fp8_raw(p), fp8_raw(p + 16)}; }
  static W decode_fp8_wide(const uint8_t* p, float mult) {
    return {fp8_scaled_wide(p, mult), fp8_scaled_wide(p + 16, mult)};
  }
  // 16 bytes = 32 codes: a = even elements (low nibbles), b = odd elements.
  static W decode_fp4(const uint8_t* p, uint8_t scale) {
    W w;
    fp4_values(p, scale, &w.a, &w.b);
    return w;
  }
  static bool pack_x(const float* x, int64_t xs, int64_t t0, int64_t t1, int64_t k, int64_t kp, bool fp4, void* out) {
    return pack_x_fp32<16>(x, xs, t0, t1, k, kp, fp4, out);
  }

  // PV (Fp32PvRows): the V rows and P values of pair jp.
  static W pv_v(const PvSource& s, int64_t jp, int64_t d) {
    const float* row = s.v + 2 * jp * s.stride + d;
    return {_mm512_loadu_ps(row), _mm512_loadu_ps(row + s.stride)};
  }
  static W pv_p(const PvRow* row, int64_t jp) { return {_mm512_set1_ps(row[2 * jp]), _mm512_set1_ps(row[2 * jp + 1])}; }
};

#include "backend/cpu/linear_family.h"
#include "backend/cpu/attention_family.h"
}  // namespace deepinfer::cpu::avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace deepinfer::cpu {

namespace {
namespace fam = avx512::family;
using S16 = avx512::S;
}  // namespace

const SimdKernels kSimdKernelsAvx512 = {
    SimdLevel::kAvx512, S16::kChunk, 4, S16::kPairedV, S16::kDirectT, S16::kTileT,
    fam::supports<S16>, S16::pack_x, fam::tile<S16>, fam::tile_x<S16>,
    fam::dot_tiles_packed<S16>,
    fam::attention_pack_kv<S16>, fam::attention_pack_q<S16>, fam::attention_attend<S16>,
    fam::index_scores_packed<S16>, fam::sum_squares<S16>,
};

}  // namespace deepinfer::cpu
