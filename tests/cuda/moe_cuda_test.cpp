// The device MoE (Backend::moe with DEEPINFER_CUDA_MOE=device) against the model's own MoE code on the same
// backend (moe_on_backend): the device MoE runs every linear op on the kernels the model's calls reach and does
// the host's exact arithmetic for the rest (moe_kernels.cu), so each output must be the same bits. Random
// blocks with FP4 experts, an FP8 shared expert and a bf16 gate: V4 and V4.1 rules, score and hash routing, one
// to 33 tokens (experts with several rows, and grouped launches with empty slots).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "cuda/random_moe.h"
#include "kernel/kernel_test_util.h"
#include "model/moe.h"

namespace deepinfer::testing {
namespace {

// The block's MoE of its first n_tokens tokens (< 0: all) on `gpu` whole (Backend::moe) and by the model's code
// (moe_on_backend), the same bits.
void expect_whole_equals_host_path(Backend& gpu, const RandomMoe& moe, const MoeShape& s, int64_t n_tokens = -1) {
  const size_t n = n_tokens < 0 ? moe.u.size() : size_t(n_tokens * s.dim);
  std::vector<float> host(n, -7.0f), device(n, -7.0f);
  moe_on_backend(gpu, moe.params(s, host.data(), n_tokens));
  ASSERT_TRUE(gpu.moe(moe.params(s, device.data(), n_tokens))) << "the device MoE declined a block it can run";
  EXPECT_EQ(n_differing(host, device), 0) << "of " << n << " outputs";
  EXPECT_TRUE(std::all_of(device.begin(), device.end(), [](float v) { return std::isfinite(v); }));
  EXPECT_GT(std::count_if(device.begin(), device.end(), [](float v) { return v != 0.0f; }), int64_t(n / 2));
}

void expect_device_moe_equals_host_path(const MoeShape& s, int64_t n_tokens, uint32_t seed) {
  SCOPED_TRACE(std::string(s.v41 ? "V4.1" : "V4") + (s.hash ? " hash" : " score") + " routing, " +
               std::to_string(s.n_experts) + " experts, top " + std::to_string(s.top_k) + ", " + std::to_string(n_tokens) +
               " tokens");
  const RandomMoe moe(s, n_tokens, seed);
  const ScopedMoePath path("device");
  DI_MAKE_CUDA_BACKEND(gpu);
  expect_whole_equals_host_path(*gpu, moe, s);
}

TEST(MoeCuda, DeviceMoeEqualsTheHostPathBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  uint32_t seed = 1;
  for (int64_t n : moe_test_token_counts()) {
    expect_device_moe_equals_host_path(MoeShape{}, n, seed++);
    expect_device_moe_equals_host_path(MoeShape{.v41 = true}, n, seed++);
    expect_device_moe_equals_host_path(MoeShape{.hash = true, .n_experts = 12, .top_k = 3}, n, seed++);
  }
  expect_device_moe_equals_host_path(MoeShape{.v41 = true, .n_experts = 8, .top_k = 1}, 3, seed++);
}

// A hash row that names an expert twice (the loader allows it): each choice is a row of its own, as on the host; a
// rank shared by the two choices left one of the token's rows unwritten.
TEST(MoeCuda, HashRowsThatRepeatAnExpertRouteAsOnTheHost) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  uint32_t seed = 40;
  for (int64_t n : {5, 24}) {  // tokens whose ids have repeating rows among them (the seeds' ids)
    expect_device_moe_equals_host_path(MoeShape{.hash = true, .hash_repeats = true, .n_experts = 12, .top_k = 3}, n, seed++);
  }
  // Every token the same id, whose row repeats an expert: that expert gets twice as many rows as there are tokens,
  // past the tokens' own tiles (8 tokens a tile in decode, 32 past 8 tokens).
  for (int64_t n : {5, 40}) {
    SCOPED_TRACE(std::to_string(n) + " tokens of one id");
    const MoeShape s{.hash = true, .hash_repeats = true, .n_experts = 12, .top_k = 3};
    RandomMoe moe(s, n, seed++);
    std::fill(moe.ids.begin(), moe.ids.end(), 0);  // id 0's row repeats (every third id's does)
    ASSERT_EQ(moe.tid2eid[0], moe.tid2eid[2]);
    const ScopedMoePath path("device");
    DI_MAKE_CUDA_BACKEND(gpu);
    expect_whole_equals_host_path(*gpu, moe, s);
  }
}

// The staged and split tensor-core kernels (64 tokens and more) take the routed rows where one expert has many.
TEST(MoeCuda, DeviceMoeOnTheStagedKernels) {
  DI_SKIP_WITHOUT_CUDA();
  for (const char* linear : {"mma_staged", "mma_split"}) {
    const ScopedCudaPaths paths(linear);
    expect_device_moe_equals_host_path(MoeShape{.n_experts = 4, .top_k = 2}, 70, 50);
  }
}

// The device MoE's CUDA graphs (DEEPINFER_CUDA_GRAPHS=on, the default): captured per block and token count, then
// replayed with new inputs (the staged u and hash rows are read when a replay runs), captured anew for another
// token count and found again for the first; the same bits with graphs off.
TEST(MoeCuda, GraphReplaysTakeNewInputs) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedMoePath path("device");
  for (const char* graphs : {"on", "off"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_GRAPHS=") + graphs);
    for (const MoeShape s : {MoeShape{}, MoeShape{.hash = true, .n_experts = 12, .top_k = 3}}) {
      RandomMoe moe(s, 3, 11);
      setenv("DEEPINFER_CUDA_GRAPHS", graphs, 1);
      DI_MAKE_CUDA_BACKEND(gpu);  // one per block: its caches go by the weights' addresses
      unsetenv("DEEPINFER_CUDA_GRAPHS");
      std::mt19937 rng(5);
      for (const int64_t n_tokens : {2, 2, 3, 2}) {
        SCOPED_TRACE(std::to_string(n_tokens) + " tokens");
        moe.u = random_bf16_values(rng, int64_t(moe.u.size()), 1.0f);
        for (int32_t& id : moe.ids) id = std::uniform_int_distribution<int32_t>(0, 49)(rng);
        expect_whole_equals_host_path(*gpu, moe, s, n_tokens);
      }
    }
  }
  setenv("DEEPINFER_CUDA_GRAPHS", "sometimes", 1);
  std::string error;
  EXPECT_EQ(make_cuda_backend(0, 0, &error), nullptr);
  unsetenv("DEEPINFER_CUDA_GRAPHS");
  EXPECT_NE(error.find("DEEPINFER_CUDA_GRAPHS"), std::string::npos) << error;
}

// NaN route keys (a corrupt gate bias) rank after every number on the device as on the host (model/moe.h
// routes_before): the same experts, each once, and the same bits; with every key NaN, the first experts by index.
TEST(MoeCuda, NanRouteKeysRouteAsOnTheHost) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedMoePath path("device");
  for (const MoeShape s : {MoeShape{}, MoeShape{.v41 = true}}) {
    SCOPED_TRACE(s.v41 ? "V4.1" : "V4");
    RandomMoe moe(s, 5, 23);
    for (int64_t e : {1, 6, 11}) moe.gate_bias[size_t(e)] = std::numeric_limits<float>::quiet_NaN();
    DI_MAKE_CUDA_BACKEND(gpu);
    expect_whole_equals_host_path(*gpu, moe, s);
    RandomMoe all_nan(s, 5, 29);
    std::fill(all_nan.gate_bias.begin(), all_nan.gate_bias.end(), std::numeric_limits<float>::quiet_NaN());
    DI_MAKE_CUDA_BACKEND(other);  // a fresh backend: its blocks go by the weights' addresses
    expect_whole_equals_host_path(*other, all_nan, s);
  }
}

// The device MoE's graphs are keyed by the call's constants too: the same block and token count run with another
// route scale, SwiGLU limit or QDQ block replay no graph captured with the first's (each gives the model's code's
// bits with its own constants).
TEST(MoeCuda, GraphsAreKeyedByTheCallsConstants) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedMoePath path("device");
  const MoeShape s;
  const RandomMoe moe(s, 3, 17);
  DI_MAKE_CUDA_BACKEND(gpu);
  const std::vector<std::function<void(MoeParams&)>> changes = {
      [](MoeParams&) {}, [](MoeParams& p) { p.route_scale = 1.5; }, [](MoeParams& p) { p.swiglu_limit = 0.25; },
      [](MoeParams& p) { p.act_block = 32; }};
  for (size_t i = 0; i < changes.size(); ++i) {
    SCOPED_TRACE("change " + std::to_string(i));
    std::vector<float> host(moe.u.size(), -7.0f), device(moe.u.size(), -7.0f);
    MoeParams on_host = moe.params(s, host.data()), on_device = moe.params(s, device.data());
    changes[i](on_host);
    changes[i](on_device);
    moe_on_backend(*gpu, on_host);
    ASSERT_TRUE(gpu->moe(on_device));
    EXPECT_EQ(n_differing(host, device), 0) << "of " << host.size() << " outputs";
  }
}

// Where the model's path would take other kernels, the device MoE declines and the model's own code runs: the FMA
// linear, and the default (DEEPINFER_CUDA_MOE unset: host).
TEST(MoeCuda, DeclinesWhereTheModelPathDiffers) {
  DI_SKIP_WITHOUT_CUDA();
  const MoeShape s;
  const RandomMoe moe(s, 2, 7);
  std::vector<float> out(size_t(2 * s.dim));
  {
    const ScopedCudaPaths linear("fma");
    const ScopedMoePath path("device");
    DI_MAKE_CUDA_BACKEND(gpu);
    EXPECT_FALSE(gpu->moe(moe.params(s, out.data())));
  }
  {
    const ScopedCudaPaths linear("mma");
    DI_MAKE_CUDA_BACKEND(gpu);
    EXPECT_FALSE(gpu->moe(moe.params(s, out.data())));
  }
  {
    const ScopedMoePath path("gpu");
    std::string error;
    EXPECT_EQ(make_cuda_backend(0, 0, &error), nullptr);
    EXPECT_NE(error.find("DEEPINFER_CUDA_MOE"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace deepinfer::testing
