// The draw kernels themselves (kernels.h: launch_row_draws, launch_row_top_k), each row on one block and spread over
// blocks (split_scratch): the same bytes out, at widths around a span's (256 ids) and a split block's (2,048) edges,
// for skipped, greedy, sampled, top-k and nucleus rows, rows of ties across blocks and rows whose best is NaN, +inf or
// -inf; and the one-block answers are the host's (model/token_draw.h). Linear_draws_cuda_test.cpp tests the same
// through the backend; this one needs no linear, so it reaches V4's whole vocabulary too (~3 s on the emulated device).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "cuda/cuda_util.h"
#include "model/ops.h"
#include "model/token_draw.h"

namespace deepinfer::testing {
namespace {

using cuda::DeviceBuffer;

template <typename T>
DeviceBuffer device_copy(const std::vector<T>& host) {
  DeviceBuffer device(std::max<size_t>(host.size(), 1) * sizeof(T));
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(device.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return device;
}

template <typename T>
std::vector<T> host_copy(const T* device, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// What one launch of each kind gives back.
struct DrawOutputs {
  std::vector<int32_t> ids;
  std::vector<double> totals;
  std::vector<cuda::DeviceDrawCandidate> candidates;
};

// Rows [n_rows, width] drawn with `draws`, each row on one block (split false) or spread over blocks. The outputs start
// as values no draw writes, so that a row left unwritten shows as the same in both.
DrawOutputs run_draws(const std::vector<float>& rows, int64_t width, const std::vector<cuda::DeviceTokenDraw>& draws,
                      int max_k, int64_t n_candidates, bool split) {
  const int64_t n_rows = int64_t(draws.size());
  const DeviceBuffer x = device_copy(rows), d = device_copy(draws);
  const DeviceBuffer ids = device_copy(std::vector<int32_t>(size_t(n_rows), 0x5a5a5a5a));
  const DeviceBuffer totals = device_copy(std::vector<double>(size_t(n_rows), 0.0));
  const std::vector<cuda::DeviceDrawCandidate> unwritten(size_t(std::max<int64_t>(n_candidates, 1)), {-7.5f, -7});
  const DeviceBuffer candidates = device_copy(unwritten);
  const DeviceBuffer scratch(split ? std::max(cuda::row_draw_split_scratch_bytes(n_rows, width),
                                              max_k > 0 ? cuda::row_top_k_split_scratch_bytes(n_rows, width, max_k) : 0)
                                   : 0);
  cuda::launch_row_draws(x.get<float>(), n_rows, width, width, d.get<cuda::DeviceTokenDraw>(), ids.get<int32_t>(),
                         totals.get<double>(), scratch.get(), nullptr);
  if (max_k > 0) {
    cuda::launch_row_top_k(x.get<float>(), n_rows, width, width, d.get<cuda::DeviceTokenDraw>(), max_k,
                           candidates.get<cuda::DeviceDrawCandidate>(), scratch.get(), nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {host_copy(ids.get<int32_t>(), size_t(n_rows)), host_copy(totals.get<double>(), size_t(n_rows)),
          host_copy(candidates.get<cuda::DeviceDrawCandidate>(), unwritten.size())};
}

// A width's rows and draws: each kind of draw on random rows, and the rows that test the reductions' edges.
void expect_split_equals_whole(int64_t width, std::mt19937& rng) {
  SCOPED_TRACE("width " + std::to_string(width));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  std::vector<cuda::DeviceTokenDraw> draws;
  const int k_small = int(std::min<int64_t>(50, width)), k_nucleus = int(std::min<int64_t>(cuda::kRowTopKMax, width));
  auto add = [&](std::vector<float> row, cuda::DeviceTokenDraw draw) {
    rows.push_back(std::move(row));
    draws.push_back(draw);
  };
  auto random_row = [&] {
    std::vector<float> row(static_cast<size_t>(width));
    for (float& v : row) v = normal(rng);
    return row;
  };
  // Ties at the largest value in every block (the lowest id wins), and a third of the ids tied at 2 (the candidates'
  // equal keys span blocks).
  std::vector<float> ties(static_cast<size_t>(width), -1.0f), thirds(static_cast<size_t>(width), -1.0f);
  for (int64_t i = width - 1; i >= 0; i -= 1500) ties[size_t(i)] = 4.0f;
  for (int64_t i = 0; i < width; i += 3) thirds[size_t(i)] = 2.0f;
  std::vector<float> all_nan(static_cast<size_t>(width), nan), all_minus_inf(static_cast<size_t>(width), -inf);
  std::vector<float> plus_inf = random_row();
  plus_inf[size_t(width / 2)] = inf;
  all_minus_inf[0] = nan;
  add(random_row(), {.skip = 1});
  add(random_row(), {});                                                 // greedy
  add(ties, {});
  add(random_row(), {.uniform = uniform(rng), .temperature = 0.7f});   // the plain temperature draw
  add(random_row(), {.uniform = std::nextafter(1.0, 0.0), .temperature = 1.3f});
  add(ties, {.uniform = 0.999, .temperature = 1.0f});
  add(random_row(), {.uniform = 0.3, .temperature = 1.0f, .top_k = k_small});                  // a top-k draw's
  add(thirds, {.uniform = 0.97, .temperature = 0.5f, .top_k = k_nucleus});
  add(random_row(), {.temperature = 1.0f, .top_k = k_nucleus, .nucleus = 1});                 // a nucleus draw's
  add(thirds, {.temperature = 0.8f, .top_k = k_nucleus, .nucleus = 1});
  add(all_nan, {.uniform = 0.5, .temperature = 1.0f});
  add(all_nan, {.temperature = 1.0f, .top_k = k_small, .nucleus = 1});
  add(all_minus_inf, {.uniform = 0.5, .temperature = 1.0f});
  add(plus_inf, {.uniform = 0.5, .temperature = 1.0f});
  add(plus_inf, {.temperature = 1.0f, .top_k = k_nucleus, .nucleus = 1});
  int max_k = 0;
  int64_t n_candidates = 0;
  for (cuda::DeviceTokenDraw& d : draws) {
    d.candidates_at = int32_t(n_candidates);
    n_candidates += d.top_k;
    max_k = std::max(max_k, d.top_k);
  }
  std::vector<float> x;
  for (const std::vector<float>& row : rows) x.insert(x.end(), row.begin(), row.end());
  const DrawOutputs whole = run_draws(x, width, draws, max_k, n_candidates, false);
  const DrawOutputs split = run_draws(x, width, draws, max_k, n_candidates, true);
  EXPECT_EQ(whole.ids, split.ids);
  EXPECT_EQ(std::memcmp(whole.totals.data(), split.totals.data(), whole.totals.size() * sizeof(double)), 0);
  ASSERT_EQ(whole.candidates.size(), split.candidates.size());
  EXPECT_EQ(std::memcmp(whole.candidates.data(), split.candidates.data(),
                        whole.candidates.size() * sizeof(cuda::DeviceDrawCandidate)), 0);
  // And the one-block answers against the host's.
  for (size_t r = 0; r < draws.size(); ++r) {
    const cuda::DeviceTokenDraw& d = draws[r];
    const float* row = &x[r * size_t(width)];
    if (d.skip) {
      EXPECT_EQ(whole.ids[r], 0x5a5a5a5a) << "row " << r;
    } else if (d.top_k > 0 && !d.nucleus) {
      EXPECT_EQ(whole.ids[r], int32_t(argmax(row, width))) << "row " << r;
    } else if (!d.nucleus) {
      EXPECT_EQ(whole.ids[r], draw_token(row, width, {.temperature = d.temperature, .uniform = d.uniform})) << "row " << r;
    }
    if (d.top_k > 0) {
      std::vector<DrawCandidate> want;
      top_k_candidates(row, width, d.temperature, d.top_k, want);
      for (int j = 0; j < d.top_k; ++j) {
        const cuda::DeviceDrawCandidate got = whole.candidates[size_t(d.candidates_at + j)];
        EXPECT_EQ(got.id, want[size_t(j)].second) << "row " << r << ", candidate " << j;
      }
    }
  }
}

TEST(RowDrawKernelsCuda, RowsSpreadOverBlocksGiveTheOneBlockBytes) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  for (const int64_t width : {1, 13, 255, 256, 257, 2047, 2048, 2049, 6000, 129280}) {  // (V4's vocabulary: 64 blocks)
    expect_split_equals_whole(width, rng);
  }
}

}  // namespace
}  // namespace deepinfer::testing
