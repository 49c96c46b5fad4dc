// Micro-benchmarks of the fast linear op at V4-Flash shapes, per SIMD level: decode GEMVs over weight sets
// larger than the last-level cache (so they stream from DRAM like a real decode step) and prefill GEMMs.
// Counters: weight bytes streamed per second and FLOP/s (2 per multiply-add); compare them with the
// machine's ceilings printed by `deepinfer bench`.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/fast_backend.h"
#include "core/dtypes.h"
#include "model/weights.h"

namespace deepinfer {
namespace {

struct StoredWeights {
  std::vector<uint8_t> data, scale;
  std::vector<LinearWeight> mats;  // views, one per copy
  int64_t bytes_per_mat = 0;
};

// n_copies matrices [n, k] of one dtype in one buffer (copies make the working set exceed the caches).
StoredWeights make_weights(DType dtype, int64_t n, int64_t k, int n_copies) {
  StoredWeights s;
  std::mt19937 rng(7);
  const int block = 128;
  const int64_t data_bytes = dtype == DType::kBF16 ? n * k * 2 : dtype == DType::kF8E4M3 ? n * k : n * k / 2;
  const int64_t scale_bytes = dtype == DType::kF8E4M3 ? ((n + block - 1) / block) * ((k + block - 1) / block)
                              : dtype == DType::kI8   ? n * k / 32
                                                      : 0;
  s.data.resize(size_t(data_bytes * n_copies));
  s.scale.resize(size_t(scale_bytes * n_copies) + 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : s.data) {
    b = uint8_t(byte(rng));
    if (dtype != DType::kF8E4M3) continue;
    if ((b & 0x7F) == 0x7F) b = uint8_t(b - 1);  // no NaN codes
    // No subnormal codes either: the golden and benchmark checkpoints have ~0.02% of them, while random bytes
    // (6%) put one in most vectors, each a denormal assist in the fp32 families' raw-bits decode.
    if ((b & 0x78) == 0 && (b & 0x07) != 0) b = uint8_t(b | 0x08);
  }
  if (dtype == DType::kBF16) {
    auto* p = reinterpret_cast<uint16_t*>(s.data.data());
    for (int64_t i = 0; i < data_bytes / 2 * n_copies; ++i) p[i] = uint16_t(0x3c00 + (p[i] & 0x3ff));
  }
  for (auto& b : s.scale) b = uint8_t(118 + byte(rng) % 4);
  for (int c = 0; c < n_copies; ++c) {
    s.mats.push_back(LinearWeight{dtype, n, k, s.data.data() + c * data_bytes,
                                  scale_bytes ? s.scale.data() + c * scale_bytes : nullptr, block});
  }
  s.bytes_per_mat = data_bytes + scale_bytes;
  return s;
}

// args: level, dtype, n, k, tokens, copies, threads (0 = all)
void BM_Linear(benchmark::State& state) {
  const auto level = SimdLevel(state.range(0));
  if (!simd_level_supported(level)) {
    state.SkipWithError("SIMD level not supported by this CPU");
    return;
  }
  const auto dtype = DType(state.range(1));
  const int64_t n = state.range(2), k = state.range(3), T = state.range(4);
  const int copies = int(state.range(5));
  StoredWeights w = make_weights(dtype, n, k, copies);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  std::vector<float> x(size_t(T * k)), out(size_t(T * n));
  for (auto& v : x) v = round_bf16_from_float(dist(rng));
  auto backend = make_fast_backend_with_level(int(state.range(6)), level);
  size_t i = 0;
  for (auto _ : state) {
    const LinearWeight& m = w.mats[i++ % w.mats.size()];
    backend->linear({x.data(), k, T, &m, 0, n, Epilogue::kBf16, nullptr, out.data(), n});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(simd_level_name(level)) + " " + dtype_name(dtype));
  state.counters["weight_GB/s"] = benchmark::Counter(double(w.bytes_per_mat) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n * k * T) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

constexpr int64_t kBf16 = int64_t(DType::kBF16), kFp8 = int64_t(DType::kF8E4M3), kFp4 = int64_t(DType::kI8);

void decode_args(benchmark::internal::Benchmark* b) {
  for (int64_t level = 0; level < 4; ++level) {
    for (int64_t threads : {1, 0}) {
      b->Args({level, kFp8, 32768, 1024, 1, 4, threads});    // wq_b: 32 MB per copy
      b->Args({level, kFp4, 2048, 4096, 1, 32, threads});    // routed expert w1: 4 MB per copy
      b->Args({level, kBf16, 16384, 4096, 1, 2, threads});   // head slice: 128 MB per copy
    }
  }
  // Level 3 (Intel AVX512-BF16 CPUs: FP8 on the fp32 family) over V4-Flash's other FP8 decode shapes: wo_a / wo_b
  // (4 KB and 8 KB rows) and wq_a (4 MB per copy).
  b->Args({3, kFp8, 8192, 4096, 1, 4, 0});
  b->Args({3, kFp8, 4096, 8192, 1, 4, 0});
  b->Args({3, kFp8, 1024, 4096, 1, 32, 0});
  b->Args({3, kBf16, 129280, 4096, 1, 1, 0});  // the whole head (1 GB)
  for (int64_t level = 1; level < 4; ++level) {  // L2-resident (1 MB): one core's decode rate without DRAM
    b->Args({level, kFp8, 1024, 1024, 1, 1, 1});
    b->Args({level, kFp4, 512, 4096, 1, 1, 1});
    b->Args({level, kBf16, 128, 4096, 1, 1, 1});
  }
  b->Args({3, kFp4, 2048, 4096, 4, 32, 0});          // batched decode
  b->Args({3, kFp8, 32768, 1024, 16, 4, 0});
  // Level 4 (avx512bf16quant) differs from level 3 in its FP8 and FP4 weights (vdpbf16ps, not fp32 FMA) and in
  // reading a single token's bf16 / FP8 rows one at a time.
  for (int64_t threads : {1, 0}) b->Args({4, kFp8, 32768, 1024, 1, 4, threads});
  for (int64_t threads : {1, 0}) b->Args({4, kFp8, 8192, 4096, 1, 4, threads});  // wo_b-like rows of 4 KB
  for (int64_t threads : {1, 0}) b->Args({4, kFp4, 2048, 4096, 1, 32, threads});
  for (int64_t threads : {1, 0}) b->Args({4, kBf16, 16384, 4096, 1, 2, threads});  // one row at a time (level 3: 4)
  b->Args({4, kFp8, 1024, 1024, 1, 1, 1});
  b->Args({4, kFp4, 512, 4096, 1, 1, 1});
  b->Args({4, kFp8, 32768, 1024, 16, 4, 0});
  // Batched decode: the head, an FP8 projection and an FP4 expert (a few of the batch's tokens routed to it).
  for (int64_t tokens : {2, 3, 4, 8, 16}) b->Args({4, kBf16, 16384, 4096, tokens, 2, 0});
  for (int64_t tokens : {2, 4}) b->Args({4, kFp8, 8192, 4096, tokens, 4, 0});
  for (int64_t tokens : {2, 4}) b->Args({4, kFp4, 2048, 4096, tokens, 32, 0});
  // Level 5 (amxbf16): every token count on TDPBF16PS tiles, so a single token's GEMV runs there too.
  for (int64_t threads : {1, 0}) {
    b->Args({5, kFp8, 32768, 1024, 1, 4, threads});
    b->Args({5, kFp8, 8192, 4096, 1, 4, threads});
    b->Args({5, kFp4, 2048, 4096, 1, 32, threads});
    b->Args({5, kBf16, 16384, 4096, 1, 2, threads});
    b->Args({5, kBf16, 129280, 4096, 1, 1, threads});  // the whole head (1 GB)
  }
  b->Args({5, kFp8, 1024, 1024, 1, 1, 1});
  b->Args({5, kFp4, 512, 4096, 1, 1, 1});
  b->Args({5, kBf16, 128, 4096, 1, 1, 1});
  for (int64_t tokens : {4, 16}) b->Args({5, kFp4, 2048, 4096, tokens, 32, 0});
  b->Args({5, kFp8, 32768, 1024, 16, 4, 0});
}

void prefill_args(benchmark::internal::Benchmark* b) {
  for (int64_t level = 1; level < 4; ++level) {
    for (int64_t threads : {1, 0}) {
      b->Args({level, kFp8, 4096, 4096, 512, 1, threads});   // wo_b-like
      b->Args({level, kFp4, 2048, 4096, 12, 32, threads});   // an expert's share of a 512-token prefill
    }
  }
  // The expert case again over 1 GB of experts: 32 copies (134 MB) fit this VM's 260 MB L3, while a prefill
  // reads its experts from DRAM (the two ran at the same rate: the op is not memory-bound).
  b->Args({3, kFp4, 2048, 4096, 12, 256, 0});
  // Random routing spreads a 512-token prefill's experts over ~4-24 tokens each, across the tile-mode paths
  // (direct, group by group, panels).
  for (int64_t tokens : {8, 18, 24, 36}) b->Args({3, kFp4, 2048, 4096, tokens, 32, 0});
  b->Args({3, kBf16, 4096, 4096, 512, 1, 0});
  b->Args({3, kFp8, 32768, 1024, 512, 1, 0});  // wq_b of a 512-token prefill (many outputs: epilogue cost)
  b->Args({3, kBf16, 1024, 4096, 256, 1, 1});  // single-thread kernel efficiency, K = 4096 vs 1024
  b->Args({3, kBf16, 4096, 1024, 256, 1, 1});
  // Single-thread, level 2: V4-Flash's wo_b and a wo_a group in a prefill's 256-token attention chunks.
  b->Args({2, kFp8, 4096, 8192, 256, 1, 1});
  b->Args({2, kFp8, 1024, 4096, 256, 1, 1});
  b->Args({2, kFp8, 4096, 4096, 48, 1, 1});  // single-thread, x (768 KB) L2-resident: the kernel without the x stream
  // Level 2 (AVX-512 without BF16, e.g. Ice Lake Xeons) over an expert's token counts in a 512-token prefill,
  // one core: the fused mode's passes of 12 tokens and their partial blocks, up to 24 tokens.
  for (int64_t T : {5, 7, 9, 10, 12, 13, 16, 20}) b->Args({2, kFp4, 2048, 4096, T, 32, 1});
  for (int64_t T : {9, 12}) b->Args({2, kFp4, 256, 4096, T, 1, 1});  // weights in L2: the compute side alone
  for (int64_t threads : {1, 0})  // an expert's w2 (K = 2048)
    for (int64_t T : {9, 12}) b->Args({2, kFp4, 4096, 2048, T, 32, threads});
  for (int64_t threads : {1, 0}) b->Args({4, kFp8, 4096, 4096, 512, 1, threads});  // level 4: FP8 / FP4 on vdpbf16ps
  for (int64_t threads : {1, 0}) b->Args({4, kFp4, 2048, 4096, 12, 32, threads});
  // Level 4 runs up to 4 token blocks (24 tokens; FP8 12) in the fused tile mode, more in the decoded-tile mode.
  for (int64_t T : {5, 8, 10, 11, 18, 24, 30, 48}) b->Args({4, kFp4, 2048, 4096, T, 32, 0});
  b->Args({4, kFp4, 256, 4096, 12, 1, 1});  // one core, weights in L2: the compute side alone
  for (int64_t T : {12, 24}) b->Args({4, kFp8, 4096, 4096, T, 1, 0});
  b->Args({4, kBf16, 4096, 4096, 12, 1, 0});
  b->Args({4, kFp8, 32768, 1024, 512, 1, 0});
  // Level 5 (amxbf16): the same shapes on TDPBF16PS tiles.
  for (int64_t threads : {1, 0}) {
    b->Args({5, kFp8, 4096, 4096, 512, 1, threads});
    b->Args({5, kFp4, 2048, 4096, 12, 32, threads});
  }
  for (int64_t T : {5, 8, 18, 24, 36, 48}) b->Args({5, kFp4, 2048, 4096, T, 32, 0});
  b->Args({5, kFp4, 256, 4096, 12, 1, 1});
  b->Args({5, kBf16, 4096, 4096, 512, 1, 0});
  b->Args({5, kFp8, 32768, 1024, 512, 1, 0});
}

BENCHMARK(BM_Linear)->Apply(decode_args)->ArgNames({"level", "dtype", "n", "k", "T", "copies", "threads"})->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_Linear)->Apply(prefill_args)->ArgNames({"level", "dtype", "n", "k", "T", "copies", "threads"})->UseRealTime()->MinTime(0.5);

}  // namespace
}  // namespace deepinfer
