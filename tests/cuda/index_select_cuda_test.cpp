// The indexer's top-k selection on the device (Backend::index_select_batch with DEEPINFER_CUDA_INDEX_SELECT=device,
// index_select_kernel.cu) against the model's own: the same backend's scores (index_scores_batch), masked and
// partial-sorted on the host as model/dsv4_attention.cpp and dsv41_attention.cpp do it. The selection is exact, so
// the indices must be the same, in the same order. The keys repeat a few distinct rows, so that many scores tie
// (ties go to the lower index), and some tokens keep only a few candidate blocks (the others score -inf, and when
// too few keys are left the -inf keys are taken lowest index first); some tokens are a candidate source's, whose
// best blocks come back too (V4.1's step 25).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

// The model's selection of the n_select best of scores (after the mask), best first.
std::vector<int64_t> host_selection(std::vector<float> scores, int64_t n_select, bool masked, const std::vector<int64_t>& keep,
                                    int64_t block_size) {
  const int64_t n = int64_t(scores.size());
  if (masked) {
    std::vector<char> kept(size_t((n + block_size - 1) / block_size), 0);
    for (int64_t b : keep) if (b < int64_t(kept.size())) kept[size_t(b)] = 1;
    for (int64_t j = 0; j < n; ++j) if (!kept[size_t(j / block_size)]) scores[size_t(j)] = -INFINITY;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n_select, order.end(), [&](int64_t a, int64_t b) {
    return scores[size_t(a)] != scores[size_t(b)] ? scores[size_t(a)] > scores[size_t(b)] : a < b;
  });
  order.resize(size_t(n_select));
  return order;
}

// V4.1's candidate source (step 25) on the host: the n_candidates best blocks by their largest score, the
// newest block first of all, best first.
std::vector<int64_t> host_candidates(const std::vector<float>& scores, int64_t n_candidates, int64_t block_size) {
  const int64_t n = int64_t(scores.size()), n_blocks = (n + block_size - 1) / block_size;
  std::vector<float> block_score(static_cast<size_t>(n_blocks), -INFINITY);
  for (int64_t j = 0; j < n; ++j) block_score[size_t(j / block_size)] = std::max(block_score[size_t(j / block_size)], scores[size_t(j)]);
  block_score[size_t(n_blocks - 1)] = INFINITY;
  return host_selection(block_score, n_candidates, false, {}, 1);
}

struct SelectCase {
  int64_t n_keys, n_select;
  bool masked;
  int64_t n_candidates = -1;  // >= 0: a candidate source's token
};

// Tokens scoring against one key array of `n_rows` rows drawn from `n_distinct` distinct ones, each token with
// its case's keys, selection size and mask; the device's selections against the host's.
void expect_device_selection_is_the_models(Backend& gpu, const std::vector<SelectCase>& cases, int64_t n_rows, int64_t n_distinct,
                                           uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t H = 8, dim = 64, block_size = 8, T = int64_t(cases.size());
  const std::vector<float> distinct = random_bf16_values(rng, n_distinct * dim, 1.0f);
  std::vector<float> keys(size_t(n_rows * dim));
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t d = int64_t(rng() % uint32_t(n_distinct));
    std::copy_n(&distinct[size_t(d * dim)], dim, &keys[size_t(r * dim)]);
  }
  const std::vector<float> q = random_bf16_values(rng, T * H * dim, 1.0f), w = random_bf16_values(rng, T * H, 0.25f);
  std::vector<std::vector<float>> scores(static_cast<size_t>(T));
  std::vector<std::vector<int64_t>> keep(static_cast<size_t>(T)), got(static_cast<size_t>(T)), got_candidates(static_cast<size_t>(T));
  std::vector<IndexScoreParams> score_ops;
  std::vector<IndexSelectParams> select_ops;
  for (int64_t t = 0; t < T; ++t) {
    const SelectCase& c = cases[size_t(t)];
    scores[size_t(t)].assign(size_t(c.n_keys), -7.0f);
    got[size_t(t)].assign(size_t(c.n_select), -1);
    const int64_t n_blocks = (c.n_keys + block_size - 1) / block_size;
    for (int64_t b = 0; b < n_blocks; ++b) {
      if (rng() % 5 == 0) keep[size_t(t)].push_back(b);  // about a fifth of the blocks
    }
    keep[size_t(t)].push_back(n_blocks + 3);  // past the keys: ignored, as the host ignores it
    const IndexScoreParams p{&q[size_t(t * H * dim)], &w[size_t(t * H)], H, dim, keys.data(), c.n_keys, scores[size_t(t)].data()};
    score_ops.push_back(p);
    select_ops.push_back({p, c.n_select, c.masked, keep[size_t(t)], block_size, got[size_t(t)].data()});
    if (c.n_candidates >= 0) {
      got_candidates[size_t(t)].assign(size_t(c.n_candidates), -1);
      select_ops.back().n_candidates = c.n_candidates;
      select_ops.back().candidates = got_candidates[size_t(t)].data();
    }
  }
  gpu.index_scores_batch(score_ops);
  ASSERT_TRUE(gpu.index_select_batch(select_ops)) << "the device declined a selection it can make";
  for (int64_t t = 0; t < T; ++t) {
    const SelectCase& c = cases[size_t(t)];
    SCOPED_TRACE("token " + std::to_string(t) + ": " + std::to_string(c.n_select) + " of " + std::to_string(c.n_keys) + " keys" +
                 (c.masked ? ", masked" : ""));
    const std::vector<int64_t> want = host_selection(scores[size_t(t)], c.n_select, c.masked, keep[size_t(t)], block_size);
    EXPECT_EQ(want, got[size_t(t)]);
    if (c.n_candidates >= 0) {
      EXPECT_EQ(host_candidates(scores[size_t(t)], c.n_candidates, block_size), got_candidates[size_t(t)]) << "the candidate blocks";
    }
  }
}

TEST(IndexSelectCuda, DeviceSelectionIsTheModelsExactly) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma");
  setenv("DEEPINFER_CUDA_INDEX_SELECT", "device", 1);
  DI_MAKE_CUDA_BACKEND(gpu);
  unsetenv("DEEPINFER_CUDA_INDEX_SELECT");
  const std::vector<SelectCase> cases = {{1, 1, false},      {40, 40, false},     {300, 17, false},   {300, 17, true},
                                         {1000, 512, false},  {1000, 512, true},   {2500, 2048, false}, {37, 0, false},
                                         {600, 300, true},    {3000, 1024, true},  {3000, 512, false, 200},
                                         {61, 20, false, 8},  {9, 9, false, 2},    {2000, 100, false, 250}};
  expect_device_selection_is_the_models(*gpu, cases, 3000, 6, 1);    // six distinct keys: ties everywhere
  expect_device_selection_is_the_models(*gpu, cases, 3000, 3000, 2);  // ties only where the scores round together
}

// The default declines (the model then selects from the scores), and so does a selection past the kernel's most.
TEST(IndexSelectCuda, DeclinesByDefaultAndPastItsMost) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma");
  std::mt19937 rng(3);
  const int64_t H = 4, dim = 64, n = 3000;
  const std::vector<float> keys = random_bf16_values(rng, n * dim, 1.0f), q = random_bf16_values(rng, H * dim, 1.0f);
  const std::vector<float> w = random_bf16_values(rng, H, 0.25f);
  std::vector<float> scores(static_cast<size_t>(n));
  std::vector<int64_t> selected(static_cast<size_t>(n));
  const IndexScoreParams p{q.data(), w.data(), H, dim, keys.data(), n, scores.data()};
  {
    DI_MAKE_CUDA_BACKEND(gpu);
    const IndexSelectParams s{p, 10, false, {}, 0, selected.data()};
    EXPECT_FALSE(gpu->index_select_batch({&s, 1}));
  }
  setenv("DEEPINFER_CUDA_INDEX_SELECT", "device", 1);
  DI_MAKE_CUDA_BACKEND(gpu);
  unsetenv("DEEPINFER_CUDA_INDEX_SELECT");
  const IndexSelectParams s{p, 2049, false, {}, 0, selected.data()};
  EXPECT_FALSE(gpu->index_select_batch({&s, 1}));
}

}  // namespace
}  // namespace deepinfer::testing
