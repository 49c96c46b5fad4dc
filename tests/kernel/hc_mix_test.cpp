// Fast mHC mixes (every SIMD level this CPU has) against the exact reference: the block mixes (24 x 4*4096),
// the head mixes (4 x 4*4096), an odd width, 1..9 tokens. fp32 outputs; bound per output:
// 2^-16 * sum_i |x_i fn_i| / rms (fp32 accumulation) + 2 fp32 ulps.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

class HcMixKernel : public ::testing::TestWithParam<SimdLevel> {};

void run_case(SimdLevel level, int64_t width, int64_t n_mix, int64_t n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x = random_bf16_values(rng, n_tokens * width, 1.0f);
  std::vector<float> fn(size_t(n_mix * width));
  for (auto& v : fn) v = std::normal_distribution<float>(0.0f, float(0.5 / std::sqrt(double(width))))(rng);
  auto reference = make_reference_backend();
  auto fast = make_fast_backend_with_level(2, level);
  std::vector<float> ref(size_t(n_tokens * n_mix)), got(size_t(n_tokens * n_mix));
  HcMixParams p{x.data(), n_tokens, width, fn.data(), n_mix, double(float(1e-6)), ref.data()};
  reference->hc_mix(p);
  p.out = got.data();
  fast->hc_mix(p);
  const Diff d = expect_hc_mix_within_bounds(x, fn, width, n_mix, n_tokens, ref, got, "fast");
  print_diff(std::string(simd_level_name(level)) + " hc_mix [" + std::to_string(n_mix) + " x " + std::to_string(width) +
                 "], " + std::to_string(n_tokens) + " tokens",
             d);
}

TEST_P(HcMixKernel, BlockAndHeadMixes) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), 4 * 4096, 24, 1, 1);
  run_case(GetParam(), 4 * 4096, 24, 9, 2);
  run_case(GetParam(), 4 * 4096, 4, 3, 3);
  run_case(GetParam(), 4 * 5120, 24, 2, 4);  // V4.1 width
  run_case(GetParam(), 1001, 7, 5, 5);       // odd width and mix count
}

INSTANTIATE_TEST_SUITE_P(Levels, HcMixKernel, ::testing::ValuesIn(all_simd_levels()), level_test_name);

}  // namespace
}  // namespace deepinfer::testing
