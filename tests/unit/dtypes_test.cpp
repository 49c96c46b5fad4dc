// Exhaustive tests of the storage codecs and round-once helpers in core/dtypes.h against tables and
// brute-force searches derived here, independently of the implementation (OCP e4m3fn, e2m1, e8m0, bf16).
#include "core/dtypes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "model/ops.h"

namespace deepinfer {
namespace {

uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A random double, log-uniform in magnitude over [2^lo_exp, 2^hi_exp), random sign, full 52-bit mantissa.
double random_double(uint64_t* s, int lo_exp, int hi_exp) {
  const uint64_t r = splitmix(s);
  const int e = lo_exp + int(r % uint64_t(hi_exp - lo_exp));
  const double mantissa = 1.0 + double(splitmix(s) >> 12) * 0x1p-52;
  const double v = std::ldexp(mantissa, e);
  return (r >> 63) ? -v : v;
}

bool same_bits(float a, float b) { return float_to_bits(a) == float_to_bits(b); }

// ---- independent tables ----

// OCP float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN, subnormals m/8 * 2^-6.
double e4m3_table_value(int code) {
  const int sign = code >> 7, e = (code >> 3) & 0xf, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}

// Nearest point of a sorted non-negative grid, ties to the point whose index is even (= even mantissa
// bit in these formats, since the index is the code). Values beyond the last point saturate.
double nearest_on_grid(const std::vector<double>& grid, double v) {
  const double a = std::fabs(v);
  size_t best = 0;
  for (size_t i = 1; i < grid.size(); ++i) {
    const double d_best = std::fabs(a - grid[best]), d = std::fabs(a - grid[i]);
    if (d < d_best || (d == d_best && i % 2 == 0 && best % 2 == 1)) best = i;
  }
  return std::copysign(grid[best], v);
}

std::vector<double> e4m3_grid() {  // codes 0..126, ascending
  std::vector<double> g;
  for (int c = 0; c < 0x7f; ++c) g.push_back(e4m3_table_value(c));
  return g;
}

const std::vector<double> kE2M1Grid = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// Nearest bf16 to a double by search over bf16 bit patterns (ties to even bits; overflow by IEEE rules:
// 2^128 acts as the next value above the largest finite bf16 and rounds to infinity).
float brute_bf16(double x) {
  if (std::isnan(x)) return NAN;
  const double a = std::fabs(x);
  auto value = [](uint32_t bits) { return bits >= 0x7f80 ? 0x1p128 : double(bf16_to_float(uint16_t(bits))); };
  uint32_t lo = 0, hi = 0x7f80;  // invariant: value(lo) <= a (or lo = 0), search the largest such lo
  if (a >= 0x1p128) return x > 0 ? INFINITY : -INFINITY;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (value(mid) <= a) lo = mid; else hi = mid;
  }
  const double d_lo = a - value(lo), d_hi = value(lo + 1) - a;  // exact (Sterbenz / same binade)
  uint32_t bits = lo;
  if (d_hi < d_lo || (d_hi == d_lo && (lo & 1))) bits = lo + 1;
  const float mag = bits >= 0x7f80 ? INFINITY : bf16_to_float(uint16_t(bits));
  return std::signbit(x) ? -mag : mag;
}

// ---- e4m3 ----

TEST(DTypesE4M3, AllCodesDecodeToOcpTable) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_table_value(c);
    const float got = e4m3_to_float(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_TRUE(same_bits(got, float(want))) << "code " << c << " got " << got << " want " << want;
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
}

TEST(DTypesE4M3, CodeOfEveryGridValueRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(e4m3_code(e4m3_to_float(uint8_t(c))), c) << "code " << c;
  }
  EXPECT_EQ(e4m3_code(1.01), 0x7f) << "off-grid values map to the NaN code";
}

TEST(DTypesE4M3, RoundMatchesBruteForceOnMidpointsAndNeighbours) {
  const std::vector<double> grid = e4m3_grid();
  std::vector<double> probes;
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const double mid = (grid[i] + grid[i + 1]) / 2;  // exact
    probes.insert(probes.end(), {grid[i], mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e9)});
  }
  probes.insert(probes.end(), {448.0, 464.0, std::nextafter(464.0, 0.0), 465.0, 480.0, 1e6, 0x1p-10,
                               0x1p-11, 1e-300, std::numeric_limits<double>::denorm_min()});
  for (double p : probes) {
    for (double v : {p, -p}) {
      const double want = nearest_on_grid(grid, v);
      const double got = e4m3_round(v);
      EXPECT_EQ(got, want) << "v = " << v;
      if (want != 0) {
        EXPECT_EQ(std::signbit(got), std::signbit(v)) << "v = " << v;
      }
    }
  }
}

TEST(DTypesE4M3, TiesGoToEvenMantissa) {
  EXPECT_EQ(e4m3_round(0x1p-10), 0.0);              // 0 | 2^-9
  EXPECT_EQ(e4m3_round(1.5 * 0x1p-9), 0x1p-8);      // code 1 | code 2
  EXPECT_EQ(e4m3_round(1.0625), 1.0);               // 1.0 | 1.125
  EXPECT_EQ(e4m3_round(1.1875), 1.25);              // 1.125 | 1.25
  EXPECT_EQ(e4m3_round(1.9375), 2.0);               // 1.875 | 2.0 (binade change)
  EXPECT_EQ(e4m3_round(464.0), 448.0);              // saturates
  EXPECT_EQ(e4m3_round(-1e9), -448.0);
  EXPECT_EQ(e4m3_round(1e300), 448.0);
}

TEST(DTypesE4M3, RoundMatchesBruteForceOnRandomValues) {
  const std::vector<double> grid = e4m3_grid();
  uint64_t s = 1;
  for (int i = 0; i < 200000; ++i) {
    const double v = random_double(&s, -14, 11);
    ASSERT_EQ(e4m3_round(v), nearest_on_grid(grid, v)) << "v = " << v;
  }
}

// The promise LinearParams::x_e4m3_block makes (what the activation QDQ leaves), as the reference backend checks it.
TEST(DTypesE4M3, QdqBlocksAreScaledE4m3AndOthersAreNot) {
  uint64_t s = 7;
  for (int trial = 0; trial < 200; ++trial) {
    const int lo = -30 + int(splitmix(&s) % 40);  // blocks of many magnitudes, some with values below e4m3's reach
    std::vector<float> x(256);
    for (float& v : x) v = float(random_double(&s, lo, lo + 12));
    if (trial % 7 == 0) x[5] = 0.0f;
    std::vector<float> q128 = x, q32 = x;
    qdq_fp8(q128.data(), 256, 128);
    qdq_fp8_v41(q32.data(), 256, 32);
    for (int b = 0; b < 2; ++b) ASSERT_TRUE(is_scaled_e4m3_block(&q128[size_t(b * 128)], 128)) << trial;
    for (int b = 0; b < 8; ++b) ASSERT_TRUE(is_scaled_e4m3_block(&q32[size_t(b * 32)], 32)) << trial;
    EXPECT_FALSE(is_scaled_e4m3_block(x.data(), 128)) << trial;  // 24-bit mantissas
    std::vector<float> nudged = q128;
    const size_t i = size_t(splitmix(&s) % 128);
    if (nudged[i] != 0.0f) {
      nudged[i] = std::nextafter(nudged[i], 2 * nudged[i]);
      EXPECT_FALSE(is_scaled_e4m3_block(nudged.data(), 128)) << trial;
    }
  }
  const std::vector<float> zeros(32, 0.0f);
  EXPECT_TRUE(is_scaled_e4m3_block(zeros.data(), 32));
  const float mixed[4] = {448.0f, 1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(is_scaled_e4m3_block(mixed, 3));
  EXPECT_FALSE(is_scaled_e4m3_block(mixed, 4));
  const float apart[2] = {448.0f, 0x1p-20f};  // 2^-20 is below e4m3's smallest subnormal (2^-9) at scale 1
  EXPECT_FALSE(is_scaled_e4m3_block(apart, 2));
}

// ---- e2m1 ----

TEST(DTypesE2M1, AllCodesDecode) {
  for (int c = 0; c < 16; ++c) {
    const double mag = kE2M1Grid[size_t(c & 7)];
    const float want = float((c & 8) ? -mag : mag);
    EXPECT_TRUE(same_bits(e2m1_to_float(uint8_t(c)), want)) << "code " << c;
    EXPECT_EQ(e2m1_to_float(uint8_t(c | 0xf0)), want) << "high nibble must be ignored";
    EXPECT_EQ(e2m1_code(want), c) << "code " << c;
  }
}

TEST(DTypesE2M1, SpecTieExamples) {  // spec §2.3
  const double ties[][2] = {{0.25, 0}, {0.75, 1}, {1.25, 1}, {1.75, 2}, {2.5, 2}, {3.5, 4}, {5, 4}};
  for (const auto& t : ties) {
    EXPECT_EQ(e2m1_round(t[0]), t[1]) << t[0];
    EXPECT_EQ(e2m1_round(-t[0]), -t[1]) << -t[0];
  }
  EXPECT_EQ(e2m1_round(6.5), 6.0);
  EXPECT_EQ(e2m1_round(7.0), 6.0);
  EXPECT_EQ(e2m1_round(1e30), 6.0);
  EXPECT_EQ(e2m1_round(-1e30), -6.0);
}

TEST(DTypesE2M1, RoundMatchesBruteForce) {
  std::vector<double> probes;
  for (size_t i = 0; i + 1 < kE2M1Grid.size(); ++i) {
    const double mid = (kE2M1Grid[i] + kE2M1Grid[i + 1]) / 2;
    probes.insert(probes.end(), {kE2M1Grid[i], mid, std::nextafter(mid, 0.0), std::nextafter(mid, 100.0)});
  }
  probes.insert(probes.end(), {6.0, 7.0, std::nextafter(7.0, 0.0), 8.0, 1e-300});
  uint64_t s = 2;
  for (int i = 0; i < 100000; ++i) probes.push_back(random_double(&s, -4, 4));
  for (double p : probes) {
    for (double v : {p, -p}) EXPECT_EQ(e2m1_round(v), nearest_on_grid(kE2M1Grid, v)) << "v = " << v;
  }
}

// ---- bf16 ----

TEST(DTypesBF16, BitsRoundTripForEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_bits(f), b);
  }
}

TEST(DTypesBF16, RoundMatchesBruteForceOnEveryMidpoint) {
  // Every pair of consecutive finite positive bf16 values, subnormals included, and the overflow edge.
  for (uint32_t lo = 0; lo < 0x7f80; ++lo) {
    const double a = bf16_to_float(uint16_t(lo));
    const double b = lo + 1 == 0x7f80 ? 0x1p128 : double(bf16_to_float(uint16_t(lo + 1)));
    const double mid = (a + b) / 2;  // exact in double
    for (double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, INFINITY), a}) {
      for (double x : {v, -v}) {
        const float got = round_bf16(x), want = brute_bf16(x);
        ASSERT_TRUE(same_bits(got, want)) << "x = " << x << " got " << got << " want " << want;
      }
    }
  }
}

TEST(DTypesBF16, RoundSpecialCases) {
  EXPECT_EQ(round_bf16(1.0 + 0x1p-8), 1.0f);                         // tie, even is 1.0
  EXPECT_EQ(round_bf16(1.0 + 3 * 0x1p-8), float(1.0 + 0x1p-6));      // tie, even is 1 + 2^-6
  EXPECT_EQ(round_bf16(0x1p-134), 0.0f);                             // half the smallest subnormal: tie to 0
  EXPECT_EQ(round_bf16(0x1.8p-134), 0x1p-133f);                      // above the tie
  EXPECT_EQ(round_bf16(3 * 0x1p-134), 0x1p-132f);                    // 1.5 quanta: tie to 2
  EXPECT_TRUE(std::signbit(round_bf16(-1e-300)));                    // underflow keeps the sign
  EXPECT_EQ(round_bf16(0x1.fep127), 0x1.fep127f);                    // largest finite bf16
  EXPECT_EQ(round_bf16(std::nextafter(0x1.ffp127, 0.0)), 0x1.fep127f);
  EXPECT_EQ(round_bf16(0x1.ffp127), INFINITY);                       // tie at the top overflows
  EXPECT_EQ(round_bf16(-1e300), -INFINITY);
  EXPECT_EQ(round_bf16(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
  // Rounding a double straight to bf16 differs from double -> float -> bf16 (double rounding).
  const double x = 1.0 + 0x1p-8 + 0x1p-40;                           // just above a bf16 tie
  EXPECT_EQ(round_bf16(x), float(1.0 + 0x1p-7));
  EXPECT_EQ(round_bf16_from_float(float(x)), 1.0f);
}

TEST(DTypesBF16, RoundMatchesBruteForceOnRandomDoubles) {
  uint64_t s = 3;
  for (int i = 0; i < 300000; ++i) {
    const int range = i % 3;
    const double x = range == 0 ? random_double(&s, -140, -120)      // bf16/float subnormals
                     : range == 1 ? random_double(&s, -30, 30)
                                  : random_double(&s, 120, 130);     // overflow edge
    ASSERT_TRUE(same_bits(round_bf16(x), brute_bf16(x))) << "x = " << x;
  }
}

TEST(DTypesBF16, FromFloatAgreesWithDoubleRounding) {
  auto check = [](uint32_t bits) {
    const float f = bits_to_float(bits);
    const float a = round_bf16_from_float(f), b = round_bf16(double(f));
    if (std::isnan(f)) return std::isnan(a) && std::isnan(b);
    return same_bits(a, b);
  };
  // Every high half with the low halves at and around the tie points (all exponents, subnormals, overflow).
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      ASSERT_TRUE(check((hi << 16) | low)) << std::hex << ((hi << 16) | low);
    }
  }
  uint64_t s = 4;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = uint32_t(splitmix(&s));
    ASSERT_TRUE(check(bits)) << std::hex << bits;
    const uint32_t subnormal = bits & 0x807fffffu;
    ASSERT_TRUE(check(subnormal)) << std::hex << subnormal;
  }
}

TEST(DTypesBF16, RoundF32IsIeeeConversion) {
  EXPECT_EQ(round_f32(1.0 + 0x1p-24), 1.0f);
  EXPECT_EQ(round_f32(1.0 + 0x1p-24 + 0x1p-50), std::nextafter(1.0f, 2.0f));
  EXPECT_EQ(round_f32(1e300), INFINITY);
}

// ---- e8m0 ----

TEST(DTypesE8M0, AllCodes) {
  for (int c = 0; c < 256; ++c) {
    const float got = e8m0_to_float(uint8_t(c));
    if (c == 0xff) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      EXPECT_EQ(double(got), std::ldexp(1.0, c - 127)) << "code " << c;
    }
  }
}

// ---- pow2_scale_at_least ----

double brute_pow2_scale(double a, double q_max) {
  for (int k = -200; k < 200; ++k) {
    if (std::ldexp(q_max, k) >= a) return std::ldexp(1.0, k);
  }
  return INFINITY;
}

TEST(DTypesPow2Scale, MatchesBruteForce) {
  std::vector<double> probes;
  for (int k = -130; k < 130; ++k) {
    for (double q : {448.0, 6.0}) {
      const double edge = std::ldexp(q, k);
      probes.insert(probes.end(), {edge, std::nextafter(edge, 0.0), std::nextafter(edge, INFINITY)});
    }
  }
  uint64_t s = 5;
  for (int i = 0; i < 30000; ++i) probes.push_back(std::fabs(random_double(&s, -120, 120)));
  for (double a : probes) {
    for (double q : {448.0, 6.0}) {
      const double got = pow2_scale_at_least(a, q);
      ASSERT_EQ(got, brute_pow2_scale(a, q)) << "a = " << a << " q = " << q;
    }
  }
  EXPECT_EQ(pow2_scale_at_least(448.0, 448.0), 1.0);
  EXPECT_EQ(pow2_scale_at_least(449.0, 448.0), 2.0);
  EXPECT_EQ(pow2_scale_at_least(6.0 * 0.5, 6.0), 0.5);
}

// ---- names and sizes ----

TEST(DTypesNames, RoundTripAndSizes) {
  const DType all[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kF64, DType::kF8E4M3, DType::kF8E8M0,
                       DType::kI8,   DType::kI16, DType::kI32, DType::kI64, DType::kU8,     DType::kBool};
  const int sizes[] = {2, 2, 4, 8, 1, 1, 1, 2, 4, 8, 1, 1};
  for (size_t i = 0; i < std::size(all); ++i) {
    DType parsed = DType::kBool;
    ASSERT_TRUE(dtype_from_name(dtype_name(all[i]), &parsed)) << dtype_name(all[i]);
    EXPECT_EQ(parsed, all[i]);
    EXPECT_EQ(dtype_size(all[i]), sizes[i]) << dtype_name(all[i]);
  }
  DType unused;
  EXPECT_FALSE(dtype_from_name("F8_E5M2", &unused));
  EXPECT_FALSE(dtype_from_name("bf16", &unused));
  EXPECT_FALSE(dtype_from_name("", &unused));
}

}  // namespace
}  // namespace deepinfer
