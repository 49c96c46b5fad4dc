#include "model/token_draw.h"

#include <algorithm>
#include <cmath>

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

void top_k_candidates(const float* logits, int64_t n, float temperature, int64_t k, std::vector<DrawCandidate>& out) {
  DI_CHECK(k > 0 && k <= n);
  out.clear();
  for (int64_t i = 0; i < n; ++i) out.emplace_back(scaled_logit(logits[i], temperature), int32_t(i));
  std::partial_sort(out.begin(), out.begin() + k, out.end(), draw_order);
  out.resize(size_t(k));
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

int32_t draw_token(const float* logits, int64_t n, const TokenDraw& draw) {
  if (!(draw.temperature > 0.0f)) return int32_t(argmax(logits, n));  // (a NaN temperature too, as the device takes it)
  if (draws_top_k(draw, n)) {
    thread_local std::vector<DrawCandidate> candidates;
    top_k_candidates(logits, n, draw.temperature, draw.top_k, candidates);
    return draw_from_top_k(candidates, draw, std::isfinite(candidates[0].first) ? -1 : int32_t(argmax(logits, n)));
  }
  thread_local TemperatureWeights weights;
  if (!weights.weigh(logits, n, draw.temperature)) return int32_t(argmax(logits, n));
  return int32_t(weights.pick(draw.uniform));
}

}  // namespace deepinfer
