#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "model/ops.h"
#include "model/token_draw.h"

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

Sampler::Scratch& Sampler::thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

TokenDraw Sampler::draw_of(const SamplingParams& p, int64_t vocab) {
  if (!(p.temperature > 0.0f)) return TokenDraw{};  // greedy (a NaN temperature too)
  return {.temperature = p.temperature,
          .top_k = p.top_k > 0 && p.top_k < vocab ? p.top_k : 0,
          .top_p = p.top_p,
          .min_p = p.min_p};
}

TokenDraw Sampler::forward_draw(const SamplingParams& p, int64_t vocab) {
  TokenDraw d = draw_of(p, vocab);
  if (d.temperature > 0.0f) d.uniform = next_uniform();
  return d;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& p) {
  return draw_token(logits, vocab, forward_draw(p, vocab));
}

void Sampler::distribution(const float* logits, int64_t vocab, const SamplingParams& p,
                           std::vector<std::pair<int32_t, double>>& out) {
  out.clear();
  const TokenDraw d = draw_of(p, vocab);
  if (!(d.temperature > 0.0f)) {
    out.emplace_back(int32_t(argmax(logits, vocab)), 1.0);
    return;
  }
  Scratch& scratch = thread_scratch();
  // The kept candidates' weights and their sum (top-k: p; the nucleus: w), where some are kept.
  auto kept_candidates = [&](size_t n, double mass) {
    for (size_t i = 0; i < n; ++i) {
      if (scratch.weights[i] > 0.0) out.emplace_back(scratch.candidates[i].second, scratch.weights[i] / mass);
    }
  };
  if (draws_top_k(d, vocab)) {
    top_k_candidates(logits, vocab, d.temperature, d.top_k, scratch.candidates);
    const size_t n = top_k_cut(scratch.candidates, d.top_p, d.min_p, scratch.weights);
    double mass = 0;
    for (size_t i = 0; i < n; ++i) mass += scratch.weights[i];
    if (n > 0) kept_candidates(n, mass);
  } else if (draws_nucleus(d, vocab)) {
    double mass = 0;
    const size_t n = nucleus_of_row(logits, vocab, d, scratch.candidates, scratch.weights, mass);
    if (n > 0) kept_candidates(n, mass);
  } else if (scratch.plain.weigh(logits, vocab, d.temperature)) {
    const double* w = scratch.plain.weights();
    for (int64_t i = 0; i < vocab; ++i) {
      if (w[size_t(i)] > 0.0) out.emplace_back(int32_t(i), w[size_t(i)] / scratch.plain.total());
    }
  }
  if (out.empty()) out.emplace_back(int32_t(argmax(logits, vocab)), 1.0);  // the best s not finite: greedy
}

bool has_penalties(const SamplingParams& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

void penalty_edits(int64_t vocab, const SamplingParams& p, std::span<const int32_t> prompt,
                   std::span<const int32_t> generated, PenaltyScratch& scratch, std::vector<LogitEdit>& out) {
  out.clear();
  if (!has_penalties(p)) return;
  if (int64_t(scratch.counts.size()) < vocab) scratch.counts.assign(size_t(vocab), 0);
  scratch.touched.clear();
  constexpr uint32_t kRepeated = 0x80000000u;  // (a count's high bit: seen in the prompt or output)
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab; };
  const bool repetition = p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f;
  if (repetition) {
    auto seen = [&](int32_t id) {
      if (!in_vocab(id) || scratch.counts[size_t(id)] & kRepeated) return;
      scratch.counts[size_t(id)] |= kRepeated;
      scratch.touched.push_back(id);
    };
    for (int32_t id : prompt) seen(id);
    for (int32_t id : generated) seen(id);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t id : generated) {
      if (!in_vocab(id)) continue;
      if (scratch.counts[size_t(id)] == 0) scratch.touched.push_back(id);
      scratch.counts[size_t(id)] += 1;
    }
  }
  for (int32_t id : scratch.touched) {
    const uint32_t c = scratch.counts[size_t(id)] & ~kRepeated;
    LogitEdit e{.id = id};
    if (scratch.counts[size_t(id)] & kRepeated) e.divide = p.repetition_penalty;
    if (c > 0) e.subtract = p.frequency_penalty * float(c) + p.presence_penalty;
    out.push_back(e);
    scratch.counts[size_t(id)] = 0;
  }
}

void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, PenaltyScratch& scratch) {
  penalty_edits(vocab, p, prompt, generated, scratch, scratch.edits);
  apply_edits(logits, vocab, scratch.edits);
}

}  // namespace deepinfer
