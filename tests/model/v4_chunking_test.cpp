// Sequence-state equivalences of the V4 model: a prompt prefilled in chunks of any size, and several
// sequences of different lengths batched into one forward, give bit-identical logits to one-shot runs
// of each sequence alone (both kernel paths: neither mixes tokens inside an accumulation).
#include <gtest/gtest.h>

#include <filesystem>

#include "golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

std::string case_path(const std::string& model, int i) {
  return testing::golden_dir() + "/v4-flash/" + model + "/case-" + std::to_string(i) + ".safetensors";
}

class V4Chunking : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(case_path("flash-tiny", 3))) GTEST_SKIP() << "golden data not found";
  }
  std::unique_ptr<Model> open(const std::string& model) {
    auto m = Model::open(testing::golden_dir() + "/v4-flash/" + model, ModelOptions{.exact = GetParam(), .n_threads = 2});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return std::move(m.value());
  }
};

TEST_P(V4Chunking, ChunkedPrefillMatchesOneShot) {
  auto model = open("flash-tiny");
  auto gc = load_golden_case(case_path("flash-tiny", 3));  // 361-token prompt: rings wrap, groups of 4 and 128
  ASSERT_TRUE(gc.ok());
  std::vector<int32_t> continuation(gc->continuation.begin(), gc->continuation.begin() + 20);
  auto one_shot = run_teacher_forced(*model, gc->prompt, continuation, {.prefill_chunk = 0, .mtp = true});
  const std::vector<int64_t> chunks = GetParam() ? std::vector<int64_t>{37} : std::vector<int64_t>{1, 3, 64, 128, 200};
  for (int64_t chunk : chunks) {
    auto chunked = run_teacher_forced(*model, gc->prompt, continuation, {.prefill_chunk = chunk, .mtp = true});
    EXPECT_EQ(one_shot.logits, chunked.logits) << "chunk " << chunk;
    EXPECT_EQ(one_shot.mtp_logits, chunked.mtp_logits) << "chunk " << chunk;
  }
}

TEST_P(V4Chunking, BatchedSequencesMatchEachAlone) {
  auto model = open("pro-tiny");
  std::vector<GoldenCase> cases;
  for (int i = 1; i <= 3; ++i) {
    auto gc = load_golden_case(case_path("pro-tiny", i));
    ASSERT_TRUE(gc.ok());
    cases.push_back(std::move(gc.value()));
  }
  const int64_t n_decode = 12, V = model->config().vocab_size;
  // Alone: prefill + n_decode teacher-forced steps each.
  std::vector<std::vector<float>> alone;
  for (auto& gc : cases) {
    std::vector<int32_t> cont(gc.continuation.begin(), gc.continuation.begin() + n_decode);
    alone.push_back(run_teacher_forced(*model, gc.prompt, cont, {}).logits);
  }
  // Batched: all prefills in one forward, then each decode step of all sequences in one forward; the
  // last sequence joins late (its prefill runs in the same forward as the others' first decode steps).
  std::vector<SequenceState> states;
  for (size_t i = 0; i < cases.size(); ++i) states.push_back(model->new_sequence());
  std::vector<std::vector<float>> batched(cases.size());
  std::vector<size_t> step(cases.size(), 0);  // 0 = prefill pending
  for (int round = 0; round < n_decode + 3; ++round) {
    std::vector<ForwardChunk> chunks;
    std::vector<size_t> which;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (i == 2 && round < 2) continue;  // joins late
      if (step[i] > size_t(n_decode)) continue;
      ForwardChunk fc;
      fc.state = &states[i];
      if (step[i] == 0) {
        fc.ids = cases[i].prompt;
        fc.prompt_len = int64_t(cases[i].prompt.size());
      } else {
        fc.ids = std::span<const int32_t>(&cases[i].continuation[step[i] - 1], 1);
      }
      chunks.push_back(fc);
      which.push_back(i);
    }
    if (chunks.empty()) break;
    auto out = model->forward(chunks);
    for (size_t k = 0; k < which.size(); ++k) {
      batched[which[k]].insert(batched[which[k]].end(), out[k].logits.begin(), out[k].logits.end());
      ++step[which[k]];
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(alone[i].size(), size_t((n_decode + 1) * V));
    for (int64_t r = 0; r <= n_decode; ++r) {
      std::vector<float> a(alone[i].begin() + r * V, alone[i].begin() + (r + 1) * V), b(batched[i].begin() + r * V, batched[i].begin() + (r + 1) * V);
      ASSERT_EQ(a, b) << "sequence " << i << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, V4Chunking, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? std::string("Exact") : std::string("Fast"); });

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// The same equivalences on V4.1 (Engram n-grams across chunk boundaries, ratio-2 / ratio-1 KV sources,
// candidate blocks, reuse layers), fast path.
TEST(V41Chunking, ChunkedPrefillAndBatchingMatchOneShot) {
  const std::string dir = testing::golden_dir() + "/v41-flash/tiny-a";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "golden data not found: " << dir;
  auto model = Model::open(dir, ModelOptions{.exact = false, .n_threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto gc = load_golden_case(dir + "/case-1.safetensors");  // 300-token prompt
  ASSERT_TRUE(gc.ok());
  std::vector<int32_t> continuation(gc->continuation.begin(), gc->continuation.begin() + 10);
  auto one_shot = run_teacher_forced(*model.value(), gc->prompt, continuation, {});
  for (int64_t chunk : {1, 7, 128}) {
    auto chunked = run_teacher_forced(*model.value(), gc->prompt, continuation, {.prefill_chunk = chunk});
    EXPECT_EQ(one_shot.logits, chunked.logits) << "chunk " << chunk;
  }
  // Two sequences in one forward: the 300-token prompt beside a 37-token one.
  auto other = load_golden_case(dir + "/case-2.safetensors");
  ASSERT_TRUE(other.ok());
  auto alone = run_teacher_forced(*model.value(), other->prompt, {}, {});
  SequenceState a = model.value()->new_sequence(), b = model.value()->new_sequence();
  std::vector<ForwardChunk> chunks = {ForwardChunk{&a, gc->prompt, int64_t(gc->prompt.size())},
                                      ForwardChunk{&b, other->prompt, int64_t(other->prompt.size())}};
  auto out = model.value()->forward(chunks);
  EXPECT_EQ(std::vector<float>(one_shot.logits.begin(), one_shot.logits.begin() + int64_t(out[0].logits.size())), out[0].logits);
  EXPECT_EQ(alone.logits, out[1].logits);
}

}  // namespace
}  // namespace deepinfer
