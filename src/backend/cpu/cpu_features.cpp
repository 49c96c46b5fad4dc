#include "backend/cpu/cpu_features.h"

#include <initializer_list>

#include "core/amx.h"

namespace deepinfer {

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx512Bf16: return "avx512bf16";
    case SimdLevel::kAvx512Bf16Quant: return "avx512bf16quant";
    case SimdLevel::kAmxBf16: return "amxbf16";
  }
  return "?";
}

bool simd_level_supported(SimdLevel level) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  switch (level) {
    case SimdLevel::kScalar: return true;
    case SimdLevel::kAvx2: return avx2;
    case SimdLevel::kAvx512: return avx512;
    case SimdLevel::kAvx512Bf16: return avx512 && __builtin_cpu_supports("avx512bf16");
    case SimdLevel::kAvx512Bf16Quant:  // its FP8 decode looks codes up with vpermi2b
      return avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
    case SimdLevel::kAmxBf16:
      return avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi") && amx_usable();
  }
  return false;
#else
  return level == SimdLevel::kScalar;
#endif
}

SimdLevel best_simd_level() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (simd_level_supported(SimdLevel::kAvx512Bf16Quant) && __builtin_cpu_is("amd")) return SimdLevel::kAvx512Bf16Quant;
#endif
  for (SimdLevel level : {SimdLevel::kAvx512Bf16, SimdLevel::kAvx512, SimdLevel::kAvx2}) {
    if (simd_level_supported(level)) return level;
  }
  return SimdLevel::kScalar;
}

SimdLevel best_prompt_simd_level() {
  return simd_level_supported(SimdLevel::kAmxBf16) ? SimdLevel::kAmxBf16 : best_simd_level();
}

}  // namespace deepinfer
