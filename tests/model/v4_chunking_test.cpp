// Sequence-state equivalences of the V4 model: a prompt prefilled in chunks of any size, and several
// sequences of different lengths batched into one forward, give bit-identical logits to one-shot runs
// of each sequence alone (every kernel path: none mixes tokens inside an accumulation). The by-kind path runs
// prompt tokens and generated tokens on different kernel families, as the default fast backend does on AMX
// CPUs: a forward holding both kinds runs as two passes, and each chunk's result stays what it is alone.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/fast_backend.h"
#include "golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

enum class Path { kExact, kFast, kFastByKind };

// Prompt tokens on the scalar family, generated ones on the CPU's best: any two families exercise the split,
// and the scalar one exists on every CPU.
ModelOptions path_options(Path path) {
  ModelOptions options{.exact = path == Path::kExact, .n_threads = 2};
  if (path == Path::kFastByKind) {
    options.make_backend = [] { return make_fast_backend_with_levels(2, best_simd_level(), SimdLevel::kScalar); };
  }
  return options;
}

std::string case_path(const std::string& model, int i) {
  return testing::golden_dir() + "/v4-flash/" + model + "/case-" + std::to_string(i) + ".safetensors";
}

class V4Chunking : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(case_path("flash-tiny", 3))) GTEST_SKIP() << "golden data not found";
  }
  std::unique_ptr<Model> open(const std::string& model) {
    auto m = Model::open(testing::golden_dir() + "/v4-flash/" + model, path_options(GetParam()));
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
  const std::vector<int64_t> chunks = GetParam() == Path::kExact ? std::vector<int64_t>{37} : std::vector<int64_t>{1, 3, 64, 128, 200};
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
      chunks.push_back(testing::golden_step_chunk(states[i], cases[i], step[i]));
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

INSTANTIATE_TEST_SUITE_P(Paths, V4Chunking, ::testing::Values(Path::kExact, Path::kFast, Path::kFastByKind), [](const auto& info) {
  return std::string(info.param == Path::kExact ? "Exact" : info.param == Path::kFast ? "Fast" : "FastByKind");
});

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// The same equivalences on V4.1 (Engram n-grams across chunk boundaries, ratio-2 / ratio-1 KV sources,
// candidate blocks, reuse layers), fast paths.
class V41Chunking : public ::testing::TestWithParam<Path> {};

TEST_P(V41Chunking, ChunkedPrefillAndBatchingMatchOneShot) {
  const std::string dir = testing::golden_dir() + "/v41-flash/tiny-a";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "golden data not found: " << dir;
  auto model = Model::open(dir, path_options(GetParam()));
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
  // A decode step of the first sequence beside a prompt chunk of a third: two passes when the kinds' kernels
  // differ, each result what it is alone.
  SequenceState c = model.value()->new_sequence();
  std::vector<ForwardChunk> mixed = {ForwardChunk{&a, std::span<const int32_t>(&continuation[0], 1), 0},
                                     ForwardChunk{&c, other->prompt, int64_t(other->prompt.size())}};
  auto mixed_out = model.value()->forward(mixed);
  const int64_t V = model.value()->config().vocab_size;
  EXPECT_EQ(std::vector<float>(one_shot.logits.begin() + int64_t(out[0].logits.size()),
                               one_shot.logits.begin() + int64_t(out[0].logits.size()) + V),
            mixed_out[0].logits);
  EXPECT_EQ(alone.logits, mixed_out[1].logits);
}

INSTANTIATE_TEST_SUITE_P(Paths, V41Chunking, ::testing::Values(Path::kFast, Path::kFastByKind),
                         [](const auto& info) { return std::string(info.param == Path::kFast ? "Fast" : "FastByKind"); });

}  // namespace
}  // namespace deepinfer
