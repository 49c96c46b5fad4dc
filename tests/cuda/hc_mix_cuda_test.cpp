// CUDA mHC mixes against the exact reference (cases and bound of tests/kernel/hc_mix_test.cpp): block mixes
// (24 x 4*4096), head mixes, the V4.1 width, an odd width, 1..9 tokens. Bound per output:
// 2^-16 * sum_i |x_i fn_i| / rms + 2 fp32 ulps.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

void run_case(int64_t width, int64_t n_mix, int64_t n_tokens, uint32_t seed) {
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(seed);
  std::vector<float> x = random_bf16_values(rng, n_tokens * width, 1.0f);
  std::vector<float> fn(size_t(n_mix * width));
  for (auto& v : fn) v = std::normal_distribution<float>(0.0f, float(0.5 / std::sqrt(double(width))))(rng);
  auto reference = make_reference_backend();
  std::vector<float> ref(size_t(n_tokens * n_mix)), got(size_t(n_tokens * n_mix), -7.0f);
  HcMixParams p{x.data(), n_tokens, width, fn.data(), n_mix, double(float(1e-6)), ref.data()};
  reference->hc_mix(p);
  p.out = got.data();
  gpu->hc_mix(p);
  const Diff d = expect_hc_mix_within_bounds(x, fn, width, n_mix, n_tokens, ref, got, "cuda");
  print_diff(std::string(gpu->name()) + " hc_mix [" + std::to_string(n_mix) + " x " + std::to_string(width) + "], " +
                 std::to_string(n_tokens) + " tokens",
             d);
}

TEST(HcMixCuda, BlockAndHeadMixes) {
  DI_SKIP_WITHOUT_CUDA();
  run_case(4 * 4096, 24, 1, 1);
  run_case(4 * 4096, 24, 9, 2);
  run_case(4 * 4096, 4, 3, 3);
  run_case(4 * 5120, 24, 2, 4);
  run_case(1001, 7, 5, 5);
}

}  // namespace
}  // namespace deepinfer::testing
