// Backend::linear_argmax on the CUDA backend (the head of a greedy draw): each token's id is model/ops.h's argmax
// over the outputs linear() gives on the same backend (row_argmax_kernel.cu), the kept tokens' rows are linear()'s
// bits and the other rows are left as they were. The weights plant what the reduction must get right: rows that tie
// at a token's largest value in different threads and warps of the block (the lowest index wins), a NaN row (passed
// over), a token whose outputs are all NaN (0) and outputs that are all -inf but a NaN (the first -inf). On the
// tensor-core and the FMA linear.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_test_util.h"
#include "model/ops.h"

namespace deepinfer::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

void set_weight(OwnedWeight& w, int64_t row, int64_t k, float bf16_value) {
  reinterpret_cast<uint16_t*>(w.data.data())[row * w.w.n_in + k] = bf16_of(bf16_value);
}

// linear_argmax against linear() and the host's argmax on the same backend, keeping the tokens where keep(t).
void expect_draws_of_linear(Backend& gpu, const LinearWeight& w, const std::vector<float>& x, int64_t n_tokens,
                            const std::function<bool(int64_t)>& keep, const std::vector<int32_t>& want_ids = {}) {
  const int64_t V = w.n_out, K = w.n_in, out_stride = V + 3;
  std::vector<float> all(size_t(n_tokens * V));
  gpu.linear({x.data(), K, n_tokens, &w, 0, V, Epilogue::kF32, nullptr, all.data(), V});
  // The same op on other inputs, so that the backend's staging holds other outputs in the places linear_argmax uses.
  std::vector<float> other_x(x.size()), other_out(all.size());
  for (size_t i = 0; i < x.size(); ++i) other_x[i] = -2.0f * x[i];
  gpu.linear({other_x.data(), K, n_tokens, &w, 0, V, Epilogue::kF32, nullptr, other_out.data(), V});
  std::vector<float> out(size_t(n_tokens * out_stride), -7.0f);
  std::vector<uint8_t> keep_out(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) keep_out[size_t(t)] = keep(t);
  std::vector<int32_t> ids(size_t(n_tokens), -1);
  ASSERT_TRUE(gpu.linear_argmax({x.data(), K, n_tokens, &w, 0, V, Epilogue::kF32, nullptr, out.data(), out_stride}, keep_out,
                                ids.data()));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = &all[size_t(t * V)];
    EXPECT_EQ(ids[size_t(t)], int32_t(argmax(row, V))) << "token " << t;
    if (t < int64_t(want_ids.size())) {
      EXPECT_EQ(ids[size_t(t)], want_ids[size_t(t)]) << "token " << t;
    }
    int64_t n_wrong = 0;
    for (int64_t i = 0; i < out_stride; ++i) {
      const float got = out[size_t(t * out_stride + i)];
      const bool written = keep_out[size_t(t)] && i < V;
      const float want = written ? row[i] : -7.0f;
      n_wrong += !(std::memcmp(&got, &want, 4) == 0 || (std::isnan(got) && std::isnan(want)));
    }
    EXPECT_EQ(n_wrong, 0) << "token " << t << (keep_out[size_t(t)] ? " (kept)" : " (drawn only)");
  }
}

void expect_draws(const std::string& linear_path) {
  const ScopedCudaPaths paths(linear_path);
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(7);
  const int64_t V = 6000, K = 256, T = 9;
  OwnedWeight w = random_bf16_weight(rng, V, K);
  std::vector<float> x = random_bf16_values(rng, T * K, 1.0f);
  // Token 0's largest output at rows 777, 3000 and 5001 (threads 9, 184 and 137 of the 256-thread block: warps 0, 5
  // and 4), token 1's at rows 4000 and 10 (the lower index in the later warp): copies of one row that follows the
  // token's signs, so their sums are the same bits and far above the random rows'.
  for (int64_t k = 0; k < K; ++k) {
    const float hot0 = x[size_t(k)] < 0 ? -0.5f : 0.5f, hot1 = x[size_t(K + k)] < 0 ? -0.5f : 0.5f;
    for (int64_t row : {777, 3000, 5001}) set_weight(w, row, k, hot0);
    for (int64_t row : {4000, 10}) set_weight(w, row, k, hot1);
  }
  set_weight(w, 2000, 5, kNan);  // a NaN output in every token
  for (int64_t k = 0; k < K; ++k) x[size_t(2 * K + k)] = kNan;  // token 2: every output NaN
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t t) { return t % 3 == 1; }, {777, 10, 0});
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t t) { return t % 3 != 0; }, {777, 10, 0});  // runs of 2 kept rows
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t t) { return t < 5; }, {777, 10, 0});
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t) { return false; }, {777, 10, 0});
  expect_draws_of_linear(*gpu, w.w, x, 1, [](int64_t) { return true; }, {777});

  // Every output -inf but row 0's NaN: x = e_0 against a column 0 of -inf.
  OwnedWeight inf_w = random_bf16_weight(rng, 300, 32);
  for (int64_t row = 0; row < 300; ++row) set_weight(inf_w, row, 0, row == 0 ? kNan : -INFINITY);
  std::vector<float> e0(32, 0.0f);
  e0[0] = 1.0f;
  expect_draws_of_linear(*gpu, inf_w.w, e0, 1, [](int64_t) { return false; }, {1});
}

TEST(LinearArgmaxCuda, DrawsAreTheHostsArgmaxOfTheOutputsOnMma) { expect_draws("mma"); }
TEST(LinearArgmaxCuda, DrawsAreTheHostsArgmaxOfTheOutputsOnFma) { expect_draws("fma"); }

}  // namespace
}  // namespace deepinfer::testing
