// The device linear chain (Backend::linear_chain with DEEPINFER_CUDA_LINEAR_CHAIN=device: the attention's output
// projection, wo_a's groups, z's QDQ, wo_b, in one call) against the model's own steps on the same backend
// (linear_chain_on_backend): the same kernels run each op and the QDQ is the host's exact code, so the outputs must
// be the same bits. Random FP8 weights in the V4 layout (the groups are row ranges of one wo_a, each reading its
// columns of o), V4 and V4.1 QDQ rules, 1 to 70 tokens (the register, staged and split kernels). The same for the
// projection chain (Backend::projection_chain).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "backend/backend.h"
#include "core/dtypes.h"
#include "cuda/cuda_util.h"
#include "cuda/random_output_projection.h"
#include "cuda/random_projections.h"
#include "kernel/kernel_test_util.h"
#include "model/linear_chain.h"
#include "model/mhc_side.h"

namespace deepinfer::testing {
namespace {

// The cases the chain tests sweep, each with the next seed from first_seed: the register and the split
// tensor-core kernels, 1, 3 and 70 tokens, V4 and V4.1 rules.
void for_each_chain_case(uint32_t first_seed, const std::function<void(int64_t n_tokens, bool v41, uint32_t seed)>& check) {
  uint32_t seed = first_seed;
  for (const char* linear : {"mma", "mma_split"}) {
    const ScopedCudaPaths paths(linear);
    SCOPED_TRACE(linear);
    for (int64_t n : {1, 3, 70}) {
      for (bool v41 : {false, true}) check(n, v41, seed++);
    }
  }
}

// The chain whole on `gpu` and by the model's steps on the same backend: the same bits.
void expect_chain_equals_steps(Backend& gpu, RandomOutputProjection& r) {
  std::vector<float> host(size_t(r.T * r.D), -7.0f), device(size_t(r.T * r.D), -7.0f);
  linear_chain_on_backend(gpu, r.chain(host.data()));
  ASSERT_TRUE(gpu.linear_chain(r.chain(device.data()))) << "the device chain declined an output projection it can run";
  EXPECT_EQ(n_differing(host, device), 0) << "of " << host.size() << " outputs";
  EXPECT_GT(std::count_if(device.begin(), device.end(), [](float v) { return v != 0.0f && v != -7.0f; }), int64_t(host.size() / 2));
}

void expect_chain_equals_model_steps(int64_t n_tokens, bool v41, uint32_t seed) {
  SCOPED_TRACE(std::string(v41 ? "V4.1" : "V4") + " QDQ, " + std::to_string(n_tokens) + " tokens");
  std::mt19937 rng(seed);
  RandomOutputProjection r(n_tokens, v41, rng);
  setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
  DI_MAKE_CUDA_BACKEND(gpu);
  unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
  expect_chain_equals_steps(*gpu, r);
}

// The chain's CUDA graphs: two layers' output projections (two keys) on one backend, each replayed with new inputs
// after the other's capture; the same bits with graphs off.
TEST(LinearChainCuda, ChainGraphsReplayTheirOwnWork) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  for (const char* graphs : {"on", "off"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_GRAPHS=") + graphs);
    std::mt19937 rng(400);
    RandomOutputProjection first_layer(2, false, rng), second_layer(2, false, rng);
    setenv("DEEPINFER_CUDA_GRAPHS", graphs, 1);
    setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
    DI_MAKE_CUDA_BACKEND(gpu);
    unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
    unsetenv("DEEPINFER_CUDA_GRAPHS");
    for (int round = 0; round < 3; ++round) {
      for (RandomOutputProjection* layer : {&first_layer, &second_layer}) {
        SCOPED_TRACE("round " + std::to_string(round));
        const std::vector<float> o = random_bf16_values(rng, int64_t(layer->o.size()), 1.0f);
        std::copy(o.begin(), o.end(), layer->o.begin());
        expect_chain_equals_steps(*gpu, *layer);
      }
    }
  }
}

TEST(LinearChainCuda, DeviceChainEqualsTheModelStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  for_each_chain_case(1, expect_chain_equals_model_steps);
}

void expect_same_outputs(const RandomProjections::Outputs& host, const RandomProjections::Outputs& device) {
  EXPECT_EQ(n_differing(host.qr, device.qr), 0) << "the normed mid";
  EXPECT_EQ(n_differing(host.qr_q, device.qr_q), 0) << "mid_q";
  EXPECT_EQ(n_differing(host.kv, device.kv), 0);
  EXPECT_EQ(n_differing(host.c, device.c), 0);
  EXPECT_EQ(n_differing(host.g, device.g), 0);
  EXPECT_EQ(n_differing(host.q, device.q), 0);
  EXPECT_EQ(n_differing(host.iq, device.iq), 0);
  EXPECT_GT(n_differing(device.qr, device.qr_q), 0) << "mid_q is mid after a QDQ that changes values";
  EXPECT_GT(std::count_if(device.q.begin(), device.q.end(), [](float v) { return v != 0.0f && v != -7.0f; }),
            int64_t(device.q.size() / 2));
}

// The projection chain (Backend::projection_chain: the attention's projections of u, qr's norm and QDQ, the
// projections of qr) against the model's steps (projection_chain_on_backend): first's outputs, the normed mid, mid_q
// and second's outputs, the same bits.
void expect_projection_chain_equals_model_steps(int64_t n_tokens, bool v41, uint32_t seed) {
  SCOPED_TRACE(std::string(v41 ? "V4.1" : "V4") + " rules, " + std::to_string(n_tokens) + " tokens");
  std::mt19937 rng(seed);
  RandomProjections r(n_tokens, v41, rng);
  const std::vector<float> u = random_bf16_values(rng, n_tokens * r.D, 1.0f), uq = random_bf16_values(rng, n_tokens * r.D, 1.0f);
  setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
  DI_MAKE_CUDA_BACKEND(gpu);
  unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
  RandomProjections::Outputs host(r), device(r);
  projection_chain_on_backend(*gpu, r.chain(u.data(), uq.data(), host));
  EXPECT_TRUE(gpu->projection_chain(r.chain(u.data(), uq.data(), device))) << "the device chain declined projections it can run";
  expect_same_outputs(host, device);
}

TEST(LinearChainCuda, DeviceProjectionChainEqualsTheModelStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  for_each_chain_case(100, expect_projection_chain_equals_model_steps);
}

// The front's run on `backend`: u, uq, the coefficients and every output. By MhcFront::run_with (which asks for u and
// uq back only where the backend runs its steps), or by the backend's mhc_projection_chain with u and uq back.
struct FrontRun {
  MhcScratch scratch;
  RandomProjections::Outputs out;
  FrontRun(Backend& backend, const MhcSideParams& side, RandomProjections& r, bool u_back = false) : out(r) {
    MhcFront front(backend, side, scratch);
    const ProjectionChainParams chain = r.chain(front.u().data(), front.uq().data(), out);
    if (!u_back) {
      front.run_with(chain);
      return;
    }
    auto* coeffs = reinterpret_cast<float*>(scratch.coeffs.data());
    EXPECT_TRUE(backend.mhc_projection_chain(
        {.side = side, .u = scratch.u.data(), .uq = scratch.uq.data(), .coeffs = coeffs, .chain = chain, .u_back = true}));
  }
};

// The attention side's front (Backend::mhc_projection_chain: the mHC side's first half, uq, then the projection
// chain) against MhcFront's steps on a backend without the option (steps_gpu): u, uq, the coefficients and every
// output, the same bits.
void expect_front_equals_model_steps(Backend& gpu, Backend& steps_gpu, const MhcSideParams& side, RandomProjections& r) {
  const FrontRun host(steps_gpu, side, r), device(gpu, side, r, true), model_device(gpu, side, r);
  expect_same_outputs(host.out, model_device.out);
  EXPECT_EQ(n_differing(host.scratch.u, device.scratch.u), 0) << "u";
  EXPECT_EQ(n_differing(host.scratch.uq, device.scratch.uq), 0) << "uq";
  auto floats = [](const std::vector<HcCoefficients>& coeffs) {  // pre, post and comb of every token
    const auto* first = reinterpret_cast<const float*>(coeffs.data());
    return std::vector<float>(first, first + coeffs.size() * 24);
  };
  EXPECT_EQ(n_differing(floats(host.scratch.coeffs), floats(device.scratch.coeffs)), 0) << "the coefficients";
  EXPECT_GT(n_differing(device.scratch.u, device.scratch.uq), 0) << "uq is u after a QDQ that changes values";
  expect_same_outputs(host.out, device.out);
}

TEST(LinearChainCuda, DeviceFrontEqualsTheModelStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  for_each_chain_case(200, [](int64_t n, bool v41, uint32_t seed) {
    SCOPED_TRACE(std::string(v41 ? "V4.1" : "V4") + " rules, " + std::to_string(n) + " tokens");
    std::mt19937 rng(seed);
    RandomProjections r(n, v41, rng);
    const RandomFrontSide side(n, RandomProjections::D, v41, rng);
    const std::unique_ptr<Backend> gpu = make_chain_backend("device"), steps_gpu = make_chain_backend("host");
    ASSERT_TRUE(gpu && steps_gpu);
    expect_front_equals_model_steps(*gpu, *steps_gpu, side.side, r);
  });
}

// The front's CUDA graphs: two layers' fronts (two keys) on one backend, each replayed with new streams after the
// other's capture, so a replay must run its own work on the new inputs (a graph that copied staging shared with
// the other's capture fails here); the same bits with graphs off.
TEST(LinearChainCuda, FrontGraphsReplayTheirOwnWork) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  for (const char* graphs : {"on", "off"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_GRAPHS=") + graphs);
    std::mt19937 rng(300);
    RandomProjections first_layer(2, false, rng), second_layer(2, false, rng);
    RandomFrontSide side(2, RandomProjections::D, false, rng);
    setenv("DEEPINFER_CUDA_GRAPHS", graphs, 1);
    const std::unique_ptr<Backend> gpu = make_chain_backend("device"), steps_gpu = make_chain_backend("host");
    unsetenv("DEEPINFER_CUDA_GRAPHS");
    ASSERT_TRUE(gpu && steps_gpu);
    for (int round = 0; round < 3; ++round) {
      for (RandomProjections* layer : {&first_layer, &second_layer}) {
        SCOPED_TRACE("round " + std::to_string(round));
        side.h = random_bf16_values(rng, int64_t(side.h.size()), 1.0f);
        side.side.h = side.h.data();
        expect_front_equals_model_steps(*gpu, *steps_gpu, side.side, *layer);
      }
    }
  }
}

// The FMA linear takes other kernels than the chain would: it declines there, and by default (host).
TEST(LinearChainCuda, DeclinesWhereTheModelStepsDiffer) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  const OwnedWeight wo_a = random_fp8_weight(rng, 128, 128, 128), wo_b = random_fp8_weight(rng, 128, 128, 128);
  const std::vector<float> o = random_bf16_values(rng, 128, 1.0f);
  std::vector<float> z(128), out(128);
  const LinearParams first{o.data(), 128, 1, &wo_a.w, 0, 128, Epilogue::kBf16, nullptr, z.data(), 128};
  const LinearChainParams p{{&first, 1}, z.data(), 1, 128, 128, false, {z.data(), 128, 1, &wo_b.w, 0, 128, Epilogue::kBf16, nullptr, out.data(), 128, 128}};
  {
    const ScopedCudaPaths linear("fma");
    setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
    DI_MAKE_CUDA_BACKEND(gpu);
    unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
    EXPECT_FALSE(gpu->linear_chain(p));
  }
  {
    const ScopedCudaPaths linear("mma");
    DI_MAKE_CUDA_BACKEND(gpu);
    EXPECT_FALSE(gpu->linear_chain(p));
  }
  setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "always", 1);
  std::string error;
  EXPECT_EQ(make_cuda_backend(0, 0, &error), nullptr);
  unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
  EXPECT_NE(error.find("DEEPINFER_CUDA_LINEAR_CHAIN"), std::string::npos) << error;
}

}  // namespace
}  // namespace deepinfer::testing
