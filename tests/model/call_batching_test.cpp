// How many calls the model makes into the backend (on a GPU each call waits for the device once), counted by a
// wrapper around the fast CPU backend.
// - Backend::each_call_waits: for a backend whose every call waits, the model puts a prefill's MoE experts into
//   groups of whole experts (one linears() call for their w1 / w3, one for their w2) instead of a group per
//   expert. The logits must equal those of the model that groups per expert, bit for bit, with fewer calls,
//   for one sequence's prefill and decode and for a forward of four prompts (2888 routed rows a layer, more
//   than one group holds).
// - A batched decode step makes as many calls as one sequence's step: its sequences' index scores, attention
//   and linear ops each go in one call.
// - Backend::place_experts is called once at open, with every routed expert.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "golden_util.h"
#include "model/teacher_forcing.h"
#include "model/weight_traffic.h"

namespace deepinfer {
namespace {

class CountsCalls final : public Backend {
 public:
  CountsCalls(std::unique_ptr<Backend> inner, bool waits, int64_t* n_linear_calls, int64_t* n_calls = nullptr)
      : inner_(std::move(inner)), waits_(waits), n_linear_calls_(n_linear_calls), n_calls_(n_calls ? n_calls : &unused_) {}
  const char* name() const override { return inner_->name(); }
  bool each_call_waits() const override { return waits_; }
  Status place_experts(int64_t other_weight_bytes, std::span<const LinearWeight* const> experts) override {
    placements.push_back({other_weight_bytes, std::vector<const LinearWeight*>(experts.begin(), experts.end())});
    return {};
  }
  struct Placement {
    int64_t other_weight_bytes;
    std::vector<const LinearWeight*> experts;
  };
  std::vector<Placement> placements;  // every place_experts call
  void linear(const LinearParams& p) override {
    ++*n_linear_calls_, ++*n_calls_;
    inner_->linear(p);
  }
  void linears(std::span<const LinearParams> ps) override {
    ++*n_linear_calls_, ++*n_calls_;
    inner_->linears(ps);
  }
  void hc_mix(const HcMixParams& p) override {
    ++*n_calls_;
    inner_->hc_mix(p);
  }
  void sparse_attention(const SparseAttentionParams& p) override {
    ++*n_calls_;
    inner_->sparse_attention(p);
  }
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override {
    ++*n_calls_;
    inner_->sparse_attentions(ps);
  }
  void index_scores(const IndexScoreParams& p) override {
    ++*n_calls_;
    inner_->index_scores(p);
  }
  void index_scores_batch(std::span<const IndexScoreParams> ps) override {
    ++*n_calls_;
    inner_->index_scores_batch(ps);
  }
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override { inner_->for_rows(n, body); }
  bool kernels_differ_by_token_kind() const override { return inner_->kernels_differ_by_token_kind(); }
  void set_token_kind(TokenKind kind) override { inner_->set_token_kind(kind); }

 private:
  std::unique_ptr<Backend> inner_;
  bool waits_;
  int64_t* n_linear_calls_;
  int64_t* n_calls_;  // every call but for_rows (host work)
  int64_t unused_ = 0;
};

std::unique_ptr<Model> open_model(const std::string& dir, bool waits, int64_t* n_linear_calls, int64_t* n_calls = nullptr) {
  ModelOptions options;
  options.wrap_backend = [=](std::unique_ptr<Backend> fast) -> std::unique_ptr<Backend> {
    return std::make_unique<CountsCalls>(std::move(fast), waits, n_linear_calls, n_calls);
  };
  auto model = Model::open(dir, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(model.value()) : nullptr;
}

GoldenCase load_case(const std::string& dir, int case_index) {
  auto gc = load_golden_case(dir + "/case-" + std::to_string(case_index) + ".safetensors");
  EXPECT_TRUE(gc.ok()) << gc.status().message();
  return gc.ok() ? std::move(gc.value()) : GoldenCase{};
}

// Prefill then 8 teacher-forced decode steps of golden case `case_index`, grouped per expert and by waits.
void expect_same_logits(const std::string& dir, int case_index) {
  if (!std::filesystem::exists(dir + "/case-" + std::to_string(case_index) + ".safetensors")) {
    GTEST_SKIP() << "golden data not found in " << dir;
  }
  const GoldenCase gc = load_case(dir, case_index);
  const std::vector<int32_t> continuation(gc.continuation.begin(), gc.continuation.begin() + 8);
  int64_t calls_apart = 0, calls_waiting = 0;
  auto apart = open_model(dir, false, &calls_apart);
  auto waiting = open_model(dir, true, &calls_waiting);
  ASSERT_TRUE(apart && waiting);
  const auto want = run_teacher_forced(*apart, gc.prompt, continuation, {});
  const auto got = run_teacher_forced(*waiting, gc.prompt, continuation, {});
  EXPECT_EQ(got.logits, want.logits);
  EXPECT_LT(calls_waiting, calls_apart);
}

TEST(CallBatching, V4FlashPrefillMatchesExpertsApart) { expect_same_logits(testing::golden_dir() + "/v4-flash/flash-tiny", 2); }
TEST(CallBatching, V4ProPrefillMatchesExpertsApart) { expect_same_logits(testing::golden_dir() + "/v4-flash/pro-tiny", 3); }
TEST(CallBatching, V41PrefillMatchesExpertsApart) { expect_same_logits(testing::golden_dir() + "/v41-flash/tiny-a", 2); }

// Four copies of case 3's prompt (361 tokens, 2 experts a token) in one forward: 2888 routed rows a layer,
// so the experts go in two groups (2176-2360 rows, then the rest).
TEST(CallBatching, FourPromptsInOneForwardMatchExpertsApart) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir + "/case-3.safetensors")) GTEST_SKIP() << "golden data not found in " << dir;
  const GoldenCase gc = load_case(dir, 3);
  int64_t calls[2] = {0, 0};
  std::vector<std::vector<float>> logits[2];
  for (int waits = 0; waits < 2; ++waits) {
    auto model = open_model(dir, waits == 1, &calls[waits]);
    ASSERT_TRUE(model);
    std::vector<SequenceState> states;
    for (int i = 0; i < 4; ++i) states.push_back(model->new_sequence());
    std::vector<ForwardChunk> chunks;
    for (SequenceState& state : states) chunks.push_back(testing::golden_step_chunk(state, gc, 0));
    for (const ChunkOutput& out : model->forward(chunks)) logits[waits].push_back(out.logits);
  }
  ASSERT_EQ(logits[0].size(), 4u);
  EXPECT_EQ(logits[1], logits[0]);
  EXPECT_LT(calls[1], calls[0]);
}

// The calls of each of 8 decode steps after a prefill, for the given cases' sequences in one batch.
std::vector<int64_t> calls_per_decode_step(const std::string& dir, const std::vector<const GoldenCase*>& cases) {
  int64_t n_linear = 0, n_calls = 0;
  auto model = open_model(dir, true, &n_linear, &n_calls);
  EXPECT_TRUE(model);
  if (!model) return {};
  std::vector<SequenceState> states;
  for (size_t i = 0; i < cases.size(); ++i) states.push_back(model->new_sequence());
  std::vector<int64_t> calls;
  for (size_t step = 0; step <= 8; ++step) {
    std::vector<ForwardChunk> chunks;
    for (size_t i = 0; i < cases.size(); ++i) chunks.push_back(testing::golden_step_chunk(states[i], *cases[i], step));
    const int64_t before = n_calls;
    model->forward(chunks);
    if (step > 0) calls.push_back(n_calls - before);
  }
  return calls;
}

// Cases 1 and 2 decoded together: each step makes as many calls as the busier of the two sequences' own steps
// (some calls depend on the position: a compressor's row is due every few tokens).
TEST(CallBatching, BatchedDecodeStepCallsAsOneSequence) {
  for (const char* name : {"/v4-flash/pro-tiny", "/v41-flash/tiny-a"}) {
    const std::string dir = testing::golden_dir() + name;
    if (!std::filesystem::exists(dir + "/case-2.safetensors")) GTEST_SKIP() << "golden data not found in " << dir;
    const GoldenCase a = load_case(dir, 1), b = load_case(dir, 2);
    const std::vector<int64_t> alone_a = calls_per_decode_step(dir, {&a}), alone_b = calls_per_decode_step(dir, {&b});
    const std::vector<int64_t> together = calls_per_decode_step(dir, {&a, &b});
    ASSERT_EQ(alone_a.size(), 8u);
    ASSERT_EQ(alone_b.size(), 8u);
    std::vector<int64_t> busier(8);
    for (size_t k = 0; k < 8; ++k) busier[k] = std::max(alone_a[k], alone_b[k]);
    EXPECT_EQ(together, busier) << name;
  }
}

// Backend::place_experts: called once when the model opens, with every routed expert's w1, w3 and w2 (main
// layers first, in order, then the MTP layer's) and the other weights' bytes.
TEST(CallBatching, PlaceExpertsListsEveryRoutedExpertOnce) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "golden data not found in " << dir;
  CountsCalls* counter = nullptr;
  int64_t n_linear = 0;
  ModelOptions options;
  options.wrap_backend = [&](std::unique_ptr<Backend> fast) -> std::unique_ptr<Backend> {
    auto wrapped = std::make_unique<CountsCalls>(std::move(fast), true, &n_linear);
    counter = wrapped.get();
    return wrapped;
  };
  auto model = Model::open(dir, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_NE(counter, nullptr);
  ASSERT_EQ(counter->placements.size(), 1u);
  const auto& placed = counter->placements[0];
  const ModelConfig& c = model.value()->config();
  const int64_t n_mtp = int64_t(placed.experts.size()) / (3 * c.n_routed_experts) - c.n_layers;
  EXPECT_EQ(int64_t(placed.experts.size()), 3 * c.n_routed_experts * (c.n_layers + n_mtp));
  EXPECT_GE(n_mtp, 1);  // V4-Flash has one MTP layer
  EXPECT_EQ(placed.other_weight_bytes, weight_traffic(c).dense_bytes);
  EXPECT_GT(placed.other_weight_bytes, 0);
  std::set<const LinearWeight*> distinct(placed.experts.begin(), placed.experts.end());
  EXPECT_EQ(distinct.size(), placed.experts.size());
  for (const LinearWeight* w : placed.experts) EXPECT_EQ(w->dtype, DType::kI8) << "routed experts are FP4";
}

}  // namespace
}  // namespace deepinfer
