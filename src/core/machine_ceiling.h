// Measures this machine's ceilings, so benchmarks can print achieved figures beside them: sustained
// read bandwidth (all threads streaming a buffer far larger than the caches) and peak fp32 FMA rate
// (independent FMA chains per thread, the widest vectors the CPU has).
#pragma once

#include <string>

namespace deepinfer {

struct MachineCeiling {
  double read_gb_per_s = 0;
  double peak_gflops = 0;     // fp32 FMA = 2 flops
  int n_threads = 0;
  std::string simd;           // "avx512f", "avx2+fma" or "scalar"
};

MachineCeiling measure_machine_ceiling(int n_threads, size_t buffer_bytes = size_t(1) << 30);
std::string cpu_simd_level();

}  // namespace deepinfer
