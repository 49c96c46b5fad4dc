// Measures this machine's ceilings, so benchmarks can print achieved figures beside them: sustained read
// bandwidth (all threads streaming their own slice of a buffer far larger than the caches, with the widest
// vector loads the CPU has) and peak arithmetic rates (independent register-resident chains per thread):
// fp32 FMA (the yardstick) and, where the CPU has AVX512-BF16, the bf16 dot-product rate
// (vdpbf16ps, 2 multiply-adds per fp32 lane) that the fast kernels use. Best of a few repetitions.
#pragma once

#include <cstddef>
#include <string>

namespace deepinfer {

struct MachineCeiling {
  double read_gb_per_s = 0;
  double peak_gflops = 0;       // fp32 FMA = 2 flops
  double peak_bf16_gflops = 0;  // vdpbf16ps = 4 flops per fp32 lane; 0 without AVX512-BF16
  // AMX-BF16 tiles (TDPBF16PS), 0 without them: measured by measure_machine_ceiling only, to show how much
  // compute such a CPU has beyond its vector units (the kAmxBf16 linear family uses it).
  double peak_amx_bf16_gflops = 0;
  int n_threads = 0;
  std::string simd;             // "avx512f", "avx2+fma" or "scalar"
};

// arithmetic = false: the read bandwidth only (peak_gflops and peak_bf16_gflops stay 0).
MachineCeiling measure_machine_ceiling(int n_threads, size_t buffer_bytes = size_t(1) << 30, bool arithmetic = true);
// The peak arithmetic rates alone (read_gb_per_s stays 0), a few tenths of a second: e.g. right before and
// after a timed phase, on a host whose compute rate drifts.
MachineCeiling measure_arithmetic_peak(int n_threads);
// The same read loop over n_bytes at data (e.g. a model's mapped weights): GB/s, best of reps.
double measure_read_bandwidth(const void* data, size_t n_bytes, int n_threads, int reps = 5);
std::string cpu_simd_level();

}  // namespace deepinfer
