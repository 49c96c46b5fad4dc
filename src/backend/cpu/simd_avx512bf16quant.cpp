// The kAvx512Bf16Quant kernel family: the AVX512-BF16 family (simd_avx512bf16_ops.h) that also takes FP8 and
// FP4 weights, decoded exactly to bf16 and summed by vdpbf16ps. It is the best level where vdpbf16ps runs at
// twice the fp32 FMA rate (AMD Zen 4 on, whose 512-bit FMAs take two passes of 256-bit units; kernel_bench, 2
// threads: fp8 GEMM with 512 tokens ~1.8x, an FP4 expert with 12 tokens ~1.5x against the fp32 family). Its
// FP8 GEMV looks codes up with vpermi2b, so the level needs AVX512-VBMI as well (Zen 4, Ice Lake and later;
// not Cooper Lake). vdpbf16ps treats bf16 operands below 2^-126 as zero: such a term is < 2^-126 * |other
// factor|, far below the fp32 accumulation error of any sum these ops produce.
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
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma")
#endif

namespace deepinfer::cpu::avx512bf16quant {

#include "backend/cpu/simd_avx512bf16_ops.h"

#include "backend/cpu/simd_avx512bf16quant_ops.h"

#include "backend/cpu/linear_family.h"
#include "backend/cpu/attention_family.h"

}  // namespace deepinfer::cpu::avx512bf16quant

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace deepinfer::cpu {

namespace {
namespace fam = avx512bf16quant::family;
using S16 = avx512bf16quant::S;
using SQuant = avx512bf16quant::SQuant;
}  // namespace

const SimdKernels kSimdKernelsAvx512Bf16Quant = {
    SimdLevel::kAvx512Bf16Quant, S16::kChunk, 2, S16::kPairedV, S16::kDirectT, S16::kTileT,
    fam::supports<SQuant>, S16::pack_x, fam::tile<SQuant>, fam::tile_x<SQuant>,
    fam::dot_tiles_packed<S16>,
    fam::attention_pack_kv<S16>, fam::attention_pack_q<S16>, fam::attention_attend<S16>,
    fam::index_scores_packed<S16>, fam::sum_squares<S16>,
};

}  // namespace deepinfer::cpu
