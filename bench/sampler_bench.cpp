// Micro-benchmark of one token's draw over V4's vocabulary (129,280 logits), as the engine makes it for every sequence
// of a decode step: greedy, plain temperature, top-p and min-p on a peaked and a flat distribution, and the
// log-probabilities a request may ask for. A batch-256 step makes 256 of them on the host's threads.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace deepinfer {
namespace {

constexpr int64_t kVocab = 129280;

// A model's logits: normal with a spread of `sigma`, a few tokens far ahead where `peaked`.
std::vector<float> logits(float sigma, bool peaked) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) v[size_t(i)] = normal(rng) + (peaked && i % 9973 == 0 ? 12.0f : 0.0f);
  return v;
}

void BM_SamplerDraw(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  const bool peaked = state.range(1) != 0;
  switch (state.range(0)) {
    case 0: p.temperature = 0.0f; state.SetLabel("greedy"); break;
    case 1: state.SetLabel("temperature"); break;
    case 2: p.top_p = 0.95f; state.SetLabel("top-p 0.95"); break;
    case 3: p.min_p = 0.05f; state.SetLabel("min-p 0.05"); break;
    default: p.top_k = 50; state.SetLabel("top-k 50"); break;
  }
  const std::vector<float> row = logits(peaked ? 2.0f : 1.0f, peaked);
  Sampler sampler(1);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(row.data(), kVocab, p));
}
BENCHMARK(BM_SamplerDraw)->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1}})->ArgNames({"mode", "peaked"})->Unit(benchmark::kMicrosecond);

void BM_TokenLogprobs(benchmark::State& state) {
  const std::vector<float> row = logits(2.0f, true);
  TokenLogprob out;
  for (auto _ : state) {
    token_logprobs(row.data(), kVocab, 7, int(state.range(0)), out);
    benchmark::DoNotOptimize(out.logprob);
  }
}
BENCHMARK(BM_TokenLogprobs)->Arg(0)->Arg(5)->ArgName("top")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer
