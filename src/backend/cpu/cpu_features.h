// Which SIMD kernel family this CPU can run, decided at run time (the default build has no -march flags and
// must run on any x86-64). Owns only detection and naming; kernels live in linear_*.cpp, attention_cpu.cpp.
// Invariant: a level is reported supported only if every instruction set its kernels are compiled for is
// present (checked with __builtin_cpu_supports), so forcing a supported level can never fault.
#pragma once

namespace deepinfer {

enum class SimdLevel {
  kScalar,      // portable C++ (any CPU)
  kAvx2,        // avx2 + fma: fp32 FMA on 8 lanes
  kAvx512,      // avx512 f/bw/vl/dq: fp32 FMA on 16 lanes
  kAvx512Bf16,  // kAvx512 + avx512_bf16: bf16 dot products (vdpbf16ps), fp32 accumulation, for bf16 weights
                //   (FP8 / FP4 weights run on the kAvx512 family)
  kAvx512Bf16Quant,  // kAvx512Bf16 + avx512_vbmi, whose bf16 dot products also take FP8 and FP4 weights
                     //   (decoded exactly to bf16): the best level where vdpbf16ps is fast (AMD Zen 4 on)
  kAmxBf16,  // kAvx512Bf16Quant + AMX-BF16 (Intel Sapphire Rapids on), where Linux grants the tile state: its linear
             //   ops multiply the decoded bf16 weights with TDPBF16PS tiles for every token count; the other ops
             //   are kAvx512Bf16's
};

const char* simd_level_name(SimdLevel level);
bool simd_level_supported(SimdLevel level);
// The best supported level for generated tokens: kAvx512Bf16Quant where vdpbf16ps runs at twice the fp32
// FMA rate (AMD: Zen 4 measured 461 against 230 GFLOP/s on 2 cores), kAvx512Bf16 on other AVX512-BF16 CPUs
// (Intel: the reverse, 160-204 against 330-442, so FP8 and FP4 weights are faster on fp32 FMA there). Never
// kAmxBf16: its single-token decode runs at ~0.8x (the tiles need the decoded FP8 / FP4 weights stored first).
SimdLevel best_simd_level();
// The best supported level for a prompt's linear ops: kAmxBf16 where the CPU has it (a 512-token prefill 2.2-2.9x
// faster on the Xeons measured), else best_simd_level().
SimdLevel best_prompt_simd_level();

}  // namespace deepinfer
