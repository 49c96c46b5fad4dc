#include "core/machine_ceiling.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace deepinfer {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t read_range(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i]; b += p[i + 1]; c += p[i + 2]; d += p[i + 3];
  }
  return a ^ b ^ c ^ d;
}

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iters) {
  v16f acc[12];
  const v16f m = {} , add = {};
  for (int i = 0; i < 12; ++i) acc[i] = v16f{} + float(i) * 1e-3f;
  const v16f mul = m + 0.999999f, inc = add + 1e-7f;
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = acc[i] * mul + inc;
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += acc[i][0];
  return s;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(int64_t iters) {
  v8f acc[12];
  const v8f m = {}, add = {};
  for (int i = 0; i < 12; ++i) acc[i] = v8f{} + float(i) * 1e-3f;
  const v8f mul = m + 0.999999f, inc = add + 1e-7f;
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = acc[i] * mul + inc;
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += acc[i][0];
  return s;
}

}  // namespace

std::string cpu_simd_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2+fma";
  return "scalar";
}

MachineCeiling measure_machine_ceiling(int n_threads, size_t buffer_bytes) {
  MachineCeiling m;
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  m.n_threads = n_threads;
  m.simd = cpu_simd_level();

  std::vector<uint64_t> buffer(buffer_bytes / 8);
  for (size_t i = 0; i < buffer.size(); i += 512) buffer[i] = i;  // fault every page in
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> threads;
    std::vector<uint64_t> sink(static_cast<size_t>(n_threads));
    const auto t0 = Clock::now();
    for (int t = 0; t < n_threads; ++t) {
      threads.emplace_back([&, t] {
        const size_t begin = buffer.size() * size_t(t) / size_t(n_threads), end = buffer.size() * size_t(t + 1) / size_t(n_threads);
        sink[size_t(t)] = read_range(buffer.data() + begin, end - begin);
      });
    }
    for (auto& th : threads) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(buffer_bytes) / s / 1e9);
  }
  m.read_gb_per_s = best;

  const int64_t iters = 20'000'000;
  const int lanes = m.simd == "avx512f" ? 16 : m.simd == "avx2+fma" ? 8 : 1;
  std::vector<std::thread> threads;
  std::vector<double> sink(static_cast<size_t>(n_threads));
  const auto t0 = Clock::now();
  for (int t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      if (m.simd == "avx512f") sink[size_t(t)] = fma_loop_avx512(iters);
      else if (m.simd == "avx2+fma") sink[size_t(t)] = fma_loop_avx2(iters);
    });
  }
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  m.peak_gflops = lanes > 1 ? double(iters) * 12 * lanes * 2 * n_threads / s / 1e9 : 0;
  return m;
}

}  // namespace deepinfer
