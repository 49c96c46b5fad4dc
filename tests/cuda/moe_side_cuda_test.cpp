// A block's whole FFN side on the device (Backend::moe_side, DEEPINFER_CUDA_MOE=device) against the model's own
// steps on the same backend (moe_side_on_backend: hc_mix, then the coefficients, collapse and norm on the host,
// the device MoE, the expansion on the host). mhc_kernels.cu repeats the host's exact arithmetic, so h_out and
// pre_out must be the same bits. Random streams and mHC weights around random_moe.h's blocks, with V4's rule (u
// collapsed with the side's own pre) and V4.1's (with another side's pre).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtypes.h"
#include "cuda/cuda_util.h"
#include "cuda/random_moe.h"
#include "kernel/kernel_test_util.h"
#include "model/mhc_side.h"

namespace deepinfer::testing {
namespace {

// An FFN side's random stream and mHC weights (24 mixes of 4 copies), owning every byte.
struct RandomSide {
  std::vector<float> h, fn, scale, base, collapse_pre;
  std::vector<uint16_t> norm;

  RandomSide(int64_t n_tokens, int64_t dim, bool other_pre, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
    h = random_bf16_values(rng, n_tokens * 4 * dim, 1.0f);
    for (int64_t i = 0; i < 24 * 4 * dim; ++i) fn.push_back(0.03f * normal(rng));  // mixes of about unit size
    for (int i = 0; i < 3; ++i) scale.push_back(uniform(rng) * 2.0f);
    for (int i = 0; i < 24; ++i) base.push_back(normal(rng));
    for (int64_t i = 0; i < dim; ++i) norm.push_back(uint16_t(float_to_bits(1.0f + 0.1f * normal(rng)) >> 16));
    if (other_pre) {
      for (int64_t i = 0; i < n_tokens * 4; ++i) collapse_pre.push_back(uniform(rng));
    }
  }

  MoeSideParams params(const RandomMoe& moe, const MoeShape& s, int64_t n_tokens, float* h_out, float* pre_out) const {
    MhcSideParams side;
    side.h = h.data();
    side.n_tokens = n_tokens;
    side.dim = s.dim;
    side.mhc = {fn.data(), scale.data(), base.data(), norm.data(), 24, 20, s.v41 ? 1e-6 : double(1e-6f), s.v41 ? 1e-6 : double(1e-6f)};
    side.collapse_pre = collapse_pre.empty() ? nullptr : collapse_pre.data();
    side.h_out = h_out;
    side.pre_out = pre_out;
    return {side, moe.params(s, nullptr, n_tokens)};
  }
};

// The side of the first n_tokens tokens on `gpu` whole and by the model's steps: the same bits.
void expect_side_equals_model_steps(Backend& gpu, const RandomMoe& moe, const RandomSide& side, const MoeShape& s,
                                    int64_t n_tokens) {
  const size_t n = size_t(n_tokens * 4 * s.dim);
  std::vector<float> host(n, -7.0f), device(n, -7.0f), host_pre(size_t(n_tokens * 4), -7.0f), device_pre = host_pre;
  MhcScratch scratch;
  moe_side_on_backend(gpu, side.params(moe, s, n_tokens, host.data(), host_pre.data()), scratch);
  ASSERT_TRUE(gpu.moe_side(side.params(moe, s, n_tokens, device.data(), device_pre.data())))
      << "the device declined a side it can run";
  EXPECT_EQ(n_differing(host, device), 0) << "of " << n << " stream values";
  EXPECT_EQ(n_differing(host_pre, device_pre), 0) << "of the pre";
  EXPECT_TRUE(std::all_of(device.begin(), device.end(), [](float v) { return std::isfinite(v); }));
  EXPECT_TRUE(std::all_of(device_pre.begin(), device_pre.end(), [](float v) { return v > 0.0f && v < 2.0f; }));
  // The side changed the stream: a no-op expansion (h_out = h) fails here.
  std::vector<float> h_in(side.h.begin(), side.h.begin() + int64_t(n));
  EXPECT_GT(n_differing(h_in, device), int64_t(n / 2));
}

void expect_device_side_equals_model_steps(const MoeShape& s, bool other_pre, int64_t n_tokens, uint32_t seed) {
  SCOPED_TRACE(std::string(s.v41 ? "V4.1" : "V4") + (s.hash ? " hash" : " score") + " routing, " +
               (other_pre ? "another side's pre, " : "own pre, ") + std::to_string(n_tokens) + " tokens");
  const RandomMoe moe(s, n_tokens, seed);
  const RandomSide side(n_tokens, s.dim, other_pre, seed + 1000);
  const ScopedMoePath path("device");
  DI_MAKE_CUDA_BACKEND(gpu);
  expect_side_equals_model_steps(*gpu, moe, side, s, n_tokens);
}

TEST(MoeSideCuda, DeviceSideEqualsTheModelStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  uint32_t seed = 1;
  for (int64_t n : moe_test_token_counts()) {
    expect_device_side_equals_model_steps(MoeShape{}, false, n, seed++);
    expect_device_side_equals_model_steps(MoeShape{.v41 = true}, true, n, seed++);
    expect_device_side_equals_model_steps(MoeShape{.hash = true, .n_experts = 12, .top_k = 3}, false, n, seed++);
  }
  // A dim that is not a multiple of the kernels' 256 threads (the FP4 experts need a multiple of 32).
  expect_device_side_equals_model_steps(MoeShape{.n_experts = 8, .top_k = 2, .dim = 224}, false, 3, seed++);
}

// Graphs of the side (captured per block, token count and side), replayed with new streams: a replay must read
// the newly staged h. The same bits with graphs off.
TEST(MoeSideCuda, GraphReplaysTakeNewStreams) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedMoePath path("device");
  for (const char* graphs : {"on", "off"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_GRAPHS=") + graphs);
    const MoeShape s;
    const RandomMoe moe(s, 3, 21);
    RandomSide side(3, s.dim, false, 22);
    setenv("DEEPINFER_CUDA_GRAPHS", graphs, 1);
    DI_MAKE_CUDA_BACKEND(gpu);
    unsetenv("DEEPINFER_CUDA_GRAPHS");
    std::mt19937 rng(5);
    for (const int64_t n_tokens : {2, 2, 3, 2}) {
      SCOPED_TRACE(std::to_string(n_tokens) + " tokens");
      side.h = random_bf16_values(rng, int64_t(side.h.size()), 1.0f);
      expect_side_equals_model_steps(*gpu, moe, side, s, n_tokens);
    }
  }
}

// The side declines where the model's steps would run otherwise: the default (DEEPINFER_CUDA_MOE unset), and a
// side that is not 4 copies' 24 mixes.
TEST(MoeSideCuda, DeclinesWhereTheModelStepsDiffer) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const MoeShape s;
  const RandomMoe moe(s, 2, 7);
  const RandomSide side(2, s.dim, false, 8);
  std::vector<float> h_out(side.h.size());
  {
    DI_MAKE_CUDA_BACKEND(gpu);
    EXPECT_FALSE(gpu->moe_side(side.params(moe, s, 2, h_out.data(), nullptr)));
  }
  const ScopedMoePath path("device");
  DI_MAKE_CUDA_BACKEND(gpu);
  MoeSideParams p = side.params(moe, s, 2, h_out.data(), nullptr);
  p.side.mhc.n_mix = 12;
  EXPECT_FALSE(gpu->moe_side(p));
}

}  // namespace
}  // namespace deepinfer::testing
