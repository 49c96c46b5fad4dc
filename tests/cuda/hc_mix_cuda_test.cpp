// CUDA mHC mixes against the exact reference (cases and bound of tests/kernel/hc_mix_test.cpp): block mixes
// (24 x 4*4096), head mixes, the V4.1 width, an odd width, 1..9 tokens. Bound per output:
// 2^-16 * sum_i |x_i fn_i| / rms + 2 fp32 ulps.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
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
  int64_t n_bad = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    double sq = 0;
    for (int64_t i = 0; i < width; ++i) sq += double(x[size_t(t * width + i)]) * x[size_t(t * width + i)];
    const double rms = std::sqrt(sq / double(width) + 1e-6);
    for (int64_t m = 0; m < n_mix; ++m) {
      double mass = 0;
      for (int64_t i = 0; i < width; ++i) mass += std::fabs(double(x[size_t(t * width + i)]) * fn[size_t(m * width + i)]);
      const float r = ref[size_t(t * n_mix + m)], g = got[size_t(t * n_mix + m)];
      const double bound = std::ldexp(mass / rms, -16) + 2 * std::ldexp(1.0, std::ilogb(std::max(std::fabs(r), 1e-30f)) - 23);
      if (!(std::fabs(double(g) - double(r)) <= bound) && ++n_bad <= 3) {
        ADD_FAILURE() << "t=" << t << " m=" << m << " ref=" << r << " cuda=" << g;
      }
    }
  }
  const Diff d = compare(ref, got, false);
  EXPECT_TRUE(d.finite);
  EXPECT_LT(d.calc_diff, 1e-9);
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
