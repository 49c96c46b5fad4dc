// model/token_draw.h: the plain temperature draw is the sequence its header writes out (restated here one id at a time,
// with the scalar exp_fixed, against the 8-lane weights and the hierarchical walk), the sampler's plain draws are
// draw_token's with one uniform a draw from its stream, and the edges (no finite logit, weights below e^-700, u = 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "model/ops.h"
#include "model/token_draw.h"

namespace deepinfer {
namespace {

// The header's plain draw, written out again as plainly as it reads: s, m, the weights, the groups', spans' and
// row's sums.
struct SpecPlainDraw {
  std::vector<float> s;
  float m = -INFINITY;
  int64_t n = 0;

  SpecPlainDraw(const std::vector<float>& x, float temperature) : s(x.size()), n(int64_t(x.size())) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[size_t(i)] / temperature;
      s[size_t(i)] = std::isnan(v) ? -INFINITY : v;
    }
    for (const float v : s) m = std::max(m, v);
  }
  double weight(int64_t i) const {
    if (i >= n) return 0.0;
    const double d = double(s[size_t(i)]) - double(m);
    return d >= -700.0 ? exp_fixed(d) : 0.0;
  }
  double group(int64_t k) const {
    const int64_t i = 8 * k;
    return ((weight(i) + weight(i + 1)) + (weight(i + 2) + weight(i + 3))) +
           ((weight(i + 4) + weight(i + 5)) + (weight(i + 6) + weight(i + 7)));
  }
  double span(int64_t j) const {
    std::vector<double> v(32);
    for (int64_t k = 0; k < 32; ++k) v[size_t(k)] = group(32 * j + k);
    for (int64_t width = 1; width < 32; width *= 2) {
      for (int64_t k = 0; k < 32; k += 2 * width) v[size_t(k)] = v[size_t(k)] + v[size_t(k + width)];
    }
    return v[0];
  }
  int64_t n_spans() const { return ((n + 7) / 8 + 31) / 32; }
  double total() const {
    double sum = 0.0;
    for (int64_t j = 0; j < n_spans(); ++j) sum += span(j);
    return sum;
  }
};

int64_t spec_draw(const std::vector<float>& x, float temperature, double u) {
  const int64_t n = int64_t(x.size());
  const SpecPlainDraw d(x, temperature);
  if (!std::isfinite(d.m)) return argmax(x.data(), n);
  auto weight = [&](int64_t i) { return d.weight(i); };
  auto group = [&](int64_t k) { return d.group(k); };
  auto span = [&](int64_t j) { return d.span(j); };
  auto last_weighted = [&](int64_t begin, int64_t end) {
    for (int64_t i = std::min(end, n) - 1; i >= begin; --i) {
      if (weight(i) > 0.0) return i;
    }
    return begin;
  };
  const int64_t n_spans = d.n_spans();
  double r = u * d.total();
  for (int64_t j = 0; j < n_spans; ++j) {
    if (!(r - span(j) < 0)) {
      r -= span(j);
      continue;
    }
    for (int64_t k = 32 * j; k < 32 * j + 32; ++k) {
      if (!(r - group(k) < 0)) {
        r -= group(k);
        continue;
      }
      for (int64_t i = 8 * k; i < std::min(n, 8 * k + 8); ++i) {
        r -= weight(i);
        if (r < 0) return i;
      }
      return last_weighted(8 * k, 8 * k + 8);
    }
    return last_weighted(256 * j, 256 * j + 256);
  }
  return last_weighted(0, n);
}

TEST(TokenDraw, PlainDrawIsTheHeadersSequence) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double just_under_1 = std::nextafter(1.0, 0.0);
  int n_checked = 0;
  for (const int64_t n : {1, 7, 8, 13, 255, 256, 257, 4099}) {
    for (int trial = 0; trial < 24; ++trial) {
      const float scale = trial % 3 == 0 ? 0.3f : trial % 3 == 1 ? 3.0f : 400.0f;  // flat, peaked, mostly below e^-700
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = scale * normal(rng);
      if (trial % 4 == 3) x[size_t(trial) % x.size()] = std::numeric_limits<float>::quiet_NaN();
      const float temperature = 0.25f + 0.25f * float(trial % 6);
      for (const double u : {0.0, uniform(rng), uniform(rng), 0.999, just_under_1}) {
        EXPECT_EQ(draw_token(x.data(), n, {temperature, u}), spec_draw(x, temperature, u))
            << "n " << n << ", trial " << trial << ", u " << u;
        ++n_checked;
      }
    }
  }
  EXPECT_EQ(n_checked, 8 * 24 * 5);
}

TEST(TokenDraw, EdgesDrawAsTheHeaderSays) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // No finite scaled logit: the argmax of the logits (all NaN: 0; -inf past a NaN: the first -inf).
  const std::vector<float> all_nan(10, nan), no_finite = {nan, -INFINITY, -INFINITY};
  EXPECT_EQ(draw_token(all_nan.data(), 10, {1.0f, 0.5}), 0);
  EXPECT_EQ(draw_token(no_finite.data(), 3, {1.0f, 0.5}), 1);
  // A temperature that scales a logit to infinity: the argmax.
  const std::vector<float> x = {1.0f, 30.0f, 2.0f, 30.0f};  // (30 / 1e-38 is past the largest float)
  EXPECT_EQ(draw_token(x.data(), 4, {1e-38f, 0.9}), 1);
  // u = 0: the first id of weight > 0; a weight below e^-700 is 0, never drawn.
  const std::vector<float> far = {-715.0f, -2000.0f, 5.0f, -715.0f, 4.0f};
  EXPECT_EQ(draw_token(far.data(), 5, {1.0f, 0.0}), 2);
  EXPECT_EQ(draw_token(far.data(), 5, {1.0f, std::nextafter(1.0, 0.0)}), 4);
  TemperatureWeights w;
  ASSERT_TRUE(w.weigh(far.data(), 5, 1.0f));
  EXPECT_EQ(w.weights()[0], 0.0);  // (e^-720 is a subnormal double, which exp_fixed would have taken from libm's exp)
  EXPECT_EQ(w.weights()[2], 1.0);
  EXPECT_EQ(w.total(), 1.0 + w.weights()[4]);
  // A NaN temperature draws greedily (as the device's kernel takes it), and the sampler takes no uniform for it.
  EXPECT_EQ(draw_token(x.data(), 4, {nan, 0.9}), 1);
  SamplingParams p;
  p.temperature = nan;
  Sampler sampler(1), stream(1);
  EXPECT_EQ(sampler.forward_draw(p, 4).temperature, 0.0f);
  EXPECT_EQ(sampler.sample(x.data(), 4, p), 1);
  EXPECT_EQ(sampler.next_uniform(), stream.next_uniform());
  // One id: always it.
  EXPECT_EQ(draw_token(x.data(), 1, {0.7f, 0.99}), 0);
}

// Sampler::sample's plain draws (no cut) are draw_token's with the stream's next uniform, one a draw whatever the
// logits (an argmax at an overflowing temperature takes one too), and forward_draw() takes the same one.
TEST(TokenDraw, SamplersPlainDrawsTakeOneUniformADraw) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(1000);
  SamplingParams p;
  p.temperature = 0.8f;
  Sampler sampled(42), stream(42), forward(42);
  for (int i = 0; i < 50; ++i) {
    for (float& v : x) v = normal(rng);
    p.temperature = i % 10 == 9 ? 1e-38f : 0.8f;
    const int32_t id = sampled.sample(x.data(), int64_t(x.size()), p);
    EXPECT_EQ(id, draw_token(x.data(), int64_t(x.size()), {p.temperature, stream.next_uniform()})) << "draw " << i;
    const TokenDraw d = forward.forward_draw(p, int64_t(x.size()));
    EXPECT_EQ(id, draw_token(x.data(), int64_t(x.size()), d)) << "draw " << i;
  }
  // A top-p or min-p cut of the whole vocabulary is the nucleus draw, and takes a uniform.
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  const TokenDraw top_p = forward.forward_draw(p, int64_t(x.size()));
  EXPECT_TRUE(draws_nucleus(top_p, int64_t(x.size())));
  EXPECT_EQ(top_p.uniform, stream.next_uniform());
  p.top_p = 1.0f;
  p.min_p = 0.1f;
  const TokenDraw min_p = forward.forward_draw(p, int64_t(x.size()));
  EXPECT_TRUE(draws_nucleus(min_p, int64_t(x.size())));
  EXPECT_EQ(min_p.uniform, stream.next_uniform());
  // Top-k is the top-k draw, with the cuts of its candidates; a top-k as large as the vocabulary cuts nothing.
  p.top_k = 5;
  p.top_p = 0.9f;
  const TokenDraw top_k = forward.forward_draw(p, int64_t(x.size()));
  EXPECT_TRUE(draws_top_k(top_k, int64_t(x.size())));
  EXPECT_EQ(top_k.top_k, 5);
  EXPECT_EQ(top_k.top_p, 0.9f);
  EXPECT_EQ(top_k.min_p, 0.1f);
  EXPECT_EQ(top_k.uniform, stream.next_uniform());
  p.top_k = 1000;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  const TokenDraw whole = forward.forward_draw(p, 1000);
  EXPECT_EQ(whole.top_k, 0);
  EXPECT_FALSE(draws_nucleus(whole, 1000));
  EXPECT_EQ(whole.uniform, stream.next_uniform());
  // A top-p draw of the whole vocabulary takes one too, even where the temperature overflows it to the argmax.
  p.top_k = 0;
  p.top_p = 0.9f;
  p.temperature = 1e-38f;
  EXPECT_EQ(forward.sample(x.data(), int64_t(x.size()), p), int32_t(argmax(x.data(), int64_t(x.size()))));
  stream.next_uniform();
  EXPECT_EQ(forward.next_uniform(), stream.next_uniform());
  p.top_p = 1.0f;
  p.temperature = 0.0f;  // greedy: a draw of its own kind, nothing taken
  EXPECT_EQ(forward.forward_draw(p, 1000).temperature, 0.0f);
  EXPECT_EQ(forward.next_uniform(), stream.next_uniform());
}

// Sampler::sample's top-k draws (with and without top-p and min-p, NaNs, an overflowing temperature) are draw_token's
// with forward_draw(), and draw_from_top_k's from top_k_candidates (what a device hands over) with the row's argmax.
TEST(TokenDraw, TopKDrawsAreTheSamplersFromTheCandidates) {
  std::mt19937 rng(10);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(3000);
  Sampler sampled(7), forward(7);
  std::vector<DrawCandidate> candidates;
  int n_off_argmax = 0;
  for (int i = 0; i < 60; ++i) {
    for (float& v : x) v = normal(rng);
    if (i % 7 == 3) x[size_t(i)] = std::numeric_limits<float>::quiet_NaN();
    SamplingParams p;
    p.temperature = i % 10 == 9 ? 1e-38f : 0.5f + 0.05f * float(i % 20);
    p.top_k = 1 + (i * 37) % 400;
    p.top_p = i % 3 == 1 ? 0.8f : 1.0f;
    p.min_p = i % 4 == 2 ? 0.05f : 0.0f;
    const int64_t V = int64_t(x.size());
    const int32_t id = sampled.sample(x.data(), V, p);
    const TokenDraw d = forward.forward_draw(p, V);
    ASSERT_TRUE(draws_top_k(d, V));
    EXPECT_EQ(id, draw_token(x.data(), V, d)) << "draw " << i;
    top_k_candidates(x.data(), V, d.temperature, d.top_k, candidates);
    EXPECT_EQ(id, draw_from_top_k(candidates, d, int32_t(argmax(x.data(), V)))) << "draw " << i;
    n_off_argmax += id != int32_t(argmax(x.data(), V));
  }
  EXPECT_GT(n_off_argmax, 20);
}

// The header's nucleus draw restated: the whole row sorted by comparison (draw_order), each candidate's w from the
// plain draw's weights by id, the plain draw's total, the running sum in the order, min-p then top-p, pick_weighted.
int32_t nucleus_restated(const std::vector<float>& x, const TokenDraw& d) {
  const int64_t n = int64_t(x.size());
  TemperatureWeights plain;
  if (!plain.weigh(x.data(), n, d.temperature)) return int32_t(argmax(x.data(), n));
  std::vector<DrawCandidate> order;
  for (int64_t i = 0; i < n; ++i) order.emplace_back(scaled_logit(x[size_t(i)], d.temperature), int32_t(i));
  std::sort(order.begin(), order.end(), draw_order);
  const double target = d.top_p < 1.0f ? double(d.top_p) * plain.total() : INFINITY;
  std::vector<double> kept;
  double mass = 0.0;
  for (const auto& [s, id] : order) {
    const double w = plain.weights()[size_t(id)];
    if (!kept.empty() && d.min_p > 0.0f && w < double(d.min_p)) break;
    kept.push_back(w);
    mass += w;
    if (mass >= target) break;
  }
  return order[pick_weighted(kept.data(), kept.size(), mass, d.uniform)].second;
}

// Top-p and min-p over the whole row (the nucleus draw): Sampler::sample and draw_token are the header's cut of the
// full order, over rows whose cut lies inside the first kNucleusCandidates and rows where it lies past them (a flat
// row of 6000 at top-p 0.95), rows narrower than them, ties, NaNs, a row mostly below e^-700, top-p 0 (the best
// alone), min-p alone and with top-p, an overflowing temperature. draw_from_nucleus of the first candidates (what a
// device sends back) gives the same id wherever it decides, and -1 (the logits needed) only where the cut lies past.
TEST(TokenDraw, NucleusDrawIsTheFullOrdersCut) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Sampler sampled(5), forward(5);
  std::vector<DrawCandidate> first;
  int decided = 0, past_the_first = 0, off_argmax = 0;
  for (int i = 0; i < 120; ++i) {
    const int64_t V = std::vector<int64_t>{6000, 3001, 700, 1024, 9}[size_t(i % 5)];
    const float spread = i % 3 == 0 ? 0.3f : 3.0f;  // flat (a nucleus of thousands) or peaked
    std::vector<float> x(static_cast<size_t>(V));
    for (float& v : x) v = spread * normal(rng);
    if (i % 11 == 4) x[size_t(i) % size_t(V)] = std::numeric_limits<float>::quiet_NaN();
    if (i % 13 == 5) {
      for (size_t j = 0; j < x.size(); j += 2) x[j] = 1.0f;  // ties at the top
    }
    if (i % 17 == 6) {
      for (size_t j = 1; j < x.size(); ++j) x[j] = -1000.0f;  // all but one below e^-700
    }
    SamplingParams p;
    p.temperature = i % 19 == 18 ? 1e-38f : 0.6f + 0.1f * float(i % 8);
    p.top_p = std::vector<float>{0.95f, 0.5f, 1.0f, 0.0f, 0.999f, 0.8f}[size_t(i % 6)];
    p.min_p = i % 4 == 2 ? 0.02f : i % 4 == 3 ? 0.5f : 0.0f;
    if (p.top_p == 1.0f && p.min_p == 0.0f) p.min_p = 0.001f;
    const int32_t id = sampled.sample(x.data(), V, p);
    const TokenDraw d = forward.forward_draw(p, V);
    ASSERT_TRUE(draws_nucleus(d, V));
    EXPECT_EQ(id, nucleus_restated(x, d)) << "draw " << i;
    EXPECT_EQ(id, draw_token(x.data(), V, d)) << "draw " << i;
    off_argmax += id != int32_t(argmax(x.data(), V));
    TemperatureWeights plain;
    if (!plain.weigh(x.data(), V, d.temperature)) continue;
    const int64_t k = std::min(kNucleusCandidates, V);
    top_k_candidates(x.data(), V, d.temperature, k, first);
    const int32_t from_first = draw_from_nucleus(first, k == V, plain.total(), d);
    if (from_first >= 0) {
      EXPECT_EQ(from_first, id) << "draw " << i;
      ++decided;
    } else {
      ++past_the_first;
      std::vector<DrawCandidate> order;
      std::vector<double> weights;
      double mass = 0.0;
      EXPECT_GE(nucleus_of_row(x.data(), V, d, order, weights, mass), size_t(k)) << "draw " << i;
    }
  }
  EXPECT_GT(off_argmax, 40);
  EXPECT_GT(decided, 40);
  EXPECT_GT(past_the_first, 5);
  // The order of the whole row: by comparison sort's order, -0 and +0 as equals.
  // (order_candidates below; top_k_candidates in CandidatesAreTheOrdersFirst.)
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 0.0f, -INFINITY, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  order_candidates(x.data(), int64_t(x.size()), 1.0f, first);
  std::vector<int32_t> ids;
  for (const auto& c : first) ids.push_back(c.second);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 7, 0, 1, 4, 3, 5, 6}));
  // With a limit on the keys: a prefix of that order. 0x7fffffff is the key of +-0: every s >= 0.
  std::vector<DrawCandidate> limited;
  order_candidates(x.data(), int64_t(x.size()), 1.0f, limited, 0x7fffffffu);
  ASSERT_EQ(limited.size(), 5u);
  for (size_t j = 0; j < limited.size(); ++j) EXPECT_EQ(limited[j].second, first[j].second);
  std::vector<float> row(5000);
  for (float& v : row) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  order_candidates(row.data(), 5000, 0.7f, first);
  order_candidates(row.data(), 5000, 0.7f, limited, 0x3fffffffu);  // (the key of s = 2: every s >= 2)
  const auto n_at_least_2 = std::count_if(row.begin(), row.end(), [](float v) { return v / 0.7f >= 2.0f; });
  ASSERT_EQ(int64_t(limited.size()), int64_t(n_at_least_2));
  ASSERT_GT(n_at_least_2, 100);
  for (size_t j = 0; j < limited.size(); ++j) ASSERT_EQ(limited[j].second, first[j].second) << j;
}

// top_k_candidates (a radix select, then a sort of the k) is the comparison sort's first k (draw_order): ties at the
// k-th that only the lowest ids enter, NaNs (-inf, last), -0 and +0 as equals, k from 1 to the whole row.
TEST(TokenDraw, CandidatesAreTheOrdersFirst) {
  std::mt19937 rng(13);
  std::vector<DrawCandidate> got;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = std::vector<int64_t>{3000, 129, 5}[size_t(i % 3)];
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      const uint32_t r = rng();
      v = r % 5 == 0 ? float(int(r % 7)) - 3.0f : r % 17 == 1 ? std::numeric_limits<float>::quiet_NaN()
                     : r % 13 == 2 ? -0.0f : std::normal_distribution<float>(0.0f, 2.0f)(rng);
    }
    const float temperature = i % 4 == 3 ? 0.3f : 1.0f;
    std::vector<DrawCandidate> want;
    for (int64_t j = 0; j < n; ++j) want.emplace_back(scaled_logit(x[size_t(j)], temperature), int32_t(j));
    std::sort(want.begin(), want.end(), draw_order);
    for (const int64_t k : {int64_t(1), int64_t(7), std::min<int64_t>(1024, n), n}) {
      if (k > n) continue;
      top_k_candidates(x.data(), n, temperature, k, got);
      ASSERT_EQ(int64_t(got.size()), k);
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(got[size_t(j)].second, want[size_t(j)].second) << "row " << i << ", k " << k << ", candidate " << j;
        ASSERT_EQ(std::signbit(got[size_t(j)].first), std::signbit(want[size_t(j)].first)) << "row " << i;
      }
    }
  }
}

// token_logprobs as the header defines it, restated over SpecPlainDraw at temperature 1 and a comparison sort of the
// whole row; close to a log-softmax in long double; and logprobs_from_best of the order's first logprob_candidates (what
// a device sends back) gives the same bits.
TEST(TokenDraw, LogprobsAreTheHeadersLogSoftmax) {
  std::mt19937 rng(17);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int n_rows = 0;
  for (int i = 0; i < 48; ++i) {
    const int64_t n = std::vector<int64_t>{6000, 257, 13, 1}[size_t(i % 4)];
    std::vector<float> x(static_cast<size_t>(n));
    const float scale = i % 3 == 0 ? 0.3f : i % 3 == 1 ? 3.0f : 300.0f;  // flat, peaked, most below e^-700
    for (float& v : x) {
      const uint32_t r = rng();
      v = r % 11 == 0 ? float(int(r % 5)) : r % 23 == 1 ? nan : r % 19 == 2 ? -0.0f : std::normal_distribution<float>(0.0f, scale)(rng);
    }
    if (i == 40) std::fill(x.begin(), x.end(), nan);                   // no finite logit: m = -inf
    if (i == 41) x[size_t(n / 2)] = INFINITY;                          // m = +inf
    if (i == 42) {  // every s -inf
      std::fill(x.begin(), x.end(), -INFINITY);
      x[0] = nan;
    }
    const int top_n = std::vector<int>{0, 1, 5, 20}[size_t(i / 4 % 4)];
    const int32_t chosen = int32_t(rng() % uint32_t(n));
    TokenLogprob got;
    token_logprobs(x.data(), n, chosen, top_n, got);

    const SpecPlainDraw spec(x, 1.0f);
    const bool finite = std::isfinite(spec.m);
    const double log_z = finite ? double(spec.m) + std::log(spec.total()) : 0.0;
    auto want_logprob = [&](float s) {
      if (!finite) return s == spec.m && spec.m > 0 ? 0.0f : -INFINITY;
      return float(double(s == 0.0f ? 0.0f : s) - log_z);
    };
    std::vector<DrawCandidate> order;
    for (int64_t j = 0; j < n; ++j) order.emplace_back(spec.s[size_t(j)], int32_t(j));
    std::sort(order.begin(), order.end(), draw_order);
    EXPECT_EQ(got.id, chosen);
    EXPECT_EQ(got.logprob, want_logprob(spec.s[size_t(chosen)])) << "row " << i;
    ASSERT_EQ(int64_t(got.top.size()), std::min<int64_t>(top_n, n)) << "row " << i;
    for (size_t j = 0; j < got.top.size(); ++j) {
      EXPECT_EQ(got.top[j].first, order[j].second) << "row " << i << ", top " << j;
      EXPECT_EQ(got.top[j].second, want_logprob(order[j].first)) << "row " << i << ", top " << j;
    }
    if (finite) {  // a log-softmax in long double, to float's rounding and exp_fixed's
      long double z = 0.0L;
      for (const float v : spec.s) z += std::exp((long double)v - (long double)spec.m);
      const long double want = (long double)spec.s[size_t(chosen)] - (long double)spec.m - std::log(z);
      if (std::isfinite(double(want))) {
        EXPECT_NEAR(double(got.logprob), double(want), 1e-6 * std::max(1.0, std::fabs(double(want)))) << "row " << i;
      }
      ++n_rows;
    }
    // The device's answer: the first logprob_candidates, the total and the chosen id's logit.
    std::vector<DrawCandidate> best(order.begin(), order.begin() + logprob_candidates(top_n, n));
    for (auto& c : best) c.first = c.first == 0.0f ? 0.0f : c.first;  // (a device writes -0 as +0)
    TokenLogprob from_best;
    logprobs_from_best(best, spec.total(), chosen, x[size_t(chosen)], top_n, from_best);
    EXPECT_EQ(std::memcmp(&from_best.logprob, &got.logprob, sizeof(float)), 0) << "row " << i;
    ASSERT_EQ(from_best.top.size(), got.top.size());
    for (size_t j = 0; j < got.top.size(); ++j) {
      EXPECT_EQ(from_best.top[j].first, got.top[j].first);
      EXPECT_EQ(std::memcmp(&from_best.top[j].second, &got.top[j].second, sizeof(float)), 0) << "row " << i << ", top " << j;
    }
  }
  EXPECT_GE(n_rows, 40);
}

}  // namespace
}  // namespace deepinfer
