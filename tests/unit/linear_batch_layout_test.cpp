// LinearBatchLayout (the host side of the CUDA linears() batch): five ops, two of them reading the same x the
// same way (placed once), one reading it with another padding (placed again), a bias, an empty op. Staged
// inputs must hold each x row by row with zero padding and the bias; every place must be 256-byte aligned and
// no two may overlap; outputs written in place into the mirror must scatter to each op's strided output.
#include "backend/linear_batch_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace deepinfer {
namespace {

TEST(LinearBatchLayout, PlacesStagesAndScattersEveryOperand) {
  const int64_t T = 3, stride = 10;
  std::vector<float> x(size_t(T * stride)), x2(size_t(2 * 6)), bias(size_t(T * 4));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i + 1);
  for (size_t i = 0; i < x2.size(); ++i) x2[i] = -float(i + 1);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 100.0f + float(i);
  std::vector<float> out0(size_t(T * 8), -1), out1(size_t(T * 8), -1), out2(size_t(T * 4), -1), out3(size_t(2 * 5), -1);
  const LinearParams ps[] = {
      {.x = x.data(), .x_stride = stride, .n_tokens = T, .n_rows = 5, .out = out0.data(), .out_stride = 8},  // x, K 7
      {.x = x.data(), .x_stride = stride, .n_tokens = T, .n_rows = 6, .out = out1.data(), .out_stride = 8},  // the same x
      {.x = x.data(), .x_stride = stride, .n_tokens = T, .n_rows = 4, .epilogue = Epilogue::kF32AddBias, .bias = bias.data(),
       .out = out2.data(), .out_stride = 4},                                                                  // x, K 9: again
      {.x = x2.data(), .x_stride = 6, .n_tokens = 0, .n_rows = 3, .out = nullptr, .out_stride = 3},          // empty
      {.x = x2.data(), .x_stride = 6, .n_tokens = 2, .n_rows = 5, .out = out3.data(), .out_stride = 5},       // x2, K 6
  };
  const int64_t k[] = {7, 7, 9, 6, 6}, k_pad[] = {32, 32, 32, 32, 32};
  LinearBatchLayout layout;
  layout.plan(ps, k, k_pad);
  const auto& at = layout.places();
  ASSERT_EQ(at.size(), 5u);
  EXPECT_TRUE(at[0].upload_x);
  EXPECT_FALSE(at[1].upload_x) << "the same x read the same way is placed once";
  EXPECT_EQ(at[1].x, at[0].x);
  EXPECT_TRUE(at[2].upload_x) << "the same x read to another width is placed again";
  EXPECT_TRUE(at[3].empty);
  EXPECT_TRUE(at[4].upload_x);
  // Places: aligned, inputs before input_bytes, outputs after, none overlapping.
  struct Range {
    size_t begin, end;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < 5; ++i) {
    if (at[i].empty) continue;
    const LinearParams& p = ps[i];
    if (at[i].upload_x) ranges.push_back({at[i].x, at[i].x + size_t(p.n_tokens * at[i].k_pad) * 4});
    if (p.epilogue == Epilogue::kF32AddBias) ranges.push_back({at[i].bias, at[i].bias + size_t(p.n_tokens * p.n_rows) * 4});
    EXPECT_GE(at[i].out, layout.input_bytes());
    ranges.push_back({at[i].out, at[i].out + size_t(p.n_tokens * p.n_rows) * 4});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t r = 0; r < ranges.size(); ++r) {
    EXPECT_EQ(ranges[r].begin % 256, 0u);
    if (r + 1 < ranges.size()) {
      EXPECT_LE(ranges[r].end, ranges[r + 1].begin) << "places " << r << " and " << r + 1 << " overlap";
    }
    EXPECT_LE(ranges[r].end, layout.bytes());
  }

  std::vector<uint8_t> host(layout.bytes(), 0xAB);
  layout.stage_inputs(ps, host.data());
  auto staged = [&](size_t offset) { return reinterpret_cast<const float*>(host.data() + offset); };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < 32; ++c) {
      EXPECT_EQ(staged(at[0].x)[t * 32 + c], c < 7 ? x[size_t(t * stride + c)] : 0.0f) << "x row " << t << " column " << c;
      EXPECT_EQ(staged(at[2].x)[t * 32 + c], c < 9 ? x[size_t(t * stride + c)] : 0.0f);
    }
    for (int64_t n = 0; n < 4; ++n) EXPECT_EQ(staged(at[2].bias)[t * 4 + n], bias[size_t(t * 4 + n)]);
  }
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t c = 0; c < 32; ++c) EXPECT_EQ(staged(at[4].x)[t * 32 + c], c < 6 ? x2[size_t(t * 6 + c)] : 0.0f);
  }

  // The device's outputs, written into the mirror: op i's element (t, n) = 1000 i + 10 t + n.
  for (size_t i = 0; i < 5; ++i) {
    if (at[i].empty) continue;
    float* o = reinterpret_cast<float*>(host.data() + at[i].out);
    for (int64_t t = 0; t < ps[i].n_tokens; ++t) {
      for (int64_t n = 0; n < ps[i].n_rows; ++n) o[t * ps[i].n_rows + n] = float(1000 * i + 10 * t + n);
    }
  }
  layout.scatter_outputs(ps, host.data());
  const std::vector<float>* outs[] = {&out0, &out1, &out2, nullptr, &out3};
  for (size_t i = 0; i < 5; ++i) {
    if (!outs[i]) continue;
    for (int64_t t = 0; t < ps[i].n_tokens; ++t) {
      for (int64_t n = 0; n < ps[i].out_stride; ++n) {
        const float want = n < ps[i].n_rows ? float(1000 * i + 10 * t + n) : -1.0f;  // the stride's gap untouched
        EXPECT_EQ((*outs[i])[size_t(t * ps[i].out_stride + n)], want) << "op " << i << " token " << t << " column " << n;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
