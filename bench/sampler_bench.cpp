// Micro-benchmark of one token's draw over V4's vocabulary (129,280 logits), as the engine makes it for every sequence
// of a decode step: greedy, plain temperature, top-p, min-p and top-k on a flat, a peaked and a Zipf-like distribution,
// and the log-probabilities a request may ask for. A batch-256 step makes 256 of them on the host's threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace deepinfer {
namespace {

constexpr int64_t kVocab = 129280;

// A model's logits. dist 0: normal (flat: top-p's nucleus is most of the vocabulary); 1: normal with a few tokens far
// ahead (peaked); 2: Zipf-like, the token of rank r at -ln r (a nucleus of ~70k tokens at top-p 0.95).
std::vector<float> logits(int dist) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, dist == 1 ? 2.0f : 1.0f);
  std::vector<float> v(kVocab);
  if (dist == 2) {
    std::vector<int64_t> rank(kVocab);
    for (int64_t i = 0; i < kVocab; ++i) rank[size_t(i)] = i + 1;
    std::shuffle(rank.begin(), rank.end(), rng);
    for (int64_t i = 0; i < kVocab; ++i) v[size_t(i)] = -float(std::log(double(rank[size_t(i)])));
    return v;
  }
  for (int64_t i = 0; i < kVocab; ++i) v[size_t(i)] = normal(rng) + (dist == 1 && i % 9973 == 0 ? 12.0f : 0.0f);
  return v;
}

void BM_SamplerDraw(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  switch (state.range(0)) {
    case 0: p.temperature = 0.0f; state.SetLabel("greedy"); break;
    case 1: state.SetLabel("temperature"); break;
    case 2: p.top_p = 0.95f; state.SetLabel("top-p 0.95"); break;
    case 3: p.min_p = 0.05f; state.SetLabel("min-p 0.05"); break;
    default: p.top_k = 50; state.SetLabel("top-k 50"); break;
  }
  const std::vector<float> row = logits(int(state.range(1)));
  Sampler sampler(1);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(row.data(), kVocab, p));
}
BENCHMARK(BM_SamplerDraw)->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1, 2}})->ArgNames({"mode", "dist"})->Unit(benchmark::kMicrosecond);

void BM_TokenLogprobs(benchmark::State& state) {
  const std::vector<float> row = logits(1);
  TokenLogprob out;
  for (auto _ : state) {
    token_logprobs(row.data(), kVocab, 7, int(state.range(0)), out);
    benchmark::DoNotOptimize(out.logprob);
  }
}
BENCHMARK(BM_TokenLogprobs)->Arg(0)->Arg(5)->ArgName("top")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer
