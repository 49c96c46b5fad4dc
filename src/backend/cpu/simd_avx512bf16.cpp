// The AVX512-BF16 kernel family: bf16 weights as stored, activations / kv rows / queries packed as bf16 (the
// caller's values are bf16 already; the drivers fall back to the fp32 family otherwise), products summed by
// vdpbf16ps in fp32. kAvx512Bf16 (S) takes no FP8 or FP4 weights: linear_fast hands those to the fp32 AVX-512
// family. On Intel, vdpbf16ps retires one per ~2.1 cycles and holds both vector ports meanwhile (32 products,
// where two FMAs give 32 in one cycle), so decoding e4m3 / e2m1 codes exactly to fp32 and using FMA is faster
// there, at every token count (kernel_bench: fp8 GEMV 11.4 -> 13.4 GB/s per core, 512-token GEMM level).
// On AMD Zen 4 vdpbf16ps runs at twice the fp32 FMA rate: kAvx512Bf16Quant (simd_avx512bf16quant.cpp) also
// takes FP8 and FP4 weights. The traits struct S and the packing helpers are in simd_avx512bf16_ops.h.
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
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
#endif

namespace deepinfer::cpu::avx512bf16 {
#include "backend/cpu/simd_avx512bf16_ops.h"
#include "backend/cpu/linear_family.h"
#include "backend/cpu/attention_family.h"
}  // namespace deepinfer::cpu::avx512bf16

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace deepinfer::cpu {

namespace {
namespace fam = avx512bf16::family;
using S16 = avx512bf16::S;
}  // namespace

const SimdKernels kSimdKernelsAvx512Bf16 = {
    SimdLevel::kAvx512Bf16, S16::kChunk, 2, S16::kPairedV, S16::kDirectT, S16::kTileT,
    fam::supports<S16>, S16::pack_x, fam::tile<S16>, fam::tile_x<S16>,
    fam::dot_tiles_packed<S16>,
    fam::attention_pack_kv<S16>, fam::attention_pack_q<S16>, fam::attention_attend<S16>,
    fam::index_scores_packed<S16>, fam::sum_squares<S16>,
};

}  // namespace deepinfer::cpu
