// IndexKeyArrays (the host side of the CUDA index scores): tokens that read float and packed key arrays, some
// sharing one, in an order that interleaves them. Each distinct array must be planned once with the most keys
// any of its tokens reads, every token must lead back to its own array, and the rows must be numbered float
// arrays first (first-use order), then packed ones with consecutive bytes.
#include "backend/index_key_arrays.h"

#include <gtest/gtest.h>

#include <vector>

#include "model/kv_format.h"

namespace deepinfer {
namespace {

IndexScoreParams op(const float* keys, int64_t n_keys) {
  IndexScoreParams p;
  p.dim = 64;
  p.keys = keys;
  p.n_keys = n_keys;
  return p;
}

IndexScoreParams packed_op(const KvRowFormat& format, std::span<const PackedRowRun> runs, int64_t n_keys) {
  IndexScoreParams p;
  p.dim = 64;
  p.key_format = &format;
  p.key_runs = runs;
  p.n_keys = n_keys;
  return p;
}

TEST(IndexKeyArrays, EachArrayOnceWithItsTokensLargestCount) {
  const KvRowFormat keys_format = kv_row_format(KvRowKind::kFp4Key, 64);
  std::vector<float> a(40 * 64), b(40 * 64);
  std::vector<uint8_t> bytes(size_t(100 * keys_format.row_bytes));
  const std::vector<PackedRowRun> runs_p = {{bytes.data(), 50, nullptr}};
  const std::vector<PackedRowRun> runs_q = {{bytes.data() + 50 * keys_format.row_bytes, 50, nullptr}};
  const std::vector<IndexScoreParams> batch = {
      packed_op(keys_format, runs_p, 12), op(a.data(), 10), op(a.data(), 30), op(b.data(), 5),
      packed_op(keys_format, runs_q, 7),  op(a.data(), 20), packed_op(keys_format, runs_p, 20), op(b.data(), 0),
  };
  IndexKeyArrays plan;
  plan.plan(batch);
  ASSERT_EQ(plan.arrays().size(), 4u);
  const std::vector<int64_t> expect_array = {0, 1, 1, 2, 3, 1, 0, 2};
  for (size_t t = 0; t < batch.size(); ++t) EXPECT_EQ(plan.array_of(int64_t(t)), expect_array[t]) << "token " << t;
  const auto& arrays = plan.arrays();
  EXPECT_EQ(arrays[0].format, &keys_format);
  EXPECT_EQ(arrays[0].runs.data(), runs_p.data());
  EXPECT_EQ(arrays[1].keys, a.data());
  EXPECT_EQ(arrays[2].keys, b.data());
  EXPECT_EQ(arrays[3].runs.data(), runs_q.data());
  EXPECT_EQ(arrays[0].n_keys, 20);
  EXPECT_EQ(arrays[1].n_keys, 30);
  EXPECT_EQ(arrays[2].n_keys, 5);
  EXPECT_EQ(arrays[3].n_keys, 7);
  // Float arrays' rows first, in first-use order, then the packed arrays' rows and bytes.
  EXPECT_EQ(arrays[1].first_row, 0);
  EXPECT_EQ(arrays[2].first_row, 30);
  EXPECT_EQ(plan.n_float_rows(), 35);
  EXPECT_EQ(arrays[0].first_row, 35);
  EXPECT_EQ(arrays[3].first_row, 55);
  EXPECT_EQ(plan.n_rows(), 62);
  EXPECT_EQ(arrays[0].first_byte, 0);
  EXPECT_EQ(arrays[3].first_byte, 20 * keys_format.row_bytes);
  EXPECT_EQ(plan.packed_bytes(), 27 * keys_format.row_bytes);
  EXPECT_EQ(plan.max_keys(), 30);
  EXPECT_EQ(plan.total_keys(), 12 + 10 + 30 + 5 + 7 + 20 + 20 + 0);
}

TEST(IndexKeyArrays, ADecodeStepOfManySequencesAndAFreshPlan) {
  std::vector<std::vector<float>> keys(300, std::vector<float>(64));
  std::vector<IndexScoreParams> batch;
  for (int s = 0; s < 300; ++s) batch.push_back(op(keys[size_t(s)].data(), 1));
  IndexKeyArrays plan;
  plan.plan(batch);
  ASSERT_EQ(plan.arrays().size(), 300u);
  for (int s = 0; s < 300; ++s) {
    EXPECT_EQ(plan.array_of(s), s);
    EXPECT_EQ(plan.arrays()[size_t(s)].keys, keys[size_t(s)].data());
    EXPECT_EQ(plan.arrays()[size_t(s)].first_row, s);
  }
  // A second plan starts from nothing.
  plan.plan(std::span(batch).subspan(299, 1));
  ASSERT_EQ(plan.arrays().size(), 1u);
  EXPECT_EQ(plan.arrays()[0].keys, keys[299].data());
  EXPECT_EQ(plan.arrays()[0].first_row, 0);
  EXPECT_EQ(plan.n_rows(), 1);
  EXPECT_EQ(plan.total_keys(), 1);
}

}  // namespace
}  // namespace deepinfer
