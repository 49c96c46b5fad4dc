// Speculative decoding and its rollback: greedy DSpark speculation reproduces plain greedy decoding token
// for token (exact and fast paths, short and ring-wrapping prompts), and a rollback leaves exactly the
// state that processing only the kept positions leaves (V4 and V4.1).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/generation.h"
#include "golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

std::string v41_dir() { return testing::golden_dir() + "/v41-flash/tiny-a"; }

class Speculative : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(v41_dir())) GTEST_SKIP() << "golden data not found: " << v41_dir();
  }
};

TEST_P(Speculative, GreedyOutputEqualsPlainGreedy) {
  auto model = Model::open(v41_dir(), ModelOptions{.exact = GetParam(), .n_threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto gc = load_golden_case(v41_dir() + "/case-1.safetensors");
  ASSERT_TRUE(gc.ok());
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{0, 5, 9, 17}, gc->prompt}) {
    GenerationOptions options;
    options.max_tokens = GetParam() ? 12 : 40;
    options.stop_at_eos = false;
    const GenerationResult plain = generate(*model.value(), prompt, options);
    options.speculative = true;
    const GenerationResult spec = generate(*model.value(), prompt, options);
    EXPECT_EQ(plain.tokens, spec.tokens) << "prompt of " << prompt.size() << " tokens";
    EXPECT_GT(spec.n_drafted, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Speculative, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? std::string("Exact") : std::string("Fast"); });

// Feeds `first` (decode tokens) after the prompt, rolls back to keep `kept` of them, feeds `then`; the
// logits must equal a fresh run that fed only first[0..kept) and then `then`.
void expect_rollback_exact(Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& first, size_t kept,
                           const std::vector<int32_t>& then) {
  SequenceState a = model.new_sequence();
  ForwardChunk p{&a, prompt, int64_t(prompt.size())};
  model.forward(std::span<const ForwardChunk>(&p, 1));
  ForwardChunk spec{&a, first, 0};
  model.forward(std::span<const ForwardChunk>(&spec, 1));
  model.rollback(a, int64_t(prompt.size() + kept));
  ForwardChunk after{&a, then, 0};
  after.all_logits = true;
  auto got = model.forward(std::span<const ForwardChunk>(&after, 1));

  SequenceState b = model.new_sequence();
  ForwardChunk pb{&b, prompt, int64_t(prompt.size())};
  model.forward(std::span<const ForwardChunk>(&pb, 1));
  std::vector<int32_t> kept_tokens(first.begin(), first.begin() + long(kept));
  for (int32_t id : kept_tokens) {
    ForwardChunk one{&b, std::span<const int32_t>(&id, 1), 0};
    model.forward(std::span<const ForwardChunk>(&one, 1));
  }
  ForwardChunk afterb{&b, then, 0};
  afterb.all_logits = true;
  auto want = model.forward(std::span<const ForwardChunk>(&afterb, 1));
  EXPECT_EQ(want[0].logits, got[0].logits) << "kept " << kept << " of " << first.size();
}

TEST(Rollback, RestoresTheStateOfTheKeptPositionsV4) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "golden data not found: " << dir;
  auto model = Model::open(dir, ModelOptions{.exact = false, .n_threads = 2});
  ASSERT_TRUE(model.ok());
  auto gc = load_golden_case(dir + "/case-3.safetensors");  // 361 tokens: rings wrap, groups of 4 and 128
  ASSERT_TRUE(gc.ok());
  const std::vector<int32_t> first = {5, 6, 7, 8, 9, 10, 11, 12};
  for (size_t kept : {0, 1, 3, 7}) expect_rollback_exact(*model.value(), gc->prompt, first, kept, {20, 21, 22});
  // Crossing a 128-group boundary: the prompt ends 23 positions before position 384.
  std::vector<int32_t> long_first(15, 3);
  expect_rollback_exact(*model.value(), gc->prompt, long_first, 2, {4, 5});
}

TEST(Rollback, RestoresTheStateOfTheKeptPositionsV41) {
  if (!std::filesystem::exists(v41_dir())) GTEST_SKIP() << "golden data not found: " << v41_dir();
  auto model = Model::open(v41_dir(), ModelOptions{.exact = false, .n_threads = 2});
  ASSERT_TRUE(model.ok());
  auto gc = load_golden_case(v41_dir() + "/case-1.safetensors");
  ASSERT_TRUE(gc.ok());
  const std::vector<int32_t> first = {5, 6, 7, 8, 9, 10};
  for (size_t kept : {0, 1, 2, 5}) expect_rollback_exact(*model.value(), gc->prompt, first, kept, {20, 21, 22});
}

}  // namespace
}  // namespace deepinfer
