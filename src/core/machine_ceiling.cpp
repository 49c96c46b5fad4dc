#include "core/machine_ceiling.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/amx.h"

// GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm512_undefined_* temporaries.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace deepinfer {

namespace {

using Clock = std::chrono::steady_clock;

// ---- read bandwidth: 4 independent vector accumulators, the widest loads available ----
uint64_t read_scalar(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i]; b += p[i + 1]; c += p[i + 2]; d += p[i + 3];
  }
  return a ^ b ^ c ^ d;
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_xor_si256(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_xor_si256(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return uint64_t(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint64_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a = _mm512_xor_si512(a, _mm512_loadu_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_loadu_si512(p + i + 8));
    c = _mm512_xor_si512(c, _mm512_loadu_si512(p + i + 16));
    d = _mm512_xor_si512(d, _mm512_loadu_si512(p + i + 24));
  }
  return uint64_t(_mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d))));
}

// ---- peak arithmetic: 12 independent register chains (enough to cover FMA latency x ports) ----
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1e-3f), a2 = _mm512_set1_ps(2e-3f), a3 = _mm512_set1_ps(3e-3f);
  __m512 a4 = _mm512_set1_ps(4e-3f), a5 = _mm512_set1_ps(5e-3f), a6 = _mm512_set1_ps(6e-3f), a7 = _mm512_set1_ps(7e-3f);
  __m512 a8 = _mm512_set1_ps(8e-3f), a9 = _mm512_set1_ps(9e-3f), a10 = _mm512_set1_ps(1e-2f), a11 = _mm512_set1_ps(1.1e-2f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c); a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c); a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c); a7 = _mm512_fmadd_ps(a7, m, c); a8 = _mm512_fmadd_ps(a8, m, c);
    a9 = _mm512_fmadd_ps(a9, m, c); a10 = _mm512_fmadd_ps(a10, m, c); a11 = _mm512_fmadd_ps(a11, m, c);
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                                               _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(1e-3f), a2 = _mm256_set1_ps(2e-3f), a3 = _mm256_set1_ps(3e-3f);
  __m256 a4 = _mm256_set1_ps(4e-3f), a5 = _mm256_set1_ps(5e-3f), a6 = _mm256_set1_ps(6e-3f), a7 = _mm256_set1_ps(7e-3f);
  __m256 a8 = _mm256_set1_ps(8e-3f), a9 = _mm256_set1_ps(9e-3f), a10 = _mm256_set1_ps(1e-2f), a11 = _mm256_set1_ps(1.1e-2f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c); a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c); a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c); a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c); a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                 _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)),
                                               _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11))));
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_loop_avx512(int64_t iters) {
  // Distinct starting values: twelve identical chains would be merged into one by the compiler (it did,
  // and the "peak" was then one dependent chain's rate times twelve).
  __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1e-3f), a2 = _mm512_set1_ps(2e-3f), a3 = _mm512_set1_ps(3e-3f);
  __m512 a4 = _mm512_set1_ps(4e-3f), a5 = _mm512_set1_ps(5e-3f), a6 = _mm512_set1_ps(6e-3f), a7 = _mm512_set1_ps(7e-3f);
  __m512 a8 = _mm512_set1_ps(8e-3f), a9 = _mm512_set1_ps(9e-3f), a10 = _mm512_set1_ps(1e-2f), a11 = _mm512_set1_ps(1.1e-2f);
  const __m512bh m = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3380);
  for (int64_t it = 0; it < iters; ++it) {
    a0 = _mm512_dpbf16_ps(a0, m, c); a1 = _mm512_dpbf16_ps(a1, m, c); a2 = _mm512_dpbf16_ps(a2, m, c);
    a3 = _mm512_dpbf16_ps(a3, m, c); a4 = _mm512_dpbf16_ps(a4, m, c); a5 = _mm512_dpbf16_ps(a5, m, c);
    a6 = _mm512_dpbf16_ps(a6, m, c); a7 = _mm512_dpbf16_ps(a7, m, c); a8 = _mm512_dpbf16_ps(a8, m, c);
    a9 = _mm512_dpbf16_ps(a9, m, c); a10 = _mm512_dpbf16_ps(a10, m, c); a11 = _mm512_dpbf16_ps(a11, m, c);
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                                               _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
  return _mm512_reduce_add_ps(s);
}

// AMX: one TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 fp32 sums (16 * 16 * 32
// multiply-adds). Four accumulator tiles, each instruction independent of the previous one's result.
__attribute__((target("amx-tile,amx-bf16"))) float amx_bf16_loop(int64_t iters) {
  AmxTileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.colsb[i] = 64;
    config.rows[i] = 16;
  }
  alignas(64) static const uint16_t kOperand[16 * 32] = {};  // zeros: the rate does not depend on the values
  alignas(64) float out[16 * 16];
  load_amx_tile_config(config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, kOperand, 64);
  _tile_loadd(5, kOperand, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

bool has_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

// Runs body(t) on n_threads threads at once, best wall time of `reps` repetitions.
template <typename Body>
double best_seconds(int n_threads, int reps, Body body) {
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<std::thread> threads;
    const auto t0 = Clock::now();
    for (int t = 0; t < n_threads; ++t) threads.emplace_back([&, t] { body(t); });
    for (auto& th : threads) th.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

double measure_read_bandwidth(const void* data, size_t n_bytes, int n_threads, int reps) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string simd = cpu_simd_level();
  // Whole 256-byte blocks from the first 64-byte boundary (the loops read 32 words at a time).
  const uintptr_t first = (reinterpret_cast<uintptr_t>(data) + 63) / 64 * 64;
  const uint64_t* words = reinterpret_cast<const uint64_t*>(first);
  const size_t n_words = n_bytes > first - reinterpret_cast<uintptr_t>(data)
                             ? (n_bytes - (first - reinterpret_cast<uintptr_t>(data))) / 8 / 32 * 32
                             : 0;
  if (n_words == 0) return 0.0;
  std::vector<uint64_t> sink(static_cast<size_t>(n_threads));
  const double s = best_seconds(n_threads, reps, [&](int t) {
    const size_t begin = n_words * size_t(t) / size_t(n_threads) / 32 * 32;
    const size_t end = n_words * size_t(t + 1) / size_t(n_threads) / 32 * 32;
    const uint64_t* p = words + begin;
    if (simd == "avx512f") sink[size_t(t)] = read_avx512(p, end - begin);
    else if (simd == "avx2+fma") sink[size_t(t)] = read_avx2(p, end - begin);
    else sink[size_t(t)] = read_scalar(p, end - begin);
  });
  return double(n_words * 8) / s / 1e9;
}

std::string cpu_simd_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2+fma";
  return "scalar";
}

MachineCeiling measure_machine_ceiling(int n_threads, size_t buffer_bytes, bool arithmetic) {
  MachineCeiling m;
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  m.n_threads = n_threads;
  m.simd = cpu_simd_level();

  std::vector<uint64_t> buffer(buffer_bytes / 8);
  for (size_t i = 0; i < buffer.size(); i += 512) buffer[i] = i;  // fault every page in
  m.read_gb_per_s = measure_read_bandwidth(buffer.data(), buffer.size() * 8, n_threads);

  if (!arithmetic) return m;
  const MachineCeiling peak = measure_arithmetic_peak(n_threads);
  m.peak_gflops = peak.peak_gflops;
  m.peak_bf16_gflops = peak.peak_bf16_gflops;
  if (amx_usable()) {
    const int64_t iters = 2'000'000;
    std::vector<float> fsink(static_cast<size_t>(n_threads));
    const double s = best_seconds(n_threads, 2, [&](int t) { fsink[size_t(t)] = amx_bf16_loop(iters); });
    m.peak_amx_bf16_gflops = double(iters) * 4 * 16 * 16 * 32 * 2 * n_threads / s / 1e9;
  }
  return m;
}

MachineCeiling measure_arithmetic_peak(int n_threads) {
  MachineCeiling m;
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  m.n_threads = n_threads;
  m.simd = cpu_simd_level();
  const int64_t iters = 20'000'000;
  std::vector<float> fsink(static_cast<size_t>(n_threads));
  if (m.simd != "scalar") {
    const int lanes = m.simd == "avx512f" ? 16 : 8;
    const double s = best_seconds(n_threads, 2, [&](int t) {
      fsink[size_t(t)] = m.simd == "avx512f" ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
    });
    m.peak_gflops = double(iters) * 12 * lanes * 2 * n_threads / s / 1e9;
  }
  if (has_bf16()) {
    const double s = best_seconds(n_threads, 2, [&](int t) { fsink[size_t(t)] = bf16_loop_avx512(iters); });
    m.peak_bf16_gflops = double(iters) * 12 * 16 * 4 * n_threads / s / 1e9;
  }
  return m;
}

}  // namespace deepinfer
