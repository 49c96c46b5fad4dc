#include "model/token_draw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/status.h"
#include "model/exp_fixed_constants.h"
#include "model/ops.h"

namespace deepinfer {

bool TemperatureWeights::weigh(const float* logits, int64_t n, float temperature) {
  DI_CHECK(n > 0 && temperature > 0.0f);
  scaled_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) scaled_[size_t(i)] = scaled_logit(logits[i], temperature);
  const double m = max_value(scaled_.data(), n);
  if (!std::isfinite(m)) return false;
  n_ = n;
  const int64_t n_groups = (n + kDrawGroupIds - 1) / kDrawGroupIds;
  const int64_t n_spans = (n_groups + kDrawSpanGroups - 1) / kDrawSpanGroups;
  weights_.assign(size_t(n_groups * kDrawGroupIds), 0.0);  // (the last group's ids past n weigh 0)
  exp_fixed_sum(scaled_.data(), n, m, weights_.data());    // (8 lanes at a time; its sum is not the draw's)
  double* w = weights_.data();
  for (int64_t i = 0; i < n; ++i) w[i] = double(scaled_[size_t(i)]) - m < -kExpFixedMaxArg ? 0.0 : w[i];  // (else libm's exp)
  group_sums_.assign(size_t(n_spans * kDrawSpanGroups), 0.0);
  span_sums_.resize(size_t(n_spans));
  for (int64_t k = 0; k < n_groups; ++k, w += kDrawGroupIds) {
    group_sums_[size_t(k)] = ((w[0] + w[1]) + (w[2] + w[3])) + ((w[4] + w[5]) + (w[6] + w[7]));
  }
  total_ = 0.0;
  for (int64_t s = 0; s < n_spans; ++s) {
    double v[kDrawSpanGroups];
    std::copy_n(group_sums_.begin() + s * kDrawSpanGroups, kDrawSpanGroups, v);
    for (int64_t width = 1; width < kDrawSpanGroups; width *= 2) {
      for (int64_t k = 0; k < kDrawSpanGroups; k += 2 * width) v[k] = v[k] + v[k + width];
    }
    span_sums_[size_t(s)] = v[0];
    total_ += v[0];
  }
  return true;
}

int64_t TemperatureWeights::last_weighted(int64_t begin, int64_t end) const {
  end = std::min(end, n_);
  for (int64_t i = end; i > begin; --i) {
    if (weights_[size_t(i - 1)] > 0.0) return i - 1;
  }
  return begin;
}

int64_t TemperatureWeights::pick(double uniform) const {
  const int64_t n = n_;
  double r = uniform * total_;
  int64_t span = 0;
  for (const int64_t n_spans = int64_t(span_sums_.size()); span < n_spans && !(r - span_sums_[size_t(span)] < 0); ++span) {
    r -= span_sums_[size_t(span)];
  }
  if (span == int64_t(span_sums_.size())) return last_weighted(0, n);
  int64_t group = span * kDrawSpanGroups;
  const int64_t groups_end = group + kDrawSpanGroups;
  for (; group < groups_end && !(r - group_sums_[size_t(group)] < 0); ++group) r -= group_sums_[size_t(group)];
  if (group == groups_end) return last_weighted(span * kDrawSpanIds, (span + 1) * kDrawSpanIds);
  const int64_t ids_end = std::min(n, (group + 1) * kDrawGroupIds);
  for (int64_t i = group * kDrawGroupIds; i < ids_end; ++i) {
    r -= weights_[size_t(i)];
    if (r < 0) return i;
  }
  return last_weighted(group * kDrawGroupIds, ids_end);
}

namespace {
// The order as ascending 32-bit keys: s's bits made monotone (-0 as +0, as the device takes it), then inverted, so
// that a larger s is a smaller key.
uint32_t descending_key(float s) {
  const float v = s + 0.0f;  // (-0 + 0 = +0; any other s is itself)
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  const uint32_t flip = uint32_t(int32_t(b) >> 31) | 0x80000000u;  // (without a branch: the signs are a coin toss)
  return ~(b ^ flip);
}
}  // namespace

void top_k_candidates(const float* logits, int64_t n, float temperature, int64_t k, std::vector<DrawCandidate>& out) {
  DI_CHECK(k > 0 && k <= n);
  // (Each thread_local named once: in this position-independent library every access by name is a call.)
  thread_local std::vector<uint32_t> keys_of_thread, sample_of_thread;
  thread_local std::vector<uint64_t> chosen_of_thread;
  std::vector<uint32_t>& keys = keys_of_thread;
  std::vector<uint32_t>& sample = sample_of_thread;
  std::vector<uint64_t>& chosen = chosen_of_thread;  // (key, id): larger s first, ties to the lower id
  keys.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) keys[size_t(i)] = descending_key(scaled_logit(logits[i], temperature));
  // A limit from every 16th key, below which about twice k keys lie, and the keys at or below it; where fewer than k
  // are (an unlucky sample), every key. The k best lie at or below any limit that k keys do.
  constexpr int64_t kStride = 16;
  chosen.clear();
  if (n >= 64 * kStride) {
    sample.clear();
    for (int64_t i = 0; i < n; i += kStride) sample.push_back(keys[size_t(i)]);
    const int64_t rank = std::min(int64_t(sample.size()) - 1, 2 * k / kStride + 8);
    std::nth_element(sample.begin(), sample.begin() + rank, sample.end());
    const uint32_t limit = sample[size_t(rank)];
    for (int64_t i = 0; i < n; ++i) {
      if (keys[size_t(i)] <= limit) chosen.push_back(uint64_t(keys[size_t(i)]) << 32 | uint64_t(i));
    }
  }
  if (int64_t(chosen.size()) < k) {
    chosen.clear();
    for (int64_t i = 0; i < n; ++i) chosen.push_back(uint64_t(keys[size_t(i)]) << 32 | uint64_t(i));
  }
  std::nth_element(chosen.begin(), chosen.begin() + (k - 1), chosen.end());
  std::sort(chosen.begin(), chosen.begin() + k);
  out.resize(size_t(k));
  for (int64_t j = 0; j < k; ++j) {
    const auto id = int32_t(uint32_t(chosen[size_t(j)]));
    out[size_t(j)] = {scaled_logit(logits[id], temperature), id};
  }
}

void order_candidates(const float* logits, int64_t n, float temperature, std::vector<DrawCandidate>& out,
                      uint32_t limit) {
  // Three stable counting passes of 11 bits over (key, candidate) pairs in id order: equal keys keep the lower id
  // first.
  constexpr int kDigitBits = 11, kBins = 1 << kDigitBits;
  thread_local std::vector<std::pair<uint32_t, DrawCandidate>> a_of_thread, b_of_thread;
  auto& a = a_of_thread;
  auto& b = b_of_thread;
  a.resize(size_t(n));
  size_t count = 0;
  for (int64_t i = 0; i < n; ++i) {  // (without a branch: where the limit falls mid-row it is a coin toss)
    const float s = scaled_logit(logits[i], temperature);
    const uint32_t key = descending_key(s);
    a[count] = {key, {s, int32_t(i)}};
    count += key <= limit;
  }
  a.resize(count);
  b.resize(count);
  for (int shift = 0; shift < 32; shift += kDigitBits) {
    size_t at[kBins + 1] = {};
    for (const auto& e : a) ++at[((e.first >> shift) & (kBins - 1)) + 1];
    for (int d = 0; d < kBins; ++d) at[d + 1] += at[d];
    for (const auto& e : a) b[at[(e.first >> shift) & (kBins - 1)]++] = e;
    a.swap(b);
  }
  out.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i].second;
}

double draw_weight(float s, double m) {
  const double x = double(s) - m;
  return x < -kExpFixedMaxArg ? 0.0 : exp_fixed(x);
}

size_t nucleus_cut(std::span<const DrawCandidate> prefix, bool whole_row, double total, float top_p, float min_p,
                   const double* weight_by_id, std::vector<double>& weights, double& mass) {
  weights.clear();
  mass = 0.0;
  if (prefix.empty() || !std::isfinite(prefix[0].first)) return 0;
  const double m = prefix[0].first;
  const double target = top_p < 1.0f ? double(top_p) * total : INFINITY;
  for (size_t j = 0; j < prefix.size(); ++j) {
    const double w = weight_by_id ? weight_by_id[prefix[j].second] : draw_weight(prefix[j].first, m);
    if (j > 0 && min_p > 0.0f && w < double(min_p)) return j;  // min-p's cut
    weights.push_back(w);
    mass += w;
    if (mass >= target) return j + 1;  // top-p's
  }
  return whole_row ? prefix.size() : 0;
}

int32_t draw_from_nucleus(std::span<const DrawCandidate> prefix, bool whole_row, double total, const TokenDraw& draw) {
  thread_local std::vector<double> weights;
  double mass = 0.0;
  const size_t n = nucleus_cut(prefix, whole_row, total, draw.top_p, draw.min_p, nullptr, weights, mass);
  return n == 0 ? -1 : prefix[pick_weighted(weights.data(), n, mass, draw.uniform)].second;
}

namespace {
// A key at or before which the nucleus cut of a row surely lies: the last of the first bucket of keys (by their top 11
// bits, best first) where the weights summed bucket by bucket pass the top-p target with room for rounding (either sum
// of n weights is within n ulps of the other), or that holds a weight below min-p; UINT32_MAX where none does.
uint32_t nucleus_limit(const float* logits, int64_t n, const TokenDraw& draw, const double* w, double total) {
  constexpr int kShift = 21, kBuckets = 1 << (32 - kShift);
  thread_local std::vector<double> bucket_mass_of_thread;
  thread_local std::vector<uint8_t> below_min_p_of_thread;
  std::vector<double>& bucket_mass = bucket_mass_of_thread;
  std::vector<uint8_t>& below_min_p = below_min_p_of_thread;
  bucket_mass.assign(kBuckets, 0.0);
  below_min_p.assign(kBuckets, 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bucket = descending_key(scaled_logit(logits[i], draw.temperature)) >> kShift;
    bucket_mass[bucket] += w[i];
    below_min_p[bucket] |= draw.min_p > 0.0f && w[i] < double(draw.min_p);
  }
  const double target = draw.top_p < 1.0f ? double(draw.top_p) * total * (1.0 + 1e-9) : INFINITY;
  double mass = 0.0;
  for (uint32_t b = 0; b < kBuckets; ++b) {
    mass += bucket_mass[b];
    if (mass >= target || below_min_p[b]) return b == kBuckets - 1 ? UINT32_MAX : ((b + 1) << kShift) - 1;
  }
  return UINT32_MAX;
}
}  // namespace

size_t nucleus_of_row(const float* logits, int64_t n, const TokenDraw& draw, std::vector<DrawCandidate>& candidates,
                      std::vector<double>& weights, double& mass) {
  thread_local TemperatureWeights plain;
  if (!plain.weigh(logits, n, draw.temperature)) return 0;
  const int64_t k = std::min(kNucleusCandidates, n);  // (what a device sends back: most cuts fall inside it)
  top_k_candidates(logits, n, draw.temperature, k, candidates);
  const double* w = plain.weights();
  const size_t kept = nucleus_cut(candidates, k == n, plain.total(), draw.top_p, draw.min_p, w, weights, mass);
  if (kept > 0) return kept;
  // The cut lies past them: the order up to a key where it surely lies, else (a guard) the whole order.
  order_candidates(logits, n, draw.temperature, candidates, nucleus_limit(logits, n, draw, w, plain.total()));
  const bool whole_row = int64_t(candidates.size()) == n;
  const size_t in_limit = nucleus_cut(candidates, whole_row, plain.total(), draw.top_p, draw.min_p, w, weights, mass);
  if (in_limit > 0) return in_limit;
  order_candidates(logits, n, draw.temperature, candidates);
  return nucleus_cut(candidates, true, plain.total(), draw.top_p, draw.min_p, w, weights, mass);
}

size_t top_k_cut(std::span<const DrawCandidate> candidates, float top_p, float min_p, std::vector<double>& probs) {
  const size_t keep = candidates.size();
  if (keep == 0 || !std::isfinite(candidates[0].first)) return 0;
  const double max_logit = candidates[0].first;
  probs.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs[i] = exp_fixed(double(candidates[i].first) - max_logit);
  for (double& v : probs) v /= total;
  size_t n = keep;
  if (min_p > 0.0f) {
    while (n > 1 && probs[n - 1] < min_p * probs[0]) --n;
  }
  if (top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < n; ++i) {
      cumulative += probs[i];
      if (cumulative >= top_p) {
        n = i + 1;
        break;
      }
    }
  }
  return n;
}

int32_t draw_from_top_k(std::span<const DrawCandidate> candidates, const TokenDraw& draw, int32_t argmax_id) {
  thread_local std::vector<double> probs;
  const size_t n = top_k_cut(candidates, draw.top_p, draw.min_p, probs);
  if (n == 0) return argmax_id;
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += probs[i];
  return candidates[pick_weighted(probs.data(), n, mass, draw.uniform)].second;
}

size_t pick_weighted(const double* weights, size_t n, double mass, double uniform) {
  double r = uniform * mass;
  size_t i = 0;
  for (const double* w = weights; i + 8 <= n; i += 8, w += 8) {
    const double eight = ((w[0] + w[1]) + (w[2] + w[3])) + ((w[4] + w[5]) + (w[6] + w[7]));
    if (r - eight < 0) break;
    r -= eight;
  }
  for (; i < n; ++i) {
    r -= weights[i];
    if (r < 0) return i;
  }
  while (n > 1 && weights[n - 1] == 0.0) --n;
  return n - 1;
}

void apply_edits(float* logits, int64_t n, std::span<const LogitEdit> edits) {
  for (const LogitEdit& e : edits) {
    if (e.id < 0 || e.id >= n) continue;
    float& x = logits[e.id];
    x = x > 0.0f ? x / e.divide : x * e.divide;
    x = x - e.subtract;
  }
}

void apply_mask(float* logits, int64_t n, std::span<const uint8_t> allowed) {
  DI_CHECK(int64_t(allowed.size()) == n);
  for (int64_t i = 0; i < n; ++i) {
    if (!allowed[size_t(i)]) logits[i] = -std::numeric_limits<float>::infinity();
  }
}

int32_t draw_token(const float* logits, int64_t n, const TokenDraw& draw) {
  if (!draw.edits.empty() || !draw.allowed.empty()) {
    thread_local std::vector<float> edited_of_thread;
    std::vector<float>& edited = edited_of_thread;
    edited.assign(logits, logits + n);
    apply_edits(edited.data(), n, draw.edits);
    if (!draw.allowed.empty()) apply_mask(edited.data(), n, draw.allowed);
    TokenDraw unedited = draw;
    unedited.edits = {};
    unedited.allowed = {};
    return draw_token(edited.data(), n, unedited);
  }
  if (!(draw.temperature > 0.0f)) return int32_t(argmax(logits, n));  // (a NaN temperature too, as the device takes it)
  if (draws_top_k(draw, n)) {
    thread_local std::vector<DrawCandidate> candidates;
    top_k_candidates(logits, n, draw.temperature, draw.top_k, candidates);
    return draw_from_top_k(candidates, draw, std::isfinite(candidates[0].first) ? -1 : int32_t(argmax(logits, n)));
  }
  if (draws_nucleus(draw, n)) {
    thread_local std::vector<DrawCandidate> candidates;
    thread_local std::vector<double> weights;
    double mass = 0.0;
    const size_t kept = nucleus_of_row(logits, n, draw, candidates, weights, mass);
    if (kept == 0) return int32_t(argmax(logits, n));
    return candidates[pick_weighted(weights.data(), kept, mass, draw.uniform)].second;
  }
  thread_local TemperatureWeights weights;
  if (!weights.weigh(logits, n, draw.temperature)) return int32_t(argmax(logits, n));
  return int32_t(weights.pick(draw.uniform));
}

void logprobs_from_best(std::span<const DrawCandidate> best, double total, int32_t chosen, float chosen_logit, int top_n,
                        TokenLogprob& out) {
  DI_CHECK(!best.empty() && top_n >= 0);
  const float m = best[0].first;
  const bool finite = std::isfinite(m);
  const double log_z = finite ? double(m) + std::log(total) : 0.0;
  auto logprob = [&](float s) {
    if (!finite) return s == m && m > 0.0f ? 0.0f : -std::numeric_limits<float>::infinity();
    return float(double(s == 0.0f ? 0.0f : s) - log_z);  // (-0 as +0: a device's candidates carry +0)
  };
  out.id = chosen;
  out.logprob = logprob(scaled_logit(chosen_logit, 1.0f));
  out.top.clear();
  const size_t n_top = std::min(size_t(top_n), best.size());
  for (size_t j = 0; j < n_top; ++j) out.top.emplace_back(best[j].second, logprob(best[j].first));
}

void token_logprobs(const float* logits, int64_t n, int32_t chosen, int top_n, TokenLogprob& out) {
  DI_CHECK(n > 0 && chosen >= 0 && chosen < n);
  thread_local std::vector<DrawCandidate> best;
  thread_local TemperatureWeights weights;
  top_k_candidates(logits, n, 1.0f, logprob_candidates(top_n, n), best);
  const double total = weights.weigh(logits, n, 1.0f) ? weights.total() : 0.0;
  logprobs_from_best(best, total, chosen, logits[chosen], top_n, out);
}

}  // namespace deepinfer
