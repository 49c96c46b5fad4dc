// place_experts_within (the CUDA backend's choice of which routed experts stay on the device) and the device
// bytes it counts per weight: the other weights first, then experts in order while they fit, a smaller expert
// after one that did not fit still placed; none placed when even the other weights do not fit.
#include "backend/expert_placement.h"

#include <gtest/gtest.h>

#include <vector>

namespace deepinfer {
namespace {

LinearWeight fp4(int64_t n_out, int64_t n_in) { return {.dtype = DType::kI8, .n_out = n_out, .n_in = n_in}; }

TEST(ExpertPlacement, DeviceBytesPadRowsAndCountScales) {
  EXPECT_EQ(device_weight_bytes(fp4(2048, 4096)), 2048 * 4096 / 2 + 2048 * 128);  // codes + one e8m0 per 32
  EXPECT_EQ(device_weight_bytes({.dtype = DType::kBF16, .n_out = 3, .n_in = 40}), 3 * 64 * 2);  // 40 -> 64 values
  // e4m3 [300, 200], 128-blocks: rows padded to 224 bytes, 3 x 2 scale bytes.
  const LinearWeight e4m3{.dtype = DType::kF8E4M3, .n_out = 300, .n_in = 200, .block = 128};
  EXPECT_EQ(device_weight_bytes(e4m3), 300 * 224 + 3 * 2);
  const DeviceWeightLayout l = device_weight_layout(e4m3);
  EXPECT_EQ(l.k_pad, 224);
  EXPECT_EQ(l.row_pitch, 224);
  EXPECT_EQ(l.scale_rows, 3);
  EXPECT_EQ(l.scale_pitch, 2);
}

TEST(ExpertPlacement, OtherWeightsFirstThenExpertsInOrderWhileTheyFit) {
  const LinearWeight big = fp4(64, 128), small = fp4(32, 128);
  const int64_t b = device_weight_bytes(big), s = device_weight_bytes(small);
  const std::vector<const LinearWeight*> experts = {&big, &big, &big, &small, &big};
  // Room for two big ones and a small one beside 1000 bytes of other weights.
  const ExpertPlacement p = place_experts_within(double(1000 + 2 * b + s), 1000, experts);
  EXPECT_TRUE(p.other_weights_fit);
  EXPECT_EQ(p.n_on_device, 3);
  EXPECT_EQ(p.on_host, (std::vector<const LinearWeight*>{experts[2], experts[4]}));

  const ExpertPlacement all = place_experts_within(1e12, 1000, experts);
  EXPECT_EQ(all.n_on_device, 5);
  EXPECT_TRUE(all.on_host.empty());

  const ExpertPlacement none = place_experts_within(999, 1000, experts);
  EXPECT_FALSE(none.other_weights_fit);
  EXPECT_EQ(none.n_on_device, 0);

  const ExpertPlacement only_other = place_experts_within(1000, 1000, experts);
  EXPECT_TRUE(only_other.other_weights_fit);
  EXPECT_EQ(only_other.on_host.size(), experts.size());
}

}  // namespace
}  // namespace deepinfer
