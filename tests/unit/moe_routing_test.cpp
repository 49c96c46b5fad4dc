// The score router's order (model/moe.h routes_before, route_token): the larger key first, ties to the lower expert,
// and a NaN key (a corrupt gate or bias) after every number, so that the order is total and a token's experts are
// distinct whatever its keys.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "model/moe.h"

namespace deepinfer {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(MoeRouting, OrderIsTotalWithNanKeysLast) {
  EXPECT_TRUE(routes_before(2.0, 5, 1.0, 0));
  EXPECT_TRUE(routes_before(1.0, 0, 1.0, 5));    // a tie: the lower expert
  EXPECT_FALSE(routes_before(1.0, 5, 1.0, 5));   // irreflexive
  EXPECT_TRUE(routes_before(-kInf, 9, kNan, 0));  // NaN after every number, -inf too
  EXPECT_FALSE(routes_before(kNan, 0, -kInf, 9));
  EXPECT_TRUE(routes_before(kNan, 1, kNan, 2));   // NaNs among themselves by expert
  EXPECT_FALSE(routes_before(kNan, 2, kNan, 1));
}

TEST(MoeRouting, NanKeysRouteLastAndExpertsStayDistinct) {
  const int64_t E = 8, K = 4;
  // Experts 1, 4 and 6 have NaN biases: the router takes the finite keys first, best first, then the NaN ones by index.
  const std::vector<float> g = {0.5f, 0.9f, 0.1f, 0.7f, 0.3f, 0.2f, 0.8f, 0.4f};
  std::vector<float> bias(E, 0.0f);
  for (int64_t e : {1, 4, 6}) bias[size_t(e)] = std::numeric_limits<float>::quiet_NaN();
  for (bool v41 : {false, true}) {
    std::vector<int64_t> chosen(K), order(E);
    std::vector<double> weight(K);
    route_token(g.data(), bias.data(), nullptr, E, K, v41, 1.0, chosen.data(), weight.data(), order.data());
    EXPECT_EQ(chosen, (std::vector<int64_t>{3, 0, 7, 5})) << (v41 ? "V4.1" : "V4");
    bias.assign(E, std::numeric_limits<float>::quiet_NaN());  // every key NaN: the first K experts
    route_token(g.data(), bias.data(), nullptr, E, K, v41, 1.0, chosen.data(), weight.data(), order.data());
    EXPECT_EQ(chosen, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(std::set<int64_t>(chosen.begin(), chosen.end()).size(), size_t(K));
    bias.assign(E, 0.0f);
    for (int64_t e : {1, 4, 6}) bias[size_t(e)] = std::numeric_limits<float>::quiet_NaN();
  }
}

}  // namespace
}  // namespace deepinfer
