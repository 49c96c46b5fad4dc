// Speculative sampling's step (verify_draft, engine/generation.h) and the distribution it tests drafts against
// (Sampler::distribution): the tokens it emits follow the distribution Sampler::sample draws from, under every cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "engine/generation.h"
#include "engine/sampler.h"

namespace deepinfer {
namespace {

// 60 tokens of logits spread over a few units, so that each cut below removes a good part of the mass.
std::vector<float> spread_logits() {
  std::vector<float> logits(60);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(3.0 * std::sin(double(i) * 0.7) + 0.05 * double(i));
  return logits;
}

// The probability of each token under Sampler::distribution, which must sum to 1.
std::map<int32_t, double> probabilities(const std::vector<float>& logits, const SamplingParams& p) {
  Sampler s(1);
  std::vector<std::pair<int32_t, double>> dist;
  s.distribution(logits.data(), int64_t(logits.size()), p, dist);
  std::map<int32_t, double> q;
  double sum = 0;
  for (const auto& [id, prob] : dist) {
    EXPECT_EQ(q.count(id), 0u) << "token " << id << " twice";
    q[id] = prob;
    sum += prob;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  return q;
}

// Frequencies of `n` tokens against q: each within 5 standard deviations, none outside q's support.
void expect_follows(const std::map<int32_t, int>& counts, int n, const std::map<int32_t, double>& q, const char* what) {
  for (const auto& [id, c] : counts) ASSERT_TRUE(q.count(id)) << what << ": token " << id << " has no probability";
  for (const auto& [id, prob] : q) {
    const auto it = counts.find(id);
    const double freq = it == counts.end() ? 0.0 : double(it->second) / n;
    EXPECT_NEAR(freq, prob, 5.0 * std::sqrt(prob * (1.0 - prob) / n) + 1e-9) << what << ": token " << id;
  }
}

TEST(SpeculativeSampling, VerifiedTokensFollowTheSamplersDistribution) {
  const std::vector<float> logits = spread_logits();
  std::vector<SamplingParams> params(4);
  params[0].top_p = 0.6f;   // cuts ~40% of the mass: a draft accepted with its uncut probability was emitted too rarely
  params[1].min_p = 0.2f;
  params[2].top_k = 5;
  params[3].top_p = 1.0f;   // no cut
  for (size_t k = 0; k < params.size(); ++k) {
    SamplingParams p = params[k];
    p.temperature = 0.9f;
    const std::map<int32_t, double> q = probabilities(logits, p);
    ASSERT_GE(q.size(), 3u);
    // The draft: the second most likely token (a likely draft, accepted often but not always).
    std::vector<std::pair<double, int32_t>> by_prob;
    for (const auto& [id, prob] : q) by_prob.emplace_back(prob, id);
    std::sort(by_prob.rbegin(), by_prob.rend());
    const int32_t draft = by_prob[1].second;
    constexpr int kTrials = 40000;
    Sampler verifier(17), plain(18);
    std::map<int32_t, int> verified, sampled;
    int accepted_count = 0;
    for (int i = 0; i < kTrials; ++i) {
      bool accepted = false;
      const int32_t token = verify_draft(verifier, logits.data(), int64_t(logits.size()), p, draft, accepted);
      ASSERT_EQ(accepted, token == draft);
      accepted_count += accepted;
      ++verified[token];
      ++sampled[plain.sample(logits.data(), int64_t(logits.size()), p)];
    }
    SCOPED_TRACE("parameters " + std::to_string(k));
    expect_follows(sampled, kTrials, q, "Sampler::sample");
    expect_follows(verified, kTrials, q, "verify_draft");
    EXPECT_NEAR(double(accepted_count) / kTrials, q.at(draft), 0.02);
  }
}

// Greedy: the draft is accepted exactly where it is the best token, else the best token is emitted.
TEST(SpeculativeSampling, GreedyAcceptsOnlyTheBestToken) {
  const std::vector<float> logits = spread_logits();
  SamplingParams p;
  Sampler s(3);
  const int32_t best = s.sample(logits.data(), int64_t(logits.size()), p);
  bool accepted = false;
  EXPECT_EQ(verify_draft(s, logits.data(), int64_t(logits.size()), p, best, accepted), best);
  EXPECT_TRUE(accepted);
  EXPECT_EQ(verify_draft(s, logits.data(), int64_t(logits.size()), p, (best + 1) % 60, accepted), best);
  EXPECT_FALSE(accepted);
}

}  // namespace
}  // namespace deepinfer
