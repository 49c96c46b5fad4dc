// Fast indexer scores (every SIMD level this CPU has) against the exact reference: 64 heads x 128 (V4-Flash)
// on 1..1024 keys (decode at short context up to a 4096-token prefill), QDQ4-like queries and keys, signed
// head weights, an odd dim, and non-bf16 inputs (fp32 fallback). Bound per score: 2 bf16 ulps of the
// reference + 2^-7 * sum_h |p_h| (one per-head bf16 rounding that goes the other way moves p_h by <= 2^-8).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

class IndexScoresKernel : public ::testing::TestWithParam<SimdLevel> {};

void run_case(SimdLevel level, int64_t n_heads, int64_t dim, int64_t n_keys, bool fp32_inputs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> q = fp4_grid_values(rng, n_heads * dim), keys = fp4_grid_values(rng, n_keys * dim);
  std::vector<float> w = random_bf16_values(rng, n_heads, 0.125f);
  if (fp32_inputs) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : keys) v = u(rng);
  }
  auto reference = make_reference_backend();
  auto fast = make_fast_backend_with_level(2, level);
  std::vector<float> ref(static_cast<size_t>(n_keys)), got(static_cast<size_t>(n_keys));
  IndexScoreParams p{q.data(), w.data(), n_heads, dim, keys.data(), n_keys, ref.data()};
  reference->index_scores(p);
  p.scores = got.data();
  fast->index_scores(p);
  const Diff d = expect_index_scores_within_bounds(q, w, keys, n_heads, dim, n_keys, ref, got, "fast");
  print_diff(std::string(simd_level_name(level)) + " " + std::to_string(n_heads) + " heads x " + std::to_string(dim) +
                 ", " + std::to_string(n_keys) + " keys" + (fp32_inputs ? " (fp32 keys)" : ""),
             d);
}

TEST_P(IndexScoresKernel, V4FlashShapes) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  for (int64_t n_keys : {1, 5, 100, 1024}) run_case(GetParam(), 64, 128, n_keys, false, uint32_t(10 + n_keys));
}

TEST_P(IndexScoresKernel, OddDimAndFewHeads) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), 4, 100, 77, false, 21);
  run_case(GetParam(), 8, 128, 300, false, 22);
}

TEST_P(IndexScoresKernel, NonBf16KeysFallBack) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), 64, 128, 200, true, 31);
}

INSTANTIATE_TEST_SUITE_P(Levels, IndexScoresKernel, ::testing::ValuesIn(all_simd_levels()), level_test_name);

}  // namespace
}  // namespace deepinfer::testing
