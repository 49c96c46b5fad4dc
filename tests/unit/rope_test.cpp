// RopeTable::apply_heads (one set of angles for every head of a token) against apply() per head and against
// the contract written out here (angle, cosine and sine each rounded to f32, the rotation in double, one bf16
// rounding): bit for bit the same bf16 outputs, forward and inverse. An earlier apply_heads kept the cosines
// and sines as doubles and GCC dropped their f32 rounding: about 1 output in 800,000 then differed by one
// bf16 ulp, which the exact golden tests caught only through their logits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "model/ops.h"

namespace deepinfer {
namespace {

// The rotation of one head, computed as the reference does (independent of RopeTable's own code).
void rotate_reference(const RopeTable& table, float* x, int64_t pos, bool inverse) {
  for (size_t i = 0; i < table.freqs.size(); ++i) {
    const float angle = float(double(pos) * double(table.freqs[i]));
    const double c = float(std::cos(double(angle)));
    double s = float(std::sin(double(angle)));
    if (inverse) s = -s;
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = round_bf16(x0 * c - x1 * s);
    x[2 * i + 1] = round_bf16(x0 * s + x1 * c);
  }
}

TEST(Rope, ApplyHeadsEqualsApplyPerHead) {
  const RopeTable tables[] = {make_rope_table(64, 10000.0), make_yarn_rope_table(64, 10000.0, 16.0, 65536, 32.0, 1.0)};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  constexpr int64_t kHeads = 4, kStride = 512, kOffset = 448;
  int64_t n_compared = 0;
  for (const RopeTable& table : tables) {
    for (bool inverse : {false, true}) {
      for (int64_t pos = 0; pos < 3000; pos += 1 + pos / 100) {
        std::vector<float> per_head(size_t(kHeads * kStride));
        for (auto& v : per_head) v = normal(rng);
        std::vector<float> at_once = per_head, reference = per_head;
        for (int64_t h = 0; h < kHeads; ++h) table.apply(per_head.data() + h * kStride + kOffset, pos, inverse);
        table.apply_heads(at_once.data() + kOffset, kHeads, kStride, pos, inverse);
        for (int64_t h = 0; h < kHeads; ++h) rotate_reference(table, reference.data() + h * kStride + kOffset, pos, inverse);
        for (size_t i = 0; i < per_head.size(); ++i) {
          ASSERT_EQ(per_head[i], at_once[i]) << "pos " << pos << " element " << i << (inverse ? " inverse" : "");
          ASSERT_EQ(reference[i], at_once[i]) << "contract, pos " << pos << " element " << i << (inverse ? " inverse" : "");
        }
        n_compared += int64_t(per_head.size());
      }
    }
  }
  EXPECT_GT(n_compared, 1000000);
}

// apply_heads keeps the last position's cosines and sines per thread: a call for the same position with another
// table (V4's compressed layers use a YaRN table, the others a plain one) must not reuse them.
TEST(Rope, KeptAnglesFollowTheTable) {
  const RopeTable plain = make_rope_table(64, 10000.0);
  const RopeTable yarn = make_yarn_rope_table(64, 10000.0, 16.0, 65536, 32.0, 1.0);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  for (int64_t pos : {1, 777, 4095}) {
    for (const RopeTable* order : {&plain, &yarn, &plain}) {
      std::vector<float> x(64), reference;
      for (auto& v : x) v = normal(rng);
      reference = x;
      order->apply(x.data(), pos, false);
      rotate_reference(*order, reference.data(), pos, false);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(reference[i], x[i]) << "pos " << pos << " element " << i;
    }
  }
}

}  // namespace
}  // namespace deepinfer
