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

bool Sampler::scale(const float* logits, int64_t vocab, float temperature, Scratch& scratch, float& max_scaled) {
  auto& scaled = scratch.scaled;
  scaled.resize(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) scaled[size_t(i)] = scaled_logit(logits[i], temperature);
  max_scaled = max_value(scaled.data(), vocab);
  return std::isfinite(max_scaled);  // else a temperature too small for the logits, or none finite
}

bool Sampler::forward_drawable(const SamplingParams& p, int64_t vocab) {
  return !(p.temperature > 0.0f) || (p.top_k > 0 && p.top_k < vocab) || (!(p.top_p < 1.0f) && !(p.min_p > 0.0f));
}

std::optional<TokenDraw> Sampler::forward_draw(const SamplingParams& p, int64_t vocab) {
  if (!forward_drawable(p, vocab)) return std::nullopt;
  if (!(p.temperature > 0.0f)) return TokenDraw{};  // greedy (a NaN temperature too)
  TokenDraw d{.temperature = p.temperature, .uniform = next_uniform()};
  if (p.top_k > 0 && p.top_k < vocab) {
    d.top_k = p.top_k;
    d.top_p = p.top_p;
    d.min_p = p.min_p;
  }
  return d;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const SamplingParams& p) {
  if (const std::optional<TokenDraw> d = forward_draw(p, vocab)) return draw_token(logits, vocab, *d);
  Scratch& scratch = thread_scratch();  // top-p or min-p over the whole vocabulary
  float max_scaled = 0;
  if (!scale(logits, vocab, p.temperature, scratch, max_scaled)) {
    next_uniform();  // (every draw at a temperature takes one, as a forward's draws do)
    return int32_t(argmax(logits, vocab));
  }
  return sample_cut(p, max_scaled, scratch);
}

void Sampler::distribution(const float* logits, int64_t vocab, const SamplingParams& p,
                           std::vector<std::pair<int32_t, double>>& out) {
  out.clear();
  if (p.temperature <= 0.0f) {
    out.emplace_back(int32_t(argmax(logits, vocab)), 1.0);
    return;
  }
  Scratch& scratch = thread_scratch();
  if (p.top_k > 0 && p.top_k < vocab) {
    top_k_candidates(logits, vocab, p.temperature, p.top_k, scratch.candidates);
    const size_t n = top_k_cut(scratch.candidates, p.top_p, p.min_p, scratch.probs);
    if (n == 0) {
      out.emplace_back(int32_t(argmax(logits, vocab)), 1.0);
      return;
    }
    double mass = 0;
    for (size_t i = 0; i < n; ++i) mass += scratch.probs[i];
    for (size_t i = 0; i < n; ++i) {
      if (scratch.probs[i] > 0.0) out.emplace_back(scratch.candidates[i].second, scratch.probs[i] / mass);
    }
    return;
  }
  if (forward_drawable(p, vocab)) {  // the plain temperature draw (greedy returned above, top-k too)
    if (!scratch.plain.weigh(logits, vocab, p.temperature)) {
      out.emplace_back(int32_t(argmax(logits, vocab)), 1.0);
      return;
    }
    const double* w = scratch.plain.weights();
    for (int64_t i = 0; i < vocab; ++i) {
      if (w[size_t(i)] > 0.0) out.emplace_back(int32_t(i), w[size_t(i)] / scratch.plain.total());
    }
    return;
  }
  float max_scaled = 0;
  if (!scale(logits, vocab, p.temperature, scratch, max_scaled)) {
    out.emplace_back(int32_t(argmax(logits, vocab)), 1.0);
    return;
  }
  const auto& weights = scratch.weights;  // top-p or min-p
  const Cut cut = find_cut(p, max_scaled, scratch);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (scratch.bucket[i] < cut.bucket && weights[i] > 0.0) out.emplace_back(int32_t(i), weights[i] / cut.mass);
  }
  if (cut.bucket <= kLastBucket) {
    const auto& m = bucket_members(cut.bucket, scratch);
    for (size_t j = 0; j < cut.count; ++j) {
      if (weights[size_t(m[j].second)] > 0.0) out.emplace_back(m[j].second, weights[size_t(m[j].second)] / cut.mass);
    }
  }
}

// Top-p or min-p over the whole vocabulary, without sorting it. The candidates fall into buckets by how far their
// scaled logit lies below the largest, 1/64 apart (everything 64 or more below in the last bucket), and each bucket's
// weights are summed in id order. The cuts and the draw then walk the buckets best first and sort only the members of
// the bucket they end in. The order and the cuts are a full sort's (larger logit first, ties to the lower id, min-p
// then top-p); the sums are taken bucket by bucket, so a draw can differ from a full sort's only where that moves a
// boundary in its last bits. A full sort took ~13 ms a draw over V4's vocabulary, and so did sorting only the order's
// head where the nucleus holds most of it (a flat or Zipf-like distribution).
Sampler::Cut Sampler::find_cut(const SamplingParams& p, double max_logit, Scratch& scratch) {
  constexpr uint16_t kCutByMinP = kLastBucket + 1;
  const auto& scaled = scratch.scaled;
  auto& weights = scratch.weights;
  auto& bucket = scratch.bucket;
  auto& bucket_weights = scratch.bucket_weights;
  const size_t n_all = scaled.size();
  weights.resize(n_all);
  const double total = exp_fixed_sum(scaled.data(), int64_t(n_all), max_logit, weights.data());
  // Min-p keeps the candidates whose probability is at least min_p times the best one's (whose weight is 1): a prefix
  // of the order, so the others are left out of every bucket.
  const double min_weight = p.min_p > 0.0f ? double(p.min_p) : 0.0;
  bucket.resize(n_all);
  bucket_weights.assign(kLastBucket + 1, 0.0);
  for (size_t i = 0; i < n_all; ++i) {
    const double below = max_logit - double(scaled[i]);  // >= 0; a masked token's inf goes to the last bucket
    uint16_t b = below < kBucketUnits ? uint16_t(below * kBucketsPerUnit) : uint16_t(kLastBucket);
    if (weights[i] < min_weight) b = kCutByMinP;
    bucket[i] = b;
    if (b <= kLastBucket) bucket_weights[b] += weights[i];
  }
  // Top-p: the fewest best candidates whose weights reach top_p of the total; where no prefix reaches it, every
  // candidate min-p left.
  Cut cut{kLastBucket + 1, 0, 0.0};
  const double target = p.top_p < 1.0f ? double(p.top_p) * total : INFINITY;
  for (int b = 0; b <= kLastBucket; ++b) {
    if (cut.mass + bucket_weights[b] >= target) {  // the cut falls in this bucket: its members one by one
      double walked = cut.mass;
      size_t count = 0;
      for (const auto& [logit, id] : bucket_members(b, scratch)) {
        walked += weights[size_t(id)];
        ++count;
        if (walked >= target) break;
      }
      return {b, count, walked};  // (where the members' own sum fell short of the bucket's by rounding: all of them)
    }
    cut.mass += bucket_weights[b];
  }
  return cut;
}

// Bucket b's members (find_cut's buckets), best first, in scratch.candidates.
const std::vector<std::pair<float, int32_t>>& Sampler::bucket_members(int b, Scratch& scratch) {
  auto& m = scratch.candidates;
  m.clear();
  for (size_t i = 0; i < scratch.bucket.size(); ++i) {
    if (scratch.bucket[i] == b) m.emplace_back(scratch.scaled[i], int32_t(i));
  }
  std::sort(m.begin(), m.end(), draw_order);
  return m;
}

int32_t Sampler::sample_cut(const SamplingParams& p, double max_logit, Scratch& scratch) {
  const Cut cut = find_cut(p, max_logit, scratch);
  const auto& weights = scratch.weights;
  const auto& bucket_weights = scratch.bucket_weights;
  // The draw: the first candidate, best first, whose running weight passes a uniform times the kept mass; whole
  // buckets are passed by their sums.
  double r = next_uniform() * cut.mass;
  int last_weighted = -1;  // the last bucket with kept weight
  for (int b = 0; b <= std::min(cut.bucket, kLastBucket); ++b) {
    const bool whole = b < cut.bucket;
    if (whole && bucket_weights[b] == 0.0) continue;
    last_weighted = b;
    if (whole && r - bucket_weights[b] >= 0) {
      r -= bucket_weights[b];
      continue;
    }
    const auto& m = bucket_members(b, scratch);
    for (size_t j = 0, n = whole ? m.size() : cut.count; j < n; ++j) {
      r -= weights[size_t(m[j].second)];
      if (r < 0) return m[j].second;
    }
  }
  // Rounding left none: the last kept candidate with any weight (a masked token has none). The best one has weight 1,
  // so the last line is only a guard.
  if (last_weighted >= 0) {
    const auto& m = bucket_members(last_weighted, scratch);
    for (size_t j = last_weighted == cut.bucket ? cut.count : m.size(); j > 0; --j) {
      if (weights[size_t(m[j - 1].second)] > 0.0) return m[j - 1].second;
    }
  }
  return int32_t(argmax(scratch.scaled.data(), int64_t(scratch.scaled.size())));
}

bool has_penalties(const SamplingParams& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, PenaltyScratch& scratch) {
  if (!has_penalties(p)) return;
  if (int64_t(scratch.counts.size()) < vocab) scratch.counts.assign(size_t(vocab), 0);
  scratch.touched.clear();
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab; };
  if (p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f) {
    auto penalise = [&](int32_t id) {
      if (!in_vocab(id) || scratch.counts[size_t(id)] & 0x80000000u) return;
      scratch.counts[size_t(id)] |= 0x80000000u;  // high bit: already penalised
      scratch.touched.push_back(id);
      float& l = logits[id];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t id : prompt) penalise(id);
    for (int32_t id : generated) penalise(id);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t id : generated) {
      if (!in_vocab(id)) continue;
      if ((scratch.counts[size_t(id)] & 0x7fffffffu) == 0 && !(scratch.counts[size_t(id)] & 0x80000000u)) {
        scratch.touched.push_back(id);
      }
      scratch.counts[size_t(id)] += 1;
    }
    for (int32_t id : generated) {
      if (!in_vocab(id)) continue;
      const uint32_t c = scratch.counts[size_t(id)] & 0x7fffffffu;
      if (c == 0) continue;  // already applied for this id
      logits[id] -= p.frequency_penalty * float(c) + p.presence_penalty;
      scratch.counts[size_t(id)] &= 0x80000000u;
    }
  }
  for (int32_t id : scratch.touched) scratch.counts[size_t(id)] = 0;
}

void token_logprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n, TokenLogprob& out) {
  const float max_logit = max_value(logits, vocab);
  const double log_z = double(max_logit) + std::log(exp_fixed_sum(logits, vocab, max_logit, nullptr));
  out.id = chosen;
  out.logprob = float(double(logits[chosen]) - log_z);
  out.top.clear();
  if (top_n <= 0) return;
  // Keep the top_n best seen so far in `out.top`, sorted best first (insertion: top_n is at most 20).
  auto better = [](float a, int32_t ia, float b, int32_t ib) { return a != b ? a > b : ia < ib; };
  for (int64_t i = 0; i < vocab; ++i) {
    const float l = logits[i];
    if (int(out.top.size()) == top_n && !better(l, int32_t(i), out.top.back().second, out.top.back().first)) continue;
    if (int(out.top.size()) < top_n) out.top.emplace_back(int32_t(i), l);
    else out.top.back() = {int32_t(i), l};
    for (size_t j = out.top.size() - 1; j > 0 && better(out.top[j].second, out.top[j].first, out.top[j - 1].second, out.top[j - 1].first); --j) {
      std::swap(out.top[j], out.top[j - 1]);
    }
  }
  for (auto& [id, value] : out.top) value = float(double(value) - log_z);
}

}  // namespace deepinfer
