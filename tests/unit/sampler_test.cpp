// Sampler additions for serving: presence / frequency / repetition penalties, log-probabilities with top-N,
// and seeded reproducibility.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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
