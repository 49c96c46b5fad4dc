// Packed KV formats (spec §4.4, §8.3): row sizes, and rows that went through the model's own QDQ (ops.h)
// pack and unpack to the very same floats, bit for bit, signed zeros, tiny and huge blocks included. A value
// the format cannot hold is refused, never rounded.
#include "model/kv_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "model/ops.h"

namespace deepinfer {
namespace {

TEST(KvFormat, RowSizesMatchTheSpec) {
  EXPECT_EQ(kv_row_format(KvRowKind::kV4Kv, 512, 64).row_bytes, 584);   // 448 e4m3 + 128 B rope + 7 e8m0 + pad
  EXPECT_EQ(kv_row_format(KvRowKind::kFp4Key, 128).row_bytes, 68);      // 64 B e2m1 + 4 e8m0
  EXPECT_EQ(kv_row_format(KvRowKind::kV41Kv, 512).row_bytes, 528);      // 512 e4m3 + 16 e8m0
  EXPECT_EQ(kv_row_format(KvRowKind::kV41Fp4, 512).row_bytes, 288);     // 256 B e2m1 + 32 e4m3
}

// Random bf16 rows whose blocks span tiny to huge magnitudes, with all-zero blocks and signed zeros.
std::vector<float> random_row(std::mt19937& rng, int64_t n, int64_t block) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> exponent(-40, 20), kind(0, 9);
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int k = kind(rng);
    const double scale = std::ldexp(1.0, exponent(rng));
    for (int64_t i = b0; i < std::min(n, b0 + block); ++i) {
      double v = normal(rng) * scale;
      if (k == 0) v = 0.0;                       // all-zero block
      if (k == 1 && i % 3 == 0) v = -0.0;        // signed zeros among values
      if (k == 2 && i % 5 == 0) v = 448.0 * 64;  // a large outlier
      row[size_t(i)] = round_bf16(v);
    }
  }
  return row;
}

struct RoundTripCase {
  const char* name;
  KvRowFormat format;
  std::function<void(float*)> qdq;  // the model's QDQ for this cache (in place on one row)
};

void expect_round_trips(const RoundTripCase& c, int n_rows) {
  std::mt19937 rng(42);
  std::vector<uint8_t> packed(static_cast<size_t>(c.format.row_bytes * n_rows));
  std::vector<float> expected(static_cast<size_t>(c.format.n_values * n_rows)), got(expected.size());
  for (int r = 0; r < n_rows; ++r) {
    std::vector<float> row = random_row(rng, c.format.n_values, c.format.block);
    c.qdq(row.data());
    std::copy(row.begin(), row.end(), expected.begin() + r * c.format.n_values);
    ASSERT_TRUE(pack_kv_row(c.format, row.data(), &packed[size_t(r * c.format.row_bytes)]))
        << c.name << " row " << r << ": a QDQ'd value has no exact code";
  }
  unpack_kv_rows(c.format, packed.data(), n_rows, got.data());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(float_to_bits(got[i]), float_to_bits(expected[i]))
        << c.name << " value " << i << ": got " << got[i] << ", stored " << expected[i];
  }
  std::vector<float> one(static_cast<size_t>(c.format.n_values));  // single-row unpack agrees
  unpack_kv_row(c.format, &packed[size_t(c.format.row_bytes)], one.data());
  EXPECT_TRUE(std::equal(one.begin(), one.end(), got.begin() + c.format.n_values,
                         [](float a, float b) { return float_to_bits(a) == float_to_bits(b); }));
}

TEST(KvFormat, V4RowsRoundTripExactly) {
  // Window and compressed rows: A12 / C6 QDQ8 on the 448 nope values (pow2 scale, block 64), rope in bf16.
  expect_round_trips({"v4 kv", kv_row_format(KvRowKind::kV4Kv, 512, 64), [](float* x) { qdq_fp8(x, 448, 64); }}, 3000);
  // Indexer keys: C6 QDQ4 (pow2 scale, block 32) after the Hadamard transform.
  expect_round_trips({"v4 key", kv_row_format(KvRowKind::kFp4Key, 128), [](float* x) { qdq_fp4(x, 128, 32); }}, 3000);
}

TEST(KvFormat, V41RowsRoundTripExactly) {
  expect_round_trips({"v41 window", kv_row_format(KvRowKind::kV41Kv, 512), [](float* x) { qdq_fp8_v41(x, 512, 32); }}, 3000);
  expect_round_trips({"v41 fp4 row", kv_row_format(KvRowKind::kV41Fp4, 512), [](float* x) { qdq_fp4_e4m3_scale(x, 512, 16); }}, 3000);
  expect_round_trips({"v41 key", kv_row_format(KvRowKind::kFp4Key, 128), [](float* x) { qdq_fp4_pow2_v41(x, 128, 32); }}, 3000);
}

TEST(KvFormat, E4m3ScaledFp4BlocksWithSubnormalScales) {
  // amax / 6 in the e4m3 subnormal range rounds the scale coarsely, so a block's largest code can be 4,
  // not 6: the scale must still be found exactly.
  const KvRowFormat f = kv_row_format(KvRowKind::kV41Fp4, 512);
  for (double amax = 6 * 0x1p-10; amax < 6 * 0x1p-5; amax *= 1.03) {
    std::vector<float> row(512);
    for (int i = 0; i < 512; ++i) row[size_t(i)] = round_bf16(amax * ((i % 16) - 7.5) / 7.5);
    qdq_fp4_e4m3_scale(row.data(), 512, 16);
    std::vector<uint8_t> packed(size_t(f.row_bytes));
    ASSERT_TRUE(pack_kv_row(f, row.data(), packed.data())) << "amax " << amax;
    std::vector<float> back(512);
    unpack_kv_row(f, packed.data(), back.data());
    for (int i = 0; i < 512; ++i) ASSERT_EQ(float_to_bits(back[size_t(i)]), float_to_bits(row[size_t(i)])) << "amax " << amax;
  }
}

TEST(KvFormat, RefusesValuesWithoutAnExactCode) {
  std::vector<uint8_t> out(600);
  std::vector<float> row(512, 1.0f);
  row[3] = 1.0625f;  // 1 + 2^-4: four mantissa bits, not e4m3 under any power-of-two scale shared with 1.0
  EXPECT_FALSE(pack_kv_row(kv_row_format(KvRowKind::kV41Kv, 512), row.data(), out.data()));
  row.assign(512, 1.0f);
  row[500] = 1.00390625f;  // a rope value that is not bf16
  EXPECT_FALSE(pack_kv_row(kv_row_format(KvRowKind::kV4Kv, 512, 64), row.data(), out.data()));
  row.assign(512, 1.0f);
  row[7] = 0.3f;  // not an e2m1 multiple of any e4m3 scale shared with 1.0
  EXPECT_FALSE(pack_kv_row(kv_row_format(KvRowKind::kV41Fp4, 512), row.data(), out.data()));
  row.assign(128, 6.0f);
  row[0] = NAN;
  EXPECT_FALSE(pack_kv_row(kv_row_format(KvRowKind::kFp4Key, 128), row.data(), out.data()));
}

}  // namespace
}  // namespace deepinfer
