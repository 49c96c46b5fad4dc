// Fast sparse attention (every SIMD level this CPU has) against the exact reference on fresh random
// V4-Flash shapes: 64 heads x 512, a 128-slot window part and a compressed part (ratio-4 top-512 or
// ratio-128 rows) with empty slots (short contexts, prefill layouts, whole empty 64-blocks, odd counts per
// block), both block_running_max settings, and kv rows that are not bf16 values (fp32 fallback).
// Bound per output: 2 bf16 ulps of the reference + 2^-10 of the head's largest |output| (a P that rounds the
// other way moves an output by about 2^-8 * P_j |v_j| / denominator).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "kernel/attention_case.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

class SparseAttentionKernel : public ::testing::TestWithParam<SimdLevel> {};

void run_case(SimdLevel level, const AttentionCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t H = c.n_heads, D = c.head_dim;
  const AttentionInputs in = make_attention_inputs(c, rng);

  auto reference = make_reference_backend();
  auto fast = make_fast_backend_with_level(2, level);
  for (bool running : {true, false}) {
    std::vector<float> ref(size_t(H * D)), got(size_t(H * D));
    SparseAttentionParams p{in.q.data(), H, D, in.slots.data(), int64_t(in.slots.size()), in.sink.data(), in.softmax_scale, running, ref.data()};
    reference->sparse_attention(p);
    p.out = got.data();
    fast->sparse_attention(p);
    const Diff d = expect_attention_within_bounds(ref, got, H, D, c.fp32_rows, c.name + " running=" + std::to_string(running), "fast");
    print_diff(std::string(simd_level_name(level)) + " " + c.name + (running ? " [block max]" : " [global max]"), d);
  }
}

TEST_P(SparseAttentionKernel, DecodeWindowPlusTopK) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), {"decode ratio-4: 128 window + 512 top-k"}, 1);
}

TEST_P(SparseAttentionKernel, ShortContextAndEmptySlots) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  AttentionCase c{"short context: 37 window rows, 9 compressed rows"};
  c.n_window_filled = 37;
  c.n_compressed = 64;
  c.n_compressed_filled = 9;
  run_case(GetParam(), c, 2);
  AttentionCase e{"prefill layout: odd fills, an empty 64-block"};
  e.n_window_filled = 101;
  e.n_compressed_filled = 333;
  e.empty_block = 2;
  run_case(GetParam(), e, 3);
  AttentionCase w{"window only (ratio 0), 1 row"};
  w.n_window_filled = 1;
  w.n_compressed = 0;
  w.n_compressed_filled = 0;
  run_case(GetParam(), w, 4);
}

TEST_P(SparseAttentionKernel, SharpSoftmaxSmallHeads) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  AttentionCase c{"sharp scores, 8 heads x 128"};
  c.n_heads = 8;
  c.head_dim = 128;
  c.n_compressed_filled = 300;
  c.score_scale = 3.0f;
  run_case(GetParam(), c, 5);
}

TEST_P(SparseAttentionKernel, NonBf16RowsFallBack) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  AttentionCase c{"fp32 kv rows"};
  c.n_heads = 16;
  c.n_compressed_filled = 200;
  c.fp32_rows = true;
  run_case(GetParam(), c, 6);
}

// sparse_attentions (a token per thread once there are two per thread) against one sparse_attention call per
// token (the heads split across the threads): the same bits, for 9 tokens with different slot lists, some of
// whose rows are not bf16 values (the fp32 family), and for 3 tokens (fewer than two per thread).
TEST_P(SparseAttentionKernel, BatchedTokensMatchOneByOne) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  std::mt19937 rng(7);
  const int64_t H = 16, D = 512, n_rows = 400;
  std::vector<float> kv = random_bf16_values(rng, n_rows * D, 1.0f);
  for (int64_t d = 0; d < D; ++d) kv[size_t(399 * D + d)] += 0x1p-12f;  // row 399: not bf16 values
  std::vector<float> sink(static_cast<size_t>(H), 0.25f);
  for (int64_t n_tokens : {9, 3}) {
    std::vector<float> q = random_bf16_values(rng, n_tokens * H * D, 1.0f);
    std::vector<std::vector<const float*>> slots(static_cast<size_t>(n_tokens));
    std::vector<SparseAttentionParams> ps;
    std::vector<float> batched(size_t(n_tokens * H * D)), single(size_t(n_tokens * H * D));
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::vector<const float*>& s = slots[size_t(t)];
      for (int64_t j = 0; j < 130 + 37 * t; ++j) s.push_back(&kv[size_t(((j * 7 + t) % (n_rows - 1)) * D)]);
      if (t % 3 == 2) s.push_back(&kv[size_t(399 * D)]);
      while (s.size() % 64) s.push_back(nullptr);
      ps.push_back({&q[size_t(t * H * D)], H, D, s.data(), int64_t(s.size()), sink.data(), 0.044, t % 2 == 0,
                    &batched[size_t(t * H * D)]});
    }
    auto fast = make_fast_backend_with_level(2, GetParam());
    fast->sparse_attentions(ps);
    for (int64_t t = 0; t < n_tokens; ++t) {
      SparseAttentionParams p = ps[size_t(t)];
      p.out = &single[size_t(t * H * D)];
      fast->sparse_attention(p);
    }
    for (size_t i = 0; i < batched.size(); ++i) {
      ASSERT_EQ(float_to_bits(batched[i]), float_to_bits(single[i])) << n_tokens << " tokens, element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, SparseAttentionKernel, ::testing::ValuesIn(all_simd_levels()), level_test_name);

}  // namespace
}  // namespace deepinfer::testing
