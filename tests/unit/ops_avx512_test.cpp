// The AVX-512 per-token ops (ops_avx512.h) against the contract written out here with the scalar rounding
// functions: bit for bit the same outputs, on values drawn across every binade a float has, so that vectors
// mixing bf16-normal lanes with subnormal, overflowing, infinite and zero lanes (the lane-by-lane fallback)
// are common, and on plain normal activations (the fast path). Lengths that are not multiples of 8 cover
// the masked tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "model/ops.h"
#include "model/ops_avx512.h"

namespace deepinfer {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Floats of either sign whose exponents span the whole range (subnormals, zeros and infinities included)
// with probability `wild`, else normal(0, 1) activations; a tenth of those are exact ties of the bf16 or the
// e4m3 rounding (only the round-half-even rule decides them).
std::vector<float> draw(std::mt19937& rng, int64_t n, double wild) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-150, 130);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    if (u(rng) >= wild) {
      x = normal(rng);
      const double t = u(rng);
      if (t < 0.05) x = bits_to_float((bits(x) & ~0xFFFFu) | 0x8000u);           // halfway between two bf16
      else if (t < 0.1) x = bits_to_float((bits(x) & ~0xFFFFFu) | 0x80000u);   // halfway between two e4m3
      continue;
    }
    const double r = u(rng);
    x = r < 0.05 ? 0.0f : r < 0.08 ? INFINITY : float(std::ldexp(1.0 + u(rng), exponent(rng)));
    if (u(rng) < 0.5) x = -x;
  }
  return v;
}

class OpsAvx512 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512F/VL";
  }
};

TEST_F(OpsAvx512, HcExpandColumnsMatchesTheContract) {
  std::mt19937 rng(11);
  int64_t compared = 0;
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : {4096, 37}) {
      for (int rep = 0; rep < 20; ++rep) {
        const std::vector<float> h = draw(rng, 4 * n, wild), x = draw(rng, n, wild), coef = draw(rng, 20, wild / 3);
        HcCoefficients c{};
        for (int k = 0; k < 4; ++k) {  // every 4th call: h_out = x, so that x's ties reach the rounding
          c.post[k] = rep % 4 == 0 ? 1.0f : coef[size_t(k)];
          for (int j = 0; j < 4; ++j) c.comb[j][k] = rep % 4 == 0 ? 0.0f : coef[size_t(4 + 4 * j + k)];
        }
        const int64_t i0 = rep % 3, i1 = n - rep % 5;
        std::vector<float> got(size_t(4 * n), -7.0f), want(size_t(4 * n), -7.0f);
        hc_expand_columns_avx512(h.data(), x.data(), c, n, i0, i1, got.data());
        for (int k = 0; k < 4; ++k) {
          for (int64_t i = i0; i < i1; ++i) {
            double acc = double(c.post[k]) * x[size_t(i)];
            for (int j = 0; j < 4; ++j) acc += double(c.comb[j][k]) * h[size_t(j * n + i)];
            want[size_t(k * n + i)] = round_bf16(acc);
          }
        }
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << i;
          } else {
            ASSERT_EQ(bits(got[i]), bits(want[i])) << "wild " << wild << " n " << n << " element " << i;
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 600000);
}

TEST_F(OpsAvx512, HcCollapseMatchesTheContract) {
  std::mt19937 rng(15);
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : {4096, 29}) {
      for (int rep = 0; rep < 20; ++rep) {
        const std::vector<float> h = draw(rng, 4 * n, wild);
        std::vector<float> pre = draw(rng, 4, wild / 3);
        if (rep % 4 == 0) pre = {1.0f, 0.0f, 0.0f, 0.0f};  // u = h's first copy: its ties reach the rounding
        std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        hc_collapse_avx512(h.data(), pre.data(), n, got.data());
        for (int64_t i = 0; i < n; ++i) {
          double acc = 0;
          for (int k = 0; k < 4; ++k) acc += double(pre[size_t(k)]) * h[size_t(k * n + i)];
          want[size_t(i)] = round_bf16(acc);
        }
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(want[size_t(i)])) {
            ASSERT_TRUE(std::isnan(got[size_t(i)])) << i;
          } else {
            ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << "wild " << wild << " n " << n << " element " << i;
          }
        }
      }
    }
  }
}

TEST_F(OpsAvx512, SumSquaresTakesTheThirtyTwoLaneOrder) {
  // The order written out: lane l sums x[l]^2, x[l + 32]^2, ... in turn; then a warp's XOR butterfly.
  auto lane_order = [](const std::vector<float>& x) {
    double lanes[32] = {};
    for (size_t i = 0; i < x.size(); ++i) lanes[i % 32] += double(x[i]) * x[i];
    for (int half = 16; half > 0; half /= 2) {
      for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
    }
    return lanes[0];
  };
  std::mt19937 rng(23);
  int differs_from_in_order = 0;
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : {4096, 7168, 61, 32, 5}) {
      for (int rep = 0; rep < 10; ++rep) {
        const std::vector<float> x = draw(rng, n, wild);
        const double got = sum_squares_32_lanes_avx512(x.data(), n), want = lane_order(x);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got));
        } else {
          ASSERT_EQ(got, want) << "wild " << wild << " n " << n;
        }
        double in_order = 0;
        for (float v : x) in_order += double(v) * v;
        differs_from_in_order += got != in_order;
      }
    }
  }
  EXPECT_GT(differs_from_in_order, 0) << "no input tells the lane order from the plain one: the test shows nothing";
}

TEST_F(OpsAvx512, RmsnormScaleMatchesTheContract) {
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> bf16(0, 0xFFFF);
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : {4096, 61}) {
      for (int rep = 0; rep < 20; ++rep) {
        const std::vector<float> x = draw(rng, n, wild);
        std::vector<uint16_t> weight(static_cast<size_t>(n));
        for (auto& w : weight) w = uint16_t(bf16(rng));
        const double r = std::ldexp(1.0 + rep / 20.0, rep % 7 - 3);
        const uint16_t* wp = rep % 2 ? weight.data() : nullptr;
        std::vector<float> got(size_t(n), -7.0f);
        const int64_t done = rmsnorm_scale_avx512(x.data(), wp, n, r, got.data());
        ASSERT_EQ(done, n / 8 * 8);
        for (int64_t i = 0; i < done; ++i) {
          const double w = wp ? double(bf16_to_float(wp[i])) : 1.0;
          const float want = round_bf16(w * x[size_t(i)] / r);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got[size_t(i)])) << i;
          } else {
            ASSERT_EQ(bits(got[size_t(i)]), bits(want)) << "wild " << wild << " element " << i;
          }
        }
        if (n % 8) {
          EXPECT_EQ(got[size_t(n - 1)], -7.0f) << "the tail is the caller's";
        }
      }
    }
  }
}

TEST_F(OpsAvx512, HeadRmsNormalizeMatchesTheScalarContract) {
  std::mt19937 rng(12);
  for (double wild : {0.0, 0.2}) {
    for (int64_t head_dim : {512, 128, 61}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> q = draw(rng, 8 * head_dim, wild);
        if (wild > 0) {  // no infinities here: they make every output of the head NaN
          for (float& v : q) if (std::isinf(v)) v = 3.0f;
        }
        std::vector<float> want = q;
        for (int64_t hd = 0; hd < 8; ++hd) {
          float* x = want.data() + hd * head_dim;
          double sum = 0;
          for (int64_t i = 0; i < head_dim; ++i) sum += double(round_bf16(double(x[i]) * x[i]));
          const double ms = round_bf16(sum / double(head_dim));
          const double r = round_bf16(1.0 / std::sqrt(double(round_bf16(ms + 1e-6))));
          for (int64_t i = 0; i < head_dim; ++i) x[i] = round_bf16(double(x[i]) * r);
        }
        head_rms_normalize_avx512(q.data(), 8, head_dim, 1e-6);
        for (size_t i = 0; i < q.size(); ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(q[i])) << i;
          } else {
            ASSERT_EQ(bits(q[i]), bits(want[i])) << "wild " << wild << " head_dim " << head_dim << " element " << i;
          }
        }
      }
    }
  }
}

// The head norm sums its squares 8 lanes at a time only where that sum is exact. Here it is not: the squares
// 2^20 and 2^12 make a mean of 2056, a tie between the bf16 values 2048 and 2064, and the 510 squares of 2^-36 are
// each lost in the in-order sum (below half its last bit) but not in lanes of their own, whose total would tip
// the mean up to 2064. The contract's in-order sum rounds the tie to 2048.
TEST_F(OpsAvx512, HeadRmsNormalizeSumsInOrderWhereTheOrderMatters) {
  const int64_t head_dim = 512;
  std::vector<float> q(size_t(head_dim), 0x1p-18f);
  q[0] = 1024.0f;  // square 2^20
  q[1] = 64.0f;    // square 2^12
  std::vector<float> want = q;
  double sum = 0;
  for (float v : want) sum += double(round_bf16(double(v) * v));
  ASSERT_EQ(round_bf16(sum / double(head_dim)), 2048.0f);
  const double r = round_bf16(1.0 / std::sqrt(double(round_bf16(2048.0 + 1e-6))));
  for (float& v : want) v = round_bf16(double(v) * r);
  head_rms_normalize_avx512(q.data(), 1, head_dim, 1e-6);
  for (int64_t i = 0; i < head_dim; ++i) ASSERT_EQ(bits(q[size_t(i)]), bits(want[size_t(i)])) << "element " << i;
}

// A QDQ block op (x[i] = f32(round(x[i] / s) * s) in place) against that contract written with the scalar
// rounding function, for the given block lengths and power-of-two scales 2^-120 .. 2^119 (V4's; the ops multiply
// by 1 / s for them), and every third block an fp32 scale that is not a power of two (V4.1's FP8 rule).
template <class Round, class BlockOp>
void expect_qdq_block_matches(uint32_t seed, std::initializer_list<int64_t> lengths, int reps, Round round, BlockOp op) {
  std::mt19937 rng(seed);
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : lengths) {
      for (int rep = 0; rep < reps; ++rep) {
        std::vector<float> x = draw(rng, n, wild);
        const double s = rep % 3 == 2 ? double(float(std::ldexp(1.0 + 0.137 * (rep % 7 + 1), rep % 40 - 20)))
                                      : std::ldexp(1.0, rep % 240 - 120);
        std::vector<float> want = x;
        for (float& v : want) v = float(round(double(v) / s) * s);
        op(x.data(), n, s);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(bits(x[size_t(i)]), bits(want[size_t(i)])) << "wild " << wild << " s " << s << " element " << i;
        }
      }
    }
  }
}

TEST_F(OpsAvx512, QdqFp8BlockMatchesTheContract) {
  expect_qdq_block_matches(13, {128, 64, 45}, 200, [](double v) { return e4m3_round(v); }, qdq_fp8_block_avx512);
}

TEST_F(OpsAvx512, AbsMaxSkipsNaNsLikeTheScalarLoop) {
  std::mt19937 rng(14);
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : {128, 64, 45, 1, 0}) {
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<float> x = draw(rng, n, wild);
        if (n > 0 && rep % 3 == 0) x[size_t(rep) % size_t(n)] = NAN;
        double want = 0;  // the scalar loop of block_amax (ops.cpp) from a floor of 0
        for (float v : x) want = std::max(want, std::fabs(double(v)));
        ASSERT_EQ(double(abs_max_avx512(x.data(), n)), want) << "n " << n << " rep " << rep;
      }
    }
  }
}

TEST_F(OpsAvx512, QdqFp4BlockMatchesTheContract) {
  expect_qdq_block_matches(17, {32, 29}, 400, [](double v) { return e2m1_round(v); }, qdq_fp4_block_avx512);
}

// Every code (the NaN codes and subnormals included), at e8m0 / e4m3 scales from tiny to huge, for every
// length up to 40 (the tails) and offsets that leave the input unaligned.
TEST_F(OpsAvx512, UnpackE4m3AndE2m1MatchTheScalarDecode) {
  std::vector<uint8_t> codes(512);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 37 + i / 256);  // each code, in two orders
  std::vector<float> got(512), want(512);
  for (float s : {1.0f, 0x1p-127f, 0x1p-20f, 0.375f, 0x1p100f, 448.0f}) {
    for (int64_t offset : {0, 3}) {
      const int64_t n = int64_t(codes.size()) - offset;
      unpack_e4m3_avx512(codes.data() + offset, n, s, got.data());
      for (int64_t i = 0; i < n; ++i) want[size_t(i)] = e4m3_to_float(codes[size_t(offset + i)]) * s;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << "e4m3 s " << s << " i " << i;
      unpack_e2m1_avx512(codes.data() + offset, 2 * (n / 2), s, got.data());
      for (int64_t i = 0; i < 2 * (n / 2); ++i) {
        want[size_t(i)] = e2m1_to_float(uint8_t(codes[size_t(offset + i / 2)] >> (4 * (i & 1)))) * s;
        ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)])) << "e2m1 s " << s << " i " << i;
      }
    }
  }
  for (int64_t n = 0; n <= 40; ++n) {  // no value written past n
    std::vector<float> out(48, -7.0f);
    unpack_e4m3_avx512(codes.data() + 1, n, 2.0f, out.data());
    for (int64_t i = 0; i < 48; ++i) {
      const float expect = i < n ? e4m3_to_float(codes[size_t(1 + i)]) * 2.0f : -7.0f;
      ASSERT_EQ(bits(out[size_t(i)]), bits(expect)) << "e4m3 n " << n << " i " << i;
    }
    if (n % 2) continue;
    std::fill(out.begin(), out.end(), -7.0f);
    unpack_e2m1_avx512(codes.data() + 1, n, 2.0f, out.data());
    for (int64_t i = 0; i < 48; ++i) {
      const float expect = i < n ? e2m1_to_float(uint8_t(codes[size_t(1 + i / 2)] >> (4 * (i & 1)))) * 2.0f : -7.0f;
      ASSERT_EQ(bits(out[size_t(i)]), bits(expect)) << "e2m1 n " << n << " i " << i;
    }
  }
}

TEST_F(OpsAvx512, Hadamard128MatchesTheScalarButterflies) {
  std::mt19937 rng(18);
  for (double wild : {0.0, 0.02}) {
    for (int rep = 0; rep < 300; ++rep) {
      std::vector<float> x = draw(rng, 128, wild);
      for (float& v : x) v = round_bf16(double(v));  // the indexer's queries are bf16 values
      // The contract's natural-order butterflies in double, then bf16(v * f32(128^-0.5)).
      double v[128];
      for (int i = 0; i < 128; ++i) v[i] = x[size_t(i)];
      for (int half = 1; half < 128; half *= 2) {
        for (int i = 0; i < 128; i += 2 * half) {
          for (int j = i; j < i + half; ++j) {
            const double a = v[j], b = v[j + half];
            v[j] = a + b;
            v[j + half] = a - b;
          }
        }
      }
      hadamard_128_avx512(x.data());
      for (int i = 0; i < 128; ++i) {
        const float want = round_bf16(v[i] * double(float(1.0 / std::sqrt(128.0))));
        if (std::isnan(want)) continue;
        ASSERT_EQ(bits(x[size_t(i)]), bits(want)) << "wild " << wild << " rep " << rep << " element " << i;
      }
    }
  }
}

// exp_fixed against the long double expl, on every machine: within 2 ulp of the double result across its
// whole polynomial range, and std::exp itself beyond it.
TEST(ExpFixed, WithinTwoUlpOfTheTrueValue) {
  std::mt19937 rng(16);
  std::uniform_real_distribution<double> wide(-700.0, 700.0), narrow(-1.0, 1.0);
  std::vector<double> xs = {0.0, -0.0, 1e-300, -1e-300, 0.5, -0.5, 1.0, 700.0, -700.0, 0x1.62e42fefa39efp-2};
  for (int i = 0; i < 100000; ++i) xs.push_back(i % 2 ? wide(rng) : narrow(rng));
  double worst = 0;
  for (double x : xs) {
    const double got = exp_fixed(x);
    const long double want = expl((long double)x);
    const double ulp = std::nextafter(got, INFINITY) - got;
    const double err = double(std::fabs((long double)got - want) / (long double)ulp);
    worst = std::max(worst, err);
    ASSERT_LE(err, 2.0) << "x " << x;
  }
  EXPECT_GT(worst, 0.0);  // the comparison saw rounding at all
  for (double x : {700.5, -745.0, 710.0, double(INFINITY), double(-INFINITY)}) {
    EXPECT_EQ(exp_fixed(x), std::exp(x)) << "x " << x;
  }
  EXPECT_TRUE(std::isnan(exp_fixed(NAN)));
}

// The SwiGLU written out with exp_fixed, element by element (ops.cpp's scalar loop).
float swiglu_contract(float a, float b, double limit, double weight) {
  const double av = std::min(double(a), limit);
  const double bv = std::clamp(double(b), -limit, limit);
  return round_bf16(av / (1.0 + exp_fixed(-av)) * bv * weight);
}

// The rotation of RopeTable::apply_heads, given the f32 cosines and sines: pairs rotated in double, one bf16
// rounding each (the contract of tests/unit/rope_test.cpp), on wild values; rope dims up to 64 (four pairs per
// vector; the caller rotates the rest).
TEST_F(OpsAvx512, RopeRotateMatchesTheContract) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> angle(-1000.0, 1000.0);
  for (double wild : {0.0, 0.3}) {
    for (int64_t n_pairs : {32, 11, 3}) {
      for (bool inverse : {false, true}) {
        for (int rep = 0; rep < 40; ++rep) {
          constexpr int64_t kHeads = 3, kStride = 80;
          std::vector<float> cos_sin(size_t(2 * n_pairs));
          for (int64_t i = 0; i < n_pairs; ++i) {
            const double a = angle(rng);
            cos_sin[size_t(2 * i)] = float(std::cos(a));
            cos_sin[size_t(2 * i + 1)] = float(std::sin(a));
          }
          std::vector<float> x = draw(rng, kHeads * kStride, wild), want = x;
          const int64_t done = rope_rotate_avx512(x.data(), kHeads, kStride, cos_sin.data(), n_pairs, inverse);
          ASSERT_EQ(done, n_pairs / 4 * 4);
          for (int64_t h = 0; h < kHeads; ++h) {
            float* w = want.data() + h * kStride;
            for (int64_t i = 0; i < done; ++i) {
              const double c = cos_sin[size_t(2 * i)];
              const double s = inverse ? -double(cos_sin[size_t(2 * i + 1)]) : double(cos_sin[size_t(2 * i + 1)]);
              const double x0 = w[2 * i], x1 = w[2 * i + 1];
              w[2 * i] = round_bf16(x0 * c - x1 * s);
              w[2 * i + 1] = round_bf16(x0 * s + x1 * c);
            }
          }
          for (size_t i = 0; i < x.size(); ++i) {
            if (std::isnan(want[i])) {
              ASSERT_TRUE(std::isnan(x[i])) << i;
            } else {
              ASSERT_EQ(bits(x[i]), bits(want[i])) << "pairs " << n_pairs << " element " << i << (inverse ? " inverse" : "");
            }
          }
        }
      }
    }
  }
}

TEST_F(OpsAvx512, SwigluMatchesTheContract) {
  std::mt19937 rng(15);
  int64_t compared = 0;
  for (double wild : {0.0, 0.3}) {
    for (int64_t n : {2048, 45}) {
      for (double limit : {10.0, double(INFINITY)}) {
        for (int rep = 0; rep < 20; ++rep) {
          const std::vector<float> a = draw(rng, n, wild), b = draw(rng, n, wild);
          const double weight = rep % 2 ? 1.0 : 0.3125 + rep / 64.0;
          std::vector<float> out(size_t(n), -1.0f);
          const int64_t done = swiglu_avx512(a.data(), b.data(), n, limit, weight, out.data());
          ASSERT_EQ(done, n / 8 * 8);
          for (int64_t i = 0; i < done; ++i) {
            const float want = swiglu_contract(a[size_t(i)], b[size_t(i)], limit, weight);
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(out[size_t(i)])) << "element " << i;
            } else {
              ASSERT_EQ(bits(out[size_t(i)]), bits(want)) << "a " << a[size_t(i)] << " b " << b[size_t(i)] << " limit " << limit;
            }
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 100000);
}

// The sampler's softmax: exp_fixed of each logit less the shift, element i into the i % 8-th running sum. Logits drawn
// as a model's (a spread of tens), with the wild values (infinities, zeros, huge magnitudes) that take the lane-by-lane
// fallback, a NaN, -inf in a third of the lanes (masked logits: the fast path's zeros), and odd lengths for the scalar
// tail (many short ones: a tail summed into the wrong lanes shows in the total's last bits).
TEST_F(OpsAvx512, ExpFixedSumMatchesTheContract) {
  std::mt19937 rng(17);
  for (double wild : {0.0, 0.2}) {
    for (int64_t n : {1000, 1003, 5, 15, 1001}) {
      for (int rep = 0; rep < (n == 15 ? 300 : 1); ++rep) {
        std::vector<float> x = draw(rng, n, wild);
        for (float& v : x) v *= 8.0f;
        for (int64_t i = 0; n == 1001 && i < n; i += 3) x[size_t(i)] = -INFINITY;  // masked logits among the others
        if (wild > 0 && n > 20) x[11] = NAN;
        const double shift = 17.5;
        std::vector<double> e(static_cast<size_t>(n), -1.0), want(static_cast<size_t>(n));
        double sums[8] = {}, want_sums[8] = {};
        const int64_t done = exp_fixed_sum_avx512(x.data(), n, shift, e.data(), sums);
        ASSERT_EQ(done, n / 8 * 8);
        for (int64_t i = 0; i < done; ++i) {
          want[size_t(i)] = exp_fixed(double(x[size_t(i)]) - shift);
          want_sums[i % 8] += want[size_t(i)];
          if (std::isnan(want[size_t(i)])) {
            ASSERT_TRUE(std::isnan(e[size_t(i)])) << "element " << i;
          } else {
            ASSERT_EQ(e[size_t(i)], want[size_t(i)]) << "x " << x[size_t(i)];
          }
        }
        for (int lane = 0; lane < 8; ++lane) {
          if (std::isnan(want_sums[lane])) {
            EXPECT_TRUE(std::isnan(sums[lane])) << "lane " << lane;
          } else {
            EXPECT_EQ(sums[lane], want_sums[lane]) << "lane " << lane;
          }
        }
        // The public function, no values written: the lanes' sums added in order, the tail included.
        double total = 0;
        for (int64_t i = done; i < n; ++i) want_sums[i % 8] += exp_fixed(double(x[size_t(i)]) - shift);
        for (double s : want_sums) total += s;
        const double got = exp_fixed_sum(x.data(), n, shift, nullptr);
        if (std::isnan(total)) {
          EXPECT_TRUE(std::isnan(got));
        } else {
          EXPECT_EQ(got, total) << "n " << n;
          EXPECT_GT(total, 0.0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer
