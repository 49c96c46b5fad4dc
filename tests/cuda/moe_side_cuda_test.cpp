// A block's whole FFN side on the device (Backend::moe_side, DEEPINFER_CUDA_MOE=device) against the model's own
// steps on the same backend (moe_side_on_backend: hc_mix, then the coefficients, collapse and norm on the host,
// the device MoE, the expansion on the host). mhc_kernels.cu repeats the host's exact arithmetic, so h_out and
// pre_out must be the same bits. Random streams and mHC weights around random_moe.h's blocks, with V4's rule (u
// collapsed with the side's own pre) and V4.1's (with another side's pre). The same for a block's whole tail
// (Backend::block_tail with DEEPINFER_CUDA_LINEAR_CHAIN=device too: the attention's output projection, the
// attention side's expansion, then the FFN side) against its steps (block_tail_on_backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/dtypes.h"
#include "cuda/cuda_util.h"
#include "cuda/random_moe.h"
#include "cuda/random_output_projection.h"
#include "cuda/random_projections.h"
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

// A block's tail around random_moe.h's block: a random output projection (the attention's output), the attention
// side's stream and random coefficients (any floats: the expansion is exact arithmetic on them), and an FFN side.
struct RandomTail {
  RandomOutputProjection output;
  RandomSide attention, ffn;
  std::vector<float> coeffs;

  RandomTail(const MoeShape& s, int64_t n_tokens, std::mt19937& rng)
      : output(n_tokens, s.v41, rng, s.dim), attention(n_tokens, s.dim, false, rng()), ffn(n_tokens, s.dim, s.v41, rng()) {
    std::uniform_real_distribution<float> uniform(0.05f, 1.0f);
    for (int64_t i = 0; i < n_tokens * 24; ++i) coeffs.push_back(uniform(rng));
  }
  // New attention outputs and streams, in place (the chain's ops point into o).
  void refresh_inputs(std::mt19937& rng) {
    for (std::vector<float>* v : {&output.o, &attention.h}) {
      const std::vector<float> values = random_bf16_values(rng, int64_t(v->size()), 1.0f);
      std::copy(values.begin(), values.end(), v->begin());
    }
  }

  // The tail as the model hands it over: the FFN side writes its output over a copy of the attention side's
  // input (`stream`, in and out, as a block's two stream buffers take turns).
  BlockTailParams params(const RandomMoe& moe, const MoeShape& s, float* stream, float* sub_out, float* h_mid, float* pre_out) {
    const int64_t T = output.T;
    BlockTailParams p;
    p.output = output.chain(sub_out);
    p.attention = attention.params(moe, s, T, h_mid, nullptr).side;
    p.attention.h = stream;
    p.attention_coeffs = coeffs.data();
    p.ffn = ffn.params(moe, s, T, stream, pre_out);
    p.ffn.side.h = h_mid;
    return p;
  }
};

// The tail on `gpu` whole and by its steps: the same block output and pre.
void expect_tail_equals_steps(Backend& gpu, const RandomMoe& moe, RandomTail& tail, const MoeShape& s) {
  const int64_t T = tail.output.T;
  const size_t n = size_t(T * 4 * s.dim);
  std::vector<float> host(tail.attention.h.begin(), tail.attention.h.begin() + int64_t(n)), device = host;
  std::vector<float> sub_out(size_t(T * s.dim)), h_mid(n), host_pre(size_t(T * 4), -7.0f), device_pre = host_pre;
  MhcScratch scratch;
  block_tail_on_backend(gpu, tail.params(moe, s, host.data(), sub_out.data(), h_mid.data(), host_pre.data()), scratch);
  ASSERT_TRUE(gpu.block_tail(tail.params(moe, s, device.data(), sub_out.data(), h_mid.data(), device_pre.data())))
      << "the device declined a tail it can run";
  EXPECT_EQ(n_differing(host, device), 0) << "of " << n << " stream values";
  EXPECT_EQ(n_differing(host_pre, device_pre), 0) << "of the pre";
  EXPECT_TRUE(std::all_of(device.begin(), device.end(), [](float v) { return std::isfinite(v); }));
  std::vector<float> h_in(tail.attention.h.begin(), tail.attention.h.begin() + int64_t(n));
  EXPECT_GT(n_differing(h_in, device), int64_t(n / 2));
}

TEST(MoeSideCuda, DeviceTailEqualsItsStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedTailPaths paths;
  uint32_t seed = 300;
  for (int64_t n : moe_test_token_counts()) {
    for (const MoeShape& s : {MoeShape{}, MoeShape{.v41 = true}, MoeShape{.hash = true, .n_experts = 12, .top_k = 3}}) {
      SCOPED_TRACE(std::string(s.v41 ? "V4.1" : "V4") + (s.hash ? " hash" : " score") + " routing, " + std::to_string(n) + " tokens");
      std::mt19937 rng(seed++);
      const RandomMoe moe(s, n, rng());
      RandomTail tail(s, n, rng);
      DI_MAKE_CUDA_BACKEND(gpu);
      expect_tail_equals_steps(*gpu, moe, tail, s);
    }
  }
}

// The tails of two blocks (two graph keys) on one backend, each replayed with new inputs after the other's capture:
// a replay must take the newly staged attention output and stream. The same bits with graphs off.
TEST(MoeSideCuda, TailGraphsReplayTheirOwnWork) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedTailPaths paths;
  for (const char* graphs : {"on", "off"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_GRAPHS=") + graphs);
    const MoeShape s;
    std::mt19937 rng(31);
    const RandomMoe first_moe(s, 2, 32), second_moe(s, 2, 33);
    RandomTail first_tail(s, 2, rng), second_tail(s, 2, rng);
    setenv("DEEPINFER_CUDA_GRAPHS", graphs, 1);
    DI_MAKE_CUDA_BACKEND(gpu);
    unsetenv("DEEPINFER_CUDA_GRAPHS");
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      for (auto [moe, tail] : {std::pair{&first_moe, &first_tail}, std::pair{&second_moe, &second_tail}}) {
        tail->refresh_inputs(rng);
        expect_tail_equals_steps(*gpu, *moe, *tail, s);
      }
    }
  }
}

// For 1 and 3 tokens: body(n, rng, moe) with a generator seeded seed + n and a random MoE of shape s for n tokens.
void for_one_and_three_tokens(const MoeShape& s, uint32_t seed,
                              const std::function<void(int64_t, std::mt19937&, const RandomMoe&)>& body) {
  for (int64_t n : {1, 3}) {
    SCOPED_TRACE(std::to_string(n) + " tokens");
    std::mt19937 rng(uint32_t(seed + n));
    const RandomMoe moe(s, n, rng());
    body(n, rng, moe);
  }
}

// The attention side's stream kept by the block's front (MhcProjectionParams::keep_h) and read there by its tail
// (MhcSideParams::h_kept): the tail's outputs those of its steps on the host's stream, also with the host's array
// overwritten after the front (so the tail can only have read the kept copy). 1 and 3 tokens, graphs on.
TEST(MoeSideCuda, TailReadsTheFrontsKeptStream) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedTailPaths paths;
  const MoeShape s;
  for_one_and_three_tokens(s, 50, [&](int64_t n, std::mt19937& rng, const RandomMoe& moe) {
    RandomTail tail(s, n, rng);
    RandomProjections projections(n, false, rng);
    ASSERT_EQ(RandomProjections::D, s.dim);
    DI_MAKE_CUDA_BACKEND(gpu);
    const size_t stream_floats = size_t(n * 4 * s.dim);
    std::vector<float> host(tail.attention.h.begin(), tail.attention.h.begin() + int64_t(stream_floats)), device = host;
    std::vector<float> sub_out(size_t(n * s.dim)), h_mid(stream_floats), host_pre(size_t(n * 4)), device_pre = host_pre;
    std::vector<float> u(size_t(n * s.dim)), uq(u.size()), coeffs(size_t(n * 24));
    RandomProjections::Outputs outputs(projections);
    MhcSideParams side = tail.attention.params(moe, s, n, h_mid.data(), nullptr).side;
    side.h = device.data();
    ASSERT_TRUE(gpu->mhc_projection_chain({.side = side, .u = u.data(), .uq = uq.data(), .coeffs = coeffs.data(),
                                           .chain = projections.chain(u.data(), uq.data(), outputs), .keep_h = true}));
    std::fill(device.begin(), device.end(), 1e30f);  // only the kept copy holds the stream now
    MhcScratch scratch;
    block_tail_on_backend(*gpu, tail.params(moe, s, host.data(), sub_out.data(), h_mid.data(), host_pre.data()), scratch);
    BlockTailParams kept = tail.params(moe, s, device.data(), sub_out.data(), h_mid.data(), device_pre.data());
    kept.attention.h_kept = true;
    kept.keep_h_out = true;  // and the output stream left on the device, for the next block's front
    ASSERT_TRUE(gpu->block_tail(kept));
    EXPECT_TRUE(std::all_of(device.begin(), device.end(), [](float v) { return v == 1e30f; })) << "the host's stream written";
    gpu->fetch_kept(device.data(), int64_t(device.size()));
    EXPECT_EQ(n_differing(host, device), 0) << "of " << stream_floats << " stream values";
    EXPECT_EQ(n_differing(host_pre, device_pre), 0) << "of the pre";
    // The next front reads it there (MhcProjectionParams::h_on_backend): its outputs those of a front on the host's.
    std::fill(device.begin(), device.end(), 1e30f);
    RandomProjections::Outputs on_host(projections), on_device(projections);
    MhcSideParams next = side;
    // (the kept one first: the front's scratch then holds no earlier copy of the stream)
    for (auto [h, outputs, on_backend] : {std::tuple{device.data(), &on_device, true}, std::tuple{host.data(), &on_host, false}}) {
      next.h = h;
      ASSERT_TRUE(gpu->mhc_projection_chain({.side = next, .u = u.data(), .uq = uq.data(), .coeffs = coeffs.data(),
                                             .chain = projections.chain(u.data(), uq.data(), *outputs), .h_on_backend = on_backend}));
    }
    EXPECT_EQ(n_differing(on_host.q, on_device.q), 0);
    EXPECT_EQ(n_differing(on_host.kv, on_device.kv), 0);
  });
}

// Two blocks' tails with nothing to bring back (the output stream kept, no pre: V4's) return without waiting for
// their work; the second, queued right behind the first, must not rewrite the staging the first's queued copies
// still read. Under the emulated runtime those copies read it only at the next wait, so a rewrite shows in the
// first's stream. Each stream those of the tail's steps, 1 and 3 tokens.
TEST(MoeSideCuda, TailsThatKeepTheirStreamDoNotWaitYetKeepTheirInputs) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedTailPaths paths;
  const MoeShape s;
  for_one_and_three_tokens(s, 60, [&](int64_t n, std::mt19937& rng, const RandomMoe& moe) {
    RandomTail tails[2] = {RandomTail(s, n, rng), RandomTail(s, n, rng)};
    DI_MAKE_CUDA_BACKEND(gpu);
    const size_t stream_floats = size_t(n * 4 * s.dim);
    std::vector<float> host[2], device[2], sub_out[2], h_mid[2];
    for (int i = 0; i < 2; ++i) {
      host[i].assign(tails[i].attention.h.begin(), tails[i].attention.h.begin() + int64_t(stream_floats));
      device[i] = host[i];
      sub_out[i].resize(size_t(n * s.dim));
      h_mid[i].resize(stream_floats);
      MhcScratch scratch;
      block_tail_on_backend(*gpu, tails[i].params(moe, s, host[i].data(), sub_out[i].data(), h_mid[i].data(), nullptr), scratch);
    }
    for (int i = 0; i < 2; ++i) {
      BlockTailParams kept = tails[i].params(moe, s, device[i].data(), sub_out[i].data(), h_mid[i].data(), nullptr);
      kept.keep_h_out = true;
      ASSERT_TRUE(gpu->block_tail(kept));
    }
    for (int i = 0; i < 2; ++i) {
      gpu->fetch_kept(device[i].data(), int64_t(stream_floats));
      EXPECT_EQ(n_differing(host[i], device[i]), 0) << "tail " << i << ": of " << stream_floats << " stream values";
    }
    // A block's FFN side alone (an MTP block's) right behind a tail: it stages into the same pinned memory.
    device[0] = tails[0].attention.h;
    device[0].resize(stream_floats);
    BlockTailParams kept = tails[0].params(moe, s, device[0].data(), sub_out[0].data(), h_mid[0].data(), nullptr);
    kept.keep_h_out = true;
    ASSERT_TRUE(gpu->block_tail(kept));
    std::vector<float> side_out(stream_floats);
    ASSERT_TRUE(gpu->moe_side(tails[1].ffn.params(moe, s, n, side_out.data(), nullptr)));
    gpu->fetch_kept(device[0].data(), int64_t(stream_floats));
    EXPECT_EQ(n_differing(host[0], device[0]), 0) << "the tail before an FFN side: of " << stream_floats << " stream values";
  });
}

// V4.1's tail leaves the FFN side's pre on the device with the stream (BlockTailParams::keep_pre_out), returning without
// a wait; the next block's front collapses with it there (MhcProjectionParams::pre_on_backend). The kept pre is the
// steps' bits, its host array untouched, and the front on it gives a front on the host's pre's outputs. 1 and 3 tokens.
TEST(MoeSideCuda, TailKeepsTheV41PreForTheNextFront) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const ScopedTailPaths paths;
  MoeShape s;
  s.v41 = true;
  for_one_and_three_tokens(s, 70, [&](int64_t n, std::mt19937& rng, const RandomMoe& moe) {
    RandomTail tail(s, n, rng);
    RandomProjections projections(n, true, rng);
    DI_MAKE_CUDA_BACKEND(gpu);
    const size_t stream_floats = size_t(n * 4 * s.dim);
    std::vector<float> host(tail.attention.h.begin(), tail.attention.h.begin() + int64_t(stream_floats)), device = host;
    std::vector<float> sub_out(size_t(n * s.dim)), h_mid(stream_floats), host_pre(size_t(n * 4), -7.0f), device_pre = host_pre;
    MhcScratch scratch;
    block_tail_on_backend(*gpu, tail.params(moe, s, host.data(), sub_out.data(), h_mid.data(), host_pre.data()), scratch);
    BlockTailParams kept = tail.params(moe, s, device.data(), sub_out.data(), h_mid.data(), device_pre.data());
    kept.keep_h_out = true;
    kept.keep_pre_out = true;
    ASSERT_TRUE(gpu->block_tail(kept));
    EXPECT_TRUE(std::all_of(device_pre.begin(), device_pre.end(), [](float v) { return v == -7.0f; })) << "the host's pre written";
    // The next front on the kept stream and pre, and on the host's (the kept one first).
    std::vector<float> u(size_t(n * s.dim)), uq(u.size()), coeffs_kept(size_t(n * 24)), coeffs_host(coeffs_kept.size());
    RandomProjections::Outputs on_device(projections), on_host(projections);
    MhcSideParams next = tail.attention.params(moe, s, n, h_mid.data(), nullptr).side;
    next.h = device.data();
    next.collapse_pre = device_pre.data();
    ASSERT_TRUE(gpu->mhc_projection_chain({.side = next, .u = u.data(), .uq = uq.data(), .coeffs = coeffs_kept.data(),
                                           .chain = projections.chain(u.data(), uq.data(), on_device), .h_on_backend = true,
                                           .pre_on_backend = true}));
    next.h = host.data();
    next.collapse_pre = host_pre.data();
    ASSERT_TRUE(gpu->mhc_projection_chain({.side = next, .u = u.data(), .uq = uq.data(), .coeffs = coeffs_host.data(),
                                           .chain = projections.chain(u.data(), uq.data(), on_host)}));
    EXPECT_EQ(n_differing(on_host.qr, on_device.qr), 0) << "the front collapsed with another pre";
    EXPECT_EQ(n_differing(on_host.kv, on_device.kv), 0);
    EXPECT_EQ(n_differing(coeffs_host, coeffs_kept), 0);
    gpu->fetch_kept(device_pre.data(), int64_t(device_pre.size()));
    EXPECT_EQ(n_differing(host_pre, device_pre), 0) << "of the pre";
    gpu->fetch_kept(device.data(), int64_t(stream_floats));
    EXPECT_EQ(n_differing(host, device), 0) << "of " << stream_floats << " stream values";
  });
}

// The tail declines where its steps would not run on the device whole: without the device chain, and without the
// device MoE.
TEST(MoeSideCuda, TailDeclinesWhereItsStepsDiffer) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths linear("mma");
  const MoeShape s;
  std::mt19937 rng(41);
  const RandomMoe moe(s, 2, 42);
  RandomTail tail(s, 2, rng);
  std::vector<float> stream = tail.attention.h, sub_out(size_t(2 * s.dim)), h_mid(stream.size()), pre(8);
  {
    const ScopedMoePath moe_only("device");
    DI_MAKE_CUDA_BACKEND(gpu);
    EXPECT_FALSE(gpu->block_tail(tail.params(moe, s, stream.data(), sub_out.data(), h_mid.data(), pre.data())));
  }
  setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
  DI_MAKE_CUDA_BACKEND(gpu);
  unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
  EXPECT_FALSE(gpu->block_tail(tail.params(moe, s, stream.data(), sub_out.data(), h_mid.data(), pre.data())));
}

}  // namespace
}  // namespace deepinfer::testing
