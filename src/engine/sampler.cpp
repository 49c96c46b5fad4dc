#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace deepinfer {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Sampler::Sampler(uint64_t seed) {
  for (auto& s : state_) s = splitmix64(seed);
}

double Sampler::next_uniform() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return double(result >> 11) * 0x1p-53;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& p) {
  if (p.temperature <= 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) if (logits[i] > logits[best]) best = i;
    return int32_t(best);
  }
  candidates_.clear();
  for (int64_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i] / p.temperature, int32_t(i));
  auto by_logit = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  size_t keep = candidates_.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) {
    keep = size_t(p.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  // Softmax over the survivors (relative to the max), then min-p and top-p cut the tail.
  const double max_logit = candidates_[0].first;
  std::vector<double> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs[i] = std::exp(double(candidates_[i].first) - max_logit);
  for (auto& v : probs) v /= total;
  size_t n = keep;
  if (p.min_p > 0.0f) {
    while (n > 1 && probs[n - 1] < p.min_p * probs[0]) --n;
  }
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < n; ++i) {
      cumulative += probs[i];
      if (cumulative >= p.top_p) { n = i + 1; break; }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += probs[i];
  double r = next_uniform() * mass;
  for (size_t i = 0; i < n; ++i) {
    r -= probs[i];
    if (r < 0) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace deepinfer
