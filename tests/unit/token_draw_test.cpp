// model/token_draw.h: the plain temperature draw is the sequence its header writes out (restated here one id at a time,
// with the scalar exp_fixed, against the 8-lane weights and the hierarchical walk), the sampler's plain draws are
// draw_token's with one uniform a draw from its stream, and the edges (no finite logit, weights below e^-700, u = 0).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "model/ops.h"
#include "model/token_draw.h"

namespace deepinfer {
namespace {

// The header's sequence, written out again as plainly as it reads.
int64_t spec_draw(const std::vector<float>& x, float temperature, double u) {
  const int64_t n = int64_t(x.size());
  std::vector<float> s(x.size());
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[size_t(i)] / temperature;
    s[size_t(i)] = std::isnan(v) ? -INFINITY : v;
  }
  float m = -INFINITY;
  for (const float v : s) m = std::max(m, v);
  if (!std::isfinite(m)) return argmax(x.data(), n);
  auto weight = [&](int64_t i) {
    if (i >= n) return 0.0;
    const double d = double(s[size_t(i)]) - double(m);
    return d >= -700.0 ? exp_fixed(d) : 0.0;
  };
  auto group = [&](int64_t k) {
    const int64_t i = 8 * k;
    return ((weight(i) + weight(i + 1)) + (weight(i + 2) + weight(i + 3))) +
           ((weight(i + 4) + weight(i + 5)) + (weight(i + 6) + weight(i + 7)));
  };
  auto span = [&](int64_t j) {
    std::vector<double> v(32);
    for (int64_t k = 0; k < 32; ++k) v[size_t(k)] = group(32 * j + k);
    for (int64_t width = 1; width < 32; width *= 2) {
      for (int64_t k = 0; k < 32; k += 2 * width) v[size_t(k)] = v[size_t(k)] + v[size_t(k + width)];
    }
    return v[0];
  };
  auto last_weighted = [&](int64_t begin, int64_t end) {
    for (int64_t i = std::min(end, n) - 1; i >= begin; --i) {
      if (weight(i) > 0.0) return i;
    }
    return begin;
  };
  const int64_t n_spans = ((n + 7) / 8 + 31) / 32;
  double total = 0.0;
  for (int64_t j = 0; j < n_spans; ++j) total += span(j);
  double r = u * total;
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
  ASSERT_TRUE(Sampler::forward_drawable(p, 4));
  EXPECT_EQ(sampler.forward_draw(p, 4)->temperature, 0.0f);
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
    const std::optional<TokenDraw> d = forward.forward_draw(p, int64_t(x.size()));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(id, draw_token(x.data(), int64_t(x.size()), *d)) << "draw " << i;
  }
  // A top-p or min-p cut of the whole vocabulary is no TokenDraw: none, and nothing taken from the stream.
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  EXPECT_FALSE(forward.forward_draw(p, int64_t(x.size())).has_value());
  p.top_p = 1.0f;
  p.min_p = 0.1f;
  EXPECT_FALSE(forward.forward_draw(p, int64_t(x.size())).has_value());
  EXPECT_EQ(forward.next_uniform(), stream.next_uniform());
  // Top-k is one, with the cuts of its candidates, and takes a uniform; a top-k as large as the vocabulary is none.
  p.top_k = 5;
  p.top_p = 0.9f;
  const std::optional<TokenDraw> top_k = forward.forward_draw(p, int64_t(x.size()));
  ASSERT_TRUE(top_k.has_value());
  EXPECT_EQ(top_k->top_k, 5);
  EXPECT_EQ(top_k->top_p, 0.9f);
  EXPECT_EQ(top_k->min_p, 0.1f);
  EXPECT_EQ(top_k->uniform, stream.next_uniform());
  p.top_k = 1000;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  const std::optional<TokenDraw> whole = forward.forward_draw(p, 1000);
  EXPECT_EQ(whole->top_k, 0);
  EXPECT_EQ(whole->uniform, stream.next_uniform());
  // A top-p draw of the whole vocabulary takes one too, even where the temperature overflows it to the argmax.
  p.top_k = 0;
  p.top_p = 0.9f;
  p.temperature = 1e-38f;
  EXPECT_EQ(forward.sample(x.data(), int64_t(x.size()), p), int32_t(argmax(x.data(), int64_t(x.size()))));
  stream.next_uniform();
  EXPECT_EQ(forward.next_uniform(), stream.next_uniform());
  p.top_p = 1.0f;
  p.temperature = 0.0f;  // greedy: a draw of its own kind, nothing taken
  EXPECT_TRUE(Sampler::forward_drawable(p, 1000));
  EXPECT_EQ(forward.forward_draw(p, 1000)->temperature, 0.0f);
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
    const std::optional<TokenDraw> d = forward.forward_draw(p, V);
    ASSERT_TRUE(d.has_value() && draws_top_k(*d, V));
    EXPECT_EQ(id, draw_token(x.data(), V, *d)) << "draw " << i;
    top_k_candidates(x.data(), V, d->temperature, d->top_k, candidates);
    EXPECT_EQ(id, draw_from_top_k(candidates, *d, int32_t(argmax(x.data(), V)))) << "draw " << i;
    n_off_argmax += id != int32_t(argmax(x.data(), V));
  }
  EXPECT_GT(n_off_argmax, 20);
}

}  // namespace
}  // namespace deepinfer
