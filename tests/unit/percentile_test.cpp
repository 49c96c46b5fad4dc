// percentile(): numpy's "linear" method (checked against numpy.percentile by hand on these samples).
#include "core/percentile.h"

#include <gtest/gtest.h>

#include <cmath>

namespace deepinfer {
namespace {

TEST(Percentile, InterpolatesBetweenClosestRanksLikeNumpy) {
  const std::vector<double> v = {15, 20, 35, 40, 50};  // unsorted input is fine too
  EXPECT_DOUBLE_EQ(percentile(v, 0), 15);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 50);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 35);
  EXPECT_DOUBLE_EQ(percentile(v, 40), 29);    // rank 1.6: 20 + 0.6 * 15
  EXPECT_DOUBLE_EQ(percentile(v, 90), 46);    // rank 3.6: 40 + 0.6 * 10
  EXPECT_DOUBLE_EQ(percentile({50, 15, 40, 20, 35}, 90), 46);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, 1e-12);
}

TEST(Percentile, SingleValueAndEmptySample) {
  EXPECT_DOUBLE_EQ(percentile({7}, 0), 7);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

}  // namespace
}  // namespace deepinfer
