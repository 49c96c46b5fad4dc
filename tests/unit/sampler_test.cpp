// Sampler additions for serving: presence / frequency / repetition penalties, log-probabilities with top-N,
// and seeded reproducibility.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "model/ops.h"
#include "model/token_draw.h"

namespace deepinfer {
namespace {

TEST(SamplerPenalties, PresenceAndFrequencyFollowOpenAi) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  PenaltyScratch scratch;
  const std::vector<int32_t> prompt = {0};
  const std::vector<int32_t> generated = {2, 3, 2, 2};
  apply_penalties(logits.data(), 4, p, prompt, generated, scratch);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                 // prompt-only tokens are not penalised
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
  EXPECT_FLOAT_EQ(logits[2], 3.0f - 0.5f - 0.75f);  // seen 3 times
  EXPECT_FLOAT_EQ(logits[3], 4.0f - 0.5f - 0.25f);  // seen once
  for (uint32_t c : scratch.counts) EXPECT_EQ(c, 0u);  // scratch left clean
}

TEST(SamplerPenalties, RepetitionDividesPositiveAndMultipliesNegative) {
  std::vector<float> logits = {2.0f, -2.0f, 5.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  PenaltyScratch scratch;
  const std::vector<int32_t> prompt = {0, 0};
  const std::vector<int32_t> generated = {1};
  apply_penalties(logits.data(), 3, p, prompt, generated, scratch);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);  // once, however often it appears
  EXPECT_FLOAT_EQ(logits[1], -4.0f);
  EXPECT_FLOAT_EQ(logits[2], 5.0f);
}

TEST(SamplerPenalties, AllThreeTogetherAndRepeatedCallsAgree) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = 1.0f;
  PenaltyScratch scratch;
  const std::vector<int32_t> prompt = {1};
  const std::vector<int32_t> generated = {1, 1, 2};
  for (int round = 0; round < 2; ++round) {
    std::vector<float> logits = {3.0f, 3.0f, 3.0f};
    apply_penalties(logits.data(), 3, p, prompt, generated, scratch);
    EXPECT_FLOAT_EQ(logits[0], 3.0f);
    EXPECT_FLOAT_EQ(logits[1], 2.0f - 1.0f - 2.0f);
    EXPECT_FLOAT_EQ(logits[2], 2.0f - 1.0f - 1.0f);
  }
}

TEST(SamplerPenalties, GreedyPicksTheUnpenalisedToken) {
  std::vector<float> logits = {1.0f, 5.0f, 4.5f};
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  PenaltyScratch scratch;
  const std::vector<int32_t> generated = {1};
  apply_penalties(logits.data(), 3, p, {}, generated, scratch);
  Sampler sampler(1);
  EXPECT_EQ(sampler.sample(logits.data(), 3, p), 2);
}

// The penalties restated as the sampler applied them before they became edits: repetition once per token of the
// prompt or output, then for each generated token with count c, x -= frequency * c + presence.
void restated_penalties(std::vector<float>& x, const SamplingParams& p, const std::vector<int32_t>& prompt,
                        const std::vector<int32_t>& generated) {
  const int64_t n = int64_t(x.size());
  auto in = [&](int32_t id) { return id >= 0 && id < n; };
  if (p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f) {
    std::vector<bool> done(x.size());
    for (const auto* ids : {&prompt, &generated}) {
      for (int32_t id : *ids) {
        if (!in(id) || done[size_t(id)]) continue;
        done[size_t(id)] = true;
        float& l = x[size_t(id)];
        l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      }
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::vector<uint32_t> count(x.size());
    for (int32_t id : generated) count[size_t(in(id) ? id : 0)] += in(id);
    for (int64_t id = 0; id < n; ++id) {
      if (count[size_t(id)] == 0) continue;
      volatile float product = p.frequency_penalty * float(count[size_t(id)]);  // (rounded alone, as sampler.cpp's)
      x[size_t(id)] -= product + p.presence_penalty;
    }
  }
}

// penalty_edits (what a forward applies itself, on a GPU on the device) give the restated penalties' bits: random
// rows with -0, NaNs and infinities, every combination of the three penalties (a negative repetition penalty: none),
// tokens repeated, outside the vocabulary, in the prompt only; and a draw with the edits (and on every third row a
// mask) is the sampler's draw after apply_penalties and the mask (greedy, top-k, top-p, plain), taking the same
// uniform.
TEST(SamplerPenalties, EditsGiveTheRestatedPenaltiesBits) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  PenaltyScratch scratch;
  std::vector<LogitEdit> edits;
  int n_changed = 0;
  for (int i = 0; i < 60; ++i) {
    const int64_t V = i % 3 == 0 ? 50 : 3001;
    std::vector<float> x(static_cast<size_t>(V));
    for (float& v : x) v = normal(rng);
    x[3] = -0.0f;
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[7] = -std::numeric_limits<float>::infinity();
    std::vector<int32_t> prompt, generated;
    for (int j = 0; j < 40; ++j) prompt.push_back(int32_t(rng() % uint32_t(V + 3)) - 1);
    for (int j = 0; j < 30; ++j) generated.push_back(j % 7 == 0 ? 3 + int32_t(j % 3) * 2 : int32_t(rng() % uint32_t(V)));
    generated.push_back(-1);  // (outside the vocabulary: passed over)
    generated.push_back(int32_t(V) + 2);
    SamplingParams p;
    p.repetition_penalty = std::vector<float>{1.0f, 1.3f, 0.8f, -2.0f}[size_t(i % 4)];
    p.presence_penalty = i % 5 == 1 ? 0.0f : 0.4f;
    p.frequency_penalty = i % 3 == 2 ? 0.0f : -0.3f + 0.05f * float(i % 7);
    p.temperature = i % 4 == 0 ? 0.0f : 0.9f;
    if (i % 4 == 1) p.top_k = 20;
    if (i % 4 == 2) p.top_p = 0.8f;
    std::vector<float> want = x, got = x;
    restated_penalties(want, p, prompt, generated);
    penalty_edits(V, p, prompt, generated, scratch, edits);
    apply_edits(got.data(), V, edits);
    for (int64_t j = 0; j < V; ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(j)]), std::bit_cast<uint32_t>(want[size_t(j)])) << "row " << i << ", id " << j;
      n_changed += std::bit_cast<uint32_t>(got[size_t(j)]) != std::bit_cast<uint32_t>(x[size_t(j)]);
    }
    for (uint32_t c : scratch.counts) ASSERT_EQ(c, 0u);
    std::vector<uint8_t> allowed;  // (every third row: a JSON answer's mask too, made after the edits)
    if (i % 3 == 1) {
      for (int64_t j = 0; j < V; ++j) allowed.push_back(rng() % 10 < 7);
      for (int64_t j = 0; j < V; ++j) {
        if (!allowed[size_t(j)]) want[size_t(j)] = -std::numeric_limits<float>::infinity();
      }
    }
    Sampler from_logits{uint64_t(i)}, in_forward{uint64_t(i)};
    const int32_t id = from_logits.sample(want.data(), V, p);
    TokenDraw d = in_forward.forward_draw(p, V);
    d.edits = edits;
    d.allowed = allowed;
    if (!allowed.empty()) EXPECT_TRUE(allowed[size_t(id)]) << "row " << i;
    EXPECT_EQ(draw_token(x.data(), V, d), id) << "row " << i;
    EXPECT_EQ(from_logits.next_uniform(), in_forward.next_uniform());
  }
  EXPECT_GT(n_changed, 1000);
}

TEST(SamplerLogprobs, LogSoftmaxAndTopN) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), std::log(3.0f), std::log(2.0f)};  // probs 1:3:3:2 / 9
  TokenLogprob out;
  token_logprobs(logits.data(), 4, 3, 3, out);
  EXPECT_EQ(out.id, 3);
  EXPECT_NEAR(out.logprob, std::log(2.0 / 9.0), 1e-6);
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].first, 1);  // ties: lower id first
  EXPECT_EQ(out.top[1].first, 2);
  EXPECT_EQ(out.top[2].first, 3);
  EXPECT_NEAR(out.top[0].second, std::log(3.0 / 9.0), 1e-6);
}

TEST(Sampler, SameSeedSameDraws) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  SamplingParams p;
  p.temperature = 1.0f;
  for (float top_p : {1.0f, 0.9f}) {
    p.top_p = top_p;
    Sampler a(42), b(42);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits.data(), 1000, p), b.sample(logits.data(), 1000, p));
  }
}

// A textbook nucleus draw: every candidate sorted, the softmax summed in
// that order, min-p then top-p, one uniform.
int32_t full_sort_draw(const std::vector<float>& logits, const SamplingParams& p, Sampler& rng) {
  std::vector<std::pair<float, int32_t>> c;
  for (size_t i = 0; i < logits.size(); ++i) c.emplace_back(logits[i] / p.temperature, int32_t(i));
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::vector<double> probs(c.size());
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) total += probs[i] = exp_fixed(double(c[i].first) - double(c[0].first));
  for (double& v : probs) v /= total;
  size_t n = c.size();
  if (p.min_p > 0.0f) {
    while (n > 1 && probs[n - 1] < p.min_p * probs[0]) --n;
  }
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < n; ++i) {
      cumulative += probs[i];
      if (cumulative >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += probs[i];
  double r = rng.next_uniform() * mass;
  for (size_t i = 0; i < n; ++i) {
    r -= probs[i];
    if (r < 0) return c[i].second;
  }
  while (n > 1 && probs[n - 1] == 0.0) --n;
  return c[n - 1].second;
}

// Top-p and min-p over the whole vocabulary (the nucleus draw) are the full sort's draws with the probabilities summed
// as fractions of the total (the bits that rounding decides differ, but no draw here lands on them), over a
// flat distribution (a nucleus of most candidates), a peaked one, ties, a small vocabulary, and a
// Zipf-like one with masked tokens and tokens far below the rest.
TEST(Sampler, TopPAndMinPDrawAsAFullSort) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> distributions(5);
  for (int i = 0; i < 20000; ++i) distributions[0].push_back(3.0f * normal(gen));                    // flat
  for (int i = 0; i < 20000; ++i) distributions[1].push_back(2.0f * normal(gen) + (i % 997 == 0 ? 14.0f : 0.0f));  // peaked
  for (int i = 0; i < 5000; ++i) distributions[2].push_back(float(i % 7));                           // ties
  for (int i = 0; i < 100; ++i) distributions[3].push_back(normal(gen));                             // < 256
  // Zipf-like (the nucleus most of the vocabulary), some tokens masked and some far below the rest (the last bucket).
  std::vector<int> rank(20000);
  std::iota(rank.begin(), rank.end(), 1);
  std::shuffle(rank.begin(), rank.end(), gen);
  for (int i = 0; i < 20000; ++i) {
    distributions[4].push_back(i % 501 == 0 ? -INFINITY : i % 333 == 0 ? -90.0f : -float(std::log(double(rank[size_t(i)]))));
  }
  for (size_t d = 0; d < distributions.size(); ++d) {
    for (const auto& [top_p, min_p] : {std::pair{0.9f, 0.0f}, {1.0f, 0.05f}, {0.95f, 0.01f}, {0.5f, 0.0f}}) {
      SamplingParams p;
      p.temperature = 0.8f;
      p.top_p = top_p;
      p.min_p = min_p;
      Sampler head(11), full(11);
      for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(head.sample(distributions[d].data(), int64_t(distributions[d].size()), p), full_sort_draw(distributions[d], p, full))
            << "distribution " << d << ", top_p " << top_p << ", min_p " << min_p << ", draw " << i;
      }
    }
  }
}

// Past 8 tokens the softmax runs 8 lanes at a time (AVX-512 where the CPU has it) and the last few on their own: the
// draws still follow the distribution, a token of the tail included.
TEST(Sampler, PlainTemperatureOverAVocabularyFollowsTheDistribution) {
  std::vector<float> logits(1003, 0.0f);
  for (size_t i = 7; i < logits.size(); i += 100) logits[i] = std::log(50.0f);  // 10 heavy tokens
  logits[1001] = std::log(50.0f);                                             // and one in the tail
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler s(9);
  constexpr int kDraws = 8000;
  int heavy = 0, tail = 0;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t id = s.sample(logits.data(), int64_t(logits.size()), p);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 1003);
    heavy += logits[size_t(id)] > 0.0f;
    tail += id == 1001;
  }
  EXPECT_NEAR(heavy / double(kDraws), 550.0 / 1542.0, 0.025);  // 11 tokens of weight 50 beside 992 of weight 1
  EXPECT_NEAR(tail, kDraws * 50.0 / 1542.0, 80.0);
}

// Edge cases on every path (plain temperature, top-p, min-p, top-k): each draw is a token the cuts allow. A single
// finite logit among masked ones is always drawn; a NaN logit never is; a vocabulary under 8; min-p 1 keeps only the
// best (here two tied, +0 and -0); a temperature so small that the logits scale to infinity draws greedily.
TEST(Sampler, EdgeCasesDrawOnlyAllowedTokens) {
  struct Case {
    std::vector<float> logits;
    float temperature;
    std::vector<int32_t> allowed;  // for every parameter set below but min_p 1 ...
    std::vector<int32_t> best;     // ... which keeps only these
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> one_finite(300, -inf);
  one_finite[123] = 2.0f;
  std::vector<float> with_nan(300);
  for (size_t i = 0; i < with_nan.size(); ++i) with_nan[i] = float(std::sin(double(i)));
  with_nan[7] = nan;
  with_nan[250] = nan;
  std::vector<int32_t> all_but_nan;
  for (int32_t i = 0; i < 300; ++i) {
    if (i != 7 && i != 250) all_but_nan.push_back(i);
  }
  int32_t best_of_nan = 0;
  for (int32_t i : all_but_nan) best_of_nan = with_nan[size_t(i)] > with_nan[size_t(best_of_nan)] ? i : best_of_nan;
  const std::vector<Case> cases = {
      {{0.5f, 1.5f, -1.0f, 1.5f, 0.0f}, 1.0f, {0, 1, 2, 3, 4}, {1, 3}},  // under 8 tokens, a tie at the top
      {one_finite, 0.7f, {123}, {123}},
      {with_nan, 0.9f, all_but_nan, {best_of_nan}},
      {{5.0f, 0.1f, -3.0f, 4.0f}, 1e-38f, {0}, {0}},  // scaled to +-inf: greedy
      {{0.0f, -0.0f, -1.0f, -2.0f, -40.0f, -90.0f, 0.0f, -0.5f, -0.25f}, 1.0f, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 1, 6}},
  };
  std::vector<SamplingParams> params(6);
  params[1].top_p = 0.9f;
  params[2].min_p = 0.3f;
  params[3].top_p = 0.99999994f;
  params[4].top_k = 3;
  params[5].min_p = 1.0f;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t k = 0; k < params.size(); ++k) {
      SamplingParams p = params[k];
      p.temperature = cases[c].temperature;
      const std::vector<int32_t>& allowed = k == 5 ? cases[c].best : cases[c].allowed;
      Sampler s(31);
      for (int i = 0; i < 50; ++i) {
        const int32_t id = s.sample(cases[c].logits.data(), int64_t(cases[c].logits.size()), p);
        ASSERT_TRUE(std::find(allowed.begin(), allowed.end(), id) != allowed.end())
            << "case " << c << ", parameters " << k << ": drew " << id;
      }
    }
  }
}

// Greedy (argmax, model/ops.h, over 8 lanes): the first of the largest, past a vector's worth and in the tail, -0 and
// +0 alike; NaNs passed over, one at index 0 included; 0 where every logit is NaN.
TEST(Sampler, GreedyTakesTheFirstLargestAndPassesOverNaNs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits(21, -1.0f);
  logits[13] = logits[19] = 2.0f;
  SamplingParams greedy;
  Sampler s(1);
  EXPECT_EQ(s.sample(logits.data(), 21, greedy), 13);
  logits[0] = nan;
  logits[13] = nan;
  EXPECT_EQ(s.sample(logits.data(), 21, greedy), 19);
  EXPECT_EQ(argmax(logits.data(), 12), 1);  // all -1 past the NaN: the first of them
  const std::vector<float> zeros = {-1.0f, -0.0f, 0.0f};
  EXPECT_EQ(argmax(zeros.data(), 3), 1);
  const std::vector<float> all_nan(10, nan);
  EXPECT_EQ(argmax(all_nan.data(), 10), 0);
  EXPECT_EQ(max_value(all_nan.data(), 10), -std::numeric_limits<float>::infinity());
}

// A NaN logit is a masked one: the same draws as with -inf in its place, on every path.
TEST(Sampler, NanLogitsDrawAsMaskedOnes) {
  std::vector<float> with_nan(300), masked;
  for (size_t i = 0; i < with_nan.size(); ++i) with_nan[i] = float(std::sin(double(i)) * 3.0);
  with_nan[7] = with_nan[250] = std::numeric_limits<float>::quiet_NaN();
  masked = with_nan;
  masked[7] = masked[250] = -std::numeric_limits<float>::infinity();
  std::vector<SamplingParams> params(4);
  params[1].top_p = 0.9f;
  params[2].min_p = 0.1f;
  params[3].top_k = 20;
  for (size_t k = 0; k < params.size(); ++k) {
    params[k].temperature = 0.8f;
    Sampler a(8), b(8);
    for (int i = 0; i < 100; ++i) {
      ASSERT_EQ(a.sample(with_nan.data(), 300, params[k]), b.sample(masked.data(), 300, params[k])) << "parameters " << k << ", draw " << i;
    }
  }
}

// A top-k that keeps the whole vocabulary cuts nothing: the plain temperature's draws.
TEST(Sampler, TopKOfTheWholeVocabularyIsPlainTemperature) {
  std::vector<float> logits(500);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::cos(double(i) * 0.37) * 4.0);
  SamplingParams plain, top_k;
  plain.temperature = top_k.temperature = 0.7f;
  top_k.top_k = 600;
  Sampler a(21), b(21);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(a.sample(logits.data(), 500, plain), b.sample(logits.data(), 500, top_k)) << "draw " << i;
}

TEST(Sampler, PlainTemperatureFollowsTheDistribution) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // 1:3
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler s(7);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) ones += s.sample(logits.data(), 2, p) == 1;
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

}  // namespace
}  // namespace deepinfer
