// Micro-benchmarks of the fast sparse attention, indexer scores and mHC mixes at V4-Flash shapes, per SIMD
// level. Counters: FLOP/s (2 per multiply-add of q.k and p.v over the visible slots; of the head dots for
// the indexer; of x.fn for the mixes) and the bytes of kv rows / keys / fn streamed per second.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/fast_backend.h"
#include "core/dtypes.h"

namespace deepinfer {
namespace {

std::vector<float> bf16_values(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16_from_float(dist(rng));
  return v;
}

bool skip_unsupported(benchmark::State& state, SimdLevel level) {
  if (simd_level_supported(level)) return false;
  state.SkipWithError("SIMD level not supported by this CPU");
  return true;
}

// args: level, filled slots (window 128 + compressed), threads (0 = all)
void BM_SparseAttention(benchmark::State& state) {
  const auto level = SimdLevel(state.range(0));
  if (skip_unsupported(state, level)) return;
  const int64_t H = 64, D = 512, n_filled = state.range(1);
  std::mt19937 rng(1);
  const std::vector<float> kv = bf16_values(rng, n_filled * D), q = bf16_values(rng, H * D);
  std::vector<float> sink(size_t(H), 0.0f), out(size_t(H * D));
  std::vector<const float*> slots;
  for (int64_t j = 0; j < n_filled; ++j) slots.push_back(&kv[size_t(j * D)]);
  while (slots.size() % 64) slots.push_back(nullptr);
  auto backend = make_fast_backend_with_level(int(state.range(2)), level);
  const SparseAttentionParams p{q.data(), H, D, slots.data(), int64_t(slots.size()), sink.data(), 0.044f, true, out.data()};
  for (auto _ : state) {
    backend->sparse_attention(p);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(simd_level_name(level));
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * double(H * D * n_filled) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_GB/s"] = benchmark::Counter(4.0 * double(n_filled * D) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// args: level, filled slots, query tokens per call, threads: a prefill block's tokens in one
// sparse_attentions call (a token per thread), each with its own query and the same rows.
void BM_SparseAttentionTokens(benchmark::State& state) {
  const auto level = SimdLevel(state.range(0));
  if (skip_unsupported(state, level)) return;
  const int64_t H = 64, D = 512, n_filled = state.range(1), T = state.range(2);
  std::mt19937 rng(1);
  const std::vector<float> kv = bf16_values(rng, n_filled * D), q = bf16_values(rng, T * H * D);
  std::vector<float> sink(size_t(H), 0.0f), out(size_t(T * H * D));
  std::vector<const float*> slots;
  for (int64_t j = 0; j < n_filled; ++j) slots.push_back(&kv[size_t(j * D)]);
  while (slots.size() % 64) slots.push_back(nullptr);
  auto backend = make_fast_backend_with_level(int(state.range(3)), level);
  std::vector<SparseAttentionParams> ps;
  for (int64_t t = 0; t < T; ++t) {
    ps.push_back({&q[size_t(t * H * D)], H, D, slots.data(), int64_t(slots.size()), sink.data(), 0.044f, true,
                  &out[size_t(t * H * D)]});
  }
  for (auto _ : state) {
    backend->sparse_attentions(ps);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(simd_level_name(level));
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * double(T * H * D * n_filled) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// args: level, keys, threads
void BM_IndexScores(benchmark::State& state) {
  const auto level = SimdLevel(state.range(0));
  if (skip_unsupported(state, level)) return;
  const int64_t H = 64, D = 128, n_keys = state.range(1);
  std::mt19937 rng(2);
  const std::vector<float> keys = bf16_values(rng, n_keys * D), q = bf16_values(rng, H * D), w = bf16_values(rng, H);
  std::vector<float> scores(static_cast<size_t>(n_keys));
  auto backend = make_fast_backend_with_level(int(state.range(2)), level);
  const IndexScoreParams p{q.data(), w.data(), H, D, keys.data(), n_keys, scores.data()};
  for (auto _ : state) {
    backend->index_scores(p);
    benchmark::DoNotOptimize(scores.data());
  }
  state.SetLabel(simd_level_name(level));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(H * D * n_keys) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// args: level, tokens, threads
void BM_HcMix(benchmark::State& state) {
  const auto level = SimdLevel(state.range(0));
  if (skip_unsupported(state, level)) return;
  const int64_t width = 4 * 4096, n_mix = 24, T = state.range(1);
  std::mt19937 rng(3);
  const std::vector<float> x = bf16_values(rng, T * width), fn = bf16_values(rng, n_mix * width);
  std::vector<float> out(size_t(T * n_mix));
  auto backend = make_fast_backend_with_level(int(state.range(2)), level);
  const HcMixParams p{x.data(), T, width, fn.data(), n_mix, 1e-6, out.data()};
  for (auto _ : state) {
    backend->hc_mix(p);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(simd_level_name(level));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(T * width * n_mix) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void attention_args(benchmark::internal::Benchmark* b) {
  for (int64_t level = 1; level < 4; ++level) {
    b->Args({level, 640, 1});  // decode, ratio-4 layer: 128 window + 512 top-k
    b->Args({level, 640, 0});
    b->Args({level, 160, 0});  // ratio-128 layer of a 4096-token context
  }
}

BENCHMARK(BM_SparseAttention)->Apply(attention_args)->ArgNames({"level", "slots", "threads"})->UseRealTime();
BENCHMARK(BM_SparseAttentionTokens)
    ->Args({3, 640, 8, 0})  // eight prefill tokens of a ratio-4 layer: compare with BM_SparseAttention/3/640/0
    ->ArgNames({"level", "slots", "tokens", "threads"})
    ->UseRealTime();
BENCHMARK(BM_IndexScores)
    ->ArgsProduct({{1, 2, 3}, {128, 1024}, {0}})
    ->ArgNames({"level", "keys", "threads"})
    ->UseRealTime();
BENCHMARK(BM_HcMix)->ArgsProduct({{1, 2, 3}, {1, 64}, {0}})->ArgNames({"level", "tokens", "threads"})->UseRealTime();

}  // namespace
}  // namespace deepinfer
