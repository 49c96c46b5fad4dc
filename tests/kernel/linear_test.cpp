// The fast linear op (every SIMD level this CPU has) against the exact reference backend on fresh random
// weights of real V4 / V4.1 shapes: bf16, e4m3 with 128- and 32-blocks, packed e2m1; odd K (partial chunks
// and blocks), row_begin offsets that straddle scale blocks, 1..130 tokens (register kernels, e4m3 ones
// with x scaled per row block where that is exact, and tile kernels),
// strided inputs and outputs, every epilogue, non-bf16 activations (fp32 fallback, also for some tokens of a call
// alone) and large scale bytes.
// Bound per output: |fast - ref| <= 2 bf16 ulps of ref (bf16 outputs) + 2^-16 * sum_k |x_k w_k| (fp32
// accumulation); the figures printed are calc_diff, max abs / rel error and the ulp histogram. Also: a
// token's outputs are bit-identical whatever the number of tokens in the call (register and tile kernels
// sum in the same order), which chunked prefill and batched decode rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

struct LinearCase {
  std::string name;
  DType dtype;
  int block;  // e4m3 scale block
  int64_t n_out, k;
  int64_t row_begin, n_rows;
  Epilogue epilogue = Epilogue::kBf16;
  int scale_lo = 0, scale_hi = 0;  // e4m3/e2m1 scale byte range (0: the generator's default)
  bool fp32_x = false;             // activations that are not bf16 values
  bool mixed_x = false;            // with fp32_x: only tokens 8-15, 32-39, ... (8 t / 8 % 3 == 1) not bf16 values
};

// Up to 130: tile mode's token panels (96 tokens for 6-token blocks, kPanelBlocks) with a partial second
// panel; 5 to 24: the fused tile mode's one or two pairs of 6-token blocks (linear_family.h, fused_panels), full
// and partial.
const std::vector<int64_t> kTokenCounts = {1, 2, 3, 4, 5, 7, 12, 16, 24, 33, 64, 70, 130};

class LinearKernel : public ::testing::TestWithParam<SimdLevel> {};

void run_case(SimdLevel level, const LinearCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  OwnedWeight ow = random_linear_weight(rng, c.dtype, c.n_out, c.k, c.block, c.scale_lo, c.scale_hi);
  auto reference = make_reference_backend();
  auto fast = make_fast_backend_with_level(2, level);
  const int64_t max_t = kTokenCounts.back(), x_stride = c.k + 3, out_stride = c.n_rows + 5;
  std::vector<float> x = random_bf16_values(rng, max_t * x_stride, 1.0f);
  if (c.fp32_x) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t t = 0; t < max_t; ++t) {
      if (c.mixed_x && (t / 8) % 3 != 1) continue;
      for (int64_t k = 0; k < x_stride; ++k) x[size_t(t * x_stride + k)] = u(rng);
    }
  }
  std::vector<float> bias(size_t(max_t * c.n_rows));
  for (auto& b : bias) b = std::normal_distribution<float>(0.0f, 0.5f)(rng);
  const bool bf16_out = c.epilogue == Epilogue::kBf16;

  // The reference of T tokens is the first T rows of the reference of max_t tokens (rows are independent).
  std::vector<float> ref(size_t(max_t * out_stride), -7.0f);
  LinearParams pr{x.data(), x_stride, max_t, &ow.w, c.row_begin, c.n_rows, c.epilogue, bias.data(), ref.data(), out_stride};
  reference->linear(pr);
  const std::vector<double> mass = linear_l1_mass(pr);

  Diff worst;
  std::vector<float> previous;  // the previous (smaller) call's outputs
  int64_t previous_t = 0;
  for (int64_t T : kTokenCounts) {
    std::vector<float> got(size_t(T * out_stride), -7.0f);
    // The bias of kF32AddBias is [n_tokens, n_rows]: the first T rows of the same buffer.
    LinearParams p{x.data(), x_stride, T, &ow.w, c.row_begin, c.n_rows, c.epilogue, bias.data(), got.data(), out_stride};
    fast->linear(p);
    const Diff d = expect_linear_within_bounds(ref, got, mass, T, c.n_rows, out_stride, bf16_out,
                                               c.name + " T=" + std::to_string(T), "fast");
    for (int64_t t = 0; t < previous_t; ++t) {
      EXPECT_TRUE(std::equal(previous.begin() + t * out_stride, previous.begin() + t * out_stride + c.n_rows,
                             got.begin() + t * out_stride))
          << c.name << ": token " << t << " differs between a " << previous_t << "-token call and a " << T << "-token call";
    }
    previous = got;
    previous_t = T;
    if (d.calc_diff >= worst.calc_diff) worst = d;
  }
  print_diff(std::string(simd_level_name(level)) + " " + c.name + " (worst of T=1..130)", worst);
}

TEST_P(LinearKernel, Bf16WeightsAllEpilogues) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), {"bf16 head-like [300x4096] kBf16", DType::kBF16, 0, 300, 4096, 0, 300}, 11);
  run_case(GetParam(), {"bf16 compressor [200x4096] kF32", DType::kBF16, 0, 200, 4096, 0, 200, Epilogue::kF32}, 12);
  run_case(GetParam(), {"bf16 wgate [96x1000]+7 kF32AddBias", DType::kBF16, 0, 120, 1000, 7, 96, Epilogue::kF32AddBias}, 13);
  run_case(GetParam(), {"bf16 gate [256x4096] kSqrtSoftplus", DType::kBF16, 0, 256, 4096, 0, 256, Epilogue::kSqrtSoftplus}, 14);
  run_case(GetParam(), {"bf16 odd [37x77]", DType::kBF16, 0, 37, 77, 0, 37}, 15);
}

TEST_P(LinearKernel, Fp8Block128) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), {"e4m3/128 wq_a-like [1024x4096] rows 37..337", DType::kF8E4M3, 128, 1024, 4096, 37, 300}, 21);
  run_case(GetParam(), {"e4m3/128 wo_a-like [2048x1024] rows 1024..1280", DType::kF8E4M3, 128, 2048, 1024, 1024, 256}, 22);
  run_case(GetParam(), {"e4m3/128 odd K [200x1000]", DType::kF8E4M3, 128, 200, 1000, 0, 200}, 23);
  run_case(GetParam(), {"e4m3/128 wide scale bytes [64x512]", DType::kF8E4M3, 128, 64, 512, 0, 64, Epilogue::kF32, 128, 140}, 24);
  // Scale bytes near zero: decoded weights below 2^-126 (rounded), where the register kernels scale the weights
  // as the tile kernels do instead of scaling x. (The wide case above covers the other fallback: there x times
  // 2^(s - 7) would overflow.)
  run_case(GetParam(), {"e4m3/128 tiny scale bytes [64x512]", DType::kF8E4M3, 128, 64, 512, 0, 64, Epilogue::kF32, 1, 12}, 25);
}

TEST_P(LinearKernel, Fp8Block32) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), {"e4m3/32 V4.1-like [320x5120] rows 5..293", DType::kF8E4M3, 32, 320, 5120, 5, 288}, 31);
  run_case(GetParam(), {"e4m3/32 odd K [100x1000]", DType::kF8E4M3, 32, 100, 1000, 0, 100}, 32);
}

TEST_P(LinearKernel, Fp4Experts) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  run_case(GetParam(), {"e2m1 w1-like [256x4096] rows 3..253", DType::kI8, 0, 256, 4096, 3, 250}, 41);
  run_case(GetParam(), {"e2m1 w2-like [300x2048]", DType::kI8, 0, 300, 2048, 0, 300}, 42);
  run_case(GetParam(), {"e2m1 extreme scale bytes [40x256]", DType::kI8, 0, 40, 256, 0, 40, Epilogue::kF32, 1, 200}, 43);
  // Seven 32-element chunks: a count that leaves every mode's chains uneven (2 or 4 chains: 4 + 3, 2, 2, 2, 1),
  // which all must end the same way. fp32 outputs, so that a one-bit change of order shows (bf16 rounding
  // hides most).
  run_case(GetParam(), {"e2m1 seven chunks [50x224] kF32", DType::kI8, 0, 50, 224, 0, 50, Epilogue::kF32}, 44);
  // Several tile-mode K blocks (128 chunks each with four chains), the last of 39 chunks (chains of 10, 10, 10
  // and 9) or of 2 (two chains without a chunk in it).
  run_case(GetParam(), {"e2m1 three K blocks, the last uneven [24x9440] kF32", DType::kI8, 0, 24, 9440, 0, 24,
                        Epilogue::kF32}, 45);
  run_case(GetParam(), {"e2m1 three K blocks, the last of two chunks [24x8256] kF32", DType::kI8, 0, 24, 8256, 0, 24,
                        Epilogue::kF32}, 46);
}

TEST_P(LinearKernel, NonBf16ActivationsFallBack) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  LinearCase c{"fp32 x, e4m3/128 [130x768] kF32", DType::kF8E4M3, 128, 130, 768, 0, 130, Epilogue::kF32};
  c.fp32_x = true;
  run_case(GetParam(), c, 51);
  LinearCase d{"fp32 x, e2m1 [64x512] kF32", DType::kI8, 0, 64, 512, 0, 64, Epilogue::kF32};
  d.fp32_x = true;
  run_case(GetParam(), d, 52);
  // Calls mixing bf16 and other activations: a bf16 level's family takes the bf16 tokens whatever shares their
  // call (run_case's check that a token's outputs do not depend on the call's token count; one op falling back
  // whole for a single fp32 token broke it on avx512bf16quant).
  for (LinearCase m : {c, d, LinearCase{"fp32 x, bf16 [96x1000]", DType::kBF16, 0, 96, 1000, 0, 96, Epilogue::kF32},
                       LinearCase{"fp32 x, bf16 wgate [96x1000]+7 kF32AddBias", DType::kBF16, 0, 120, 1000, 7, 96,
                                  Epilogue::kF32AddBias}}) {
    m.name = "mixed " + m.name;
    m.fp32_x = m.mixed_x = true;
    run_case(GetParam(), m, 53);
  }
}

// Backend::linears (several ops as one parallel region, as the MoE runs its experts) gives every op exactly
// what linear() gives it alone: FP4 and FP8 weights, register and tile modes, ops of different sizes, and ops
// that take the previous op's x (an expert's w1 and w3), whose packed x the backend shares between them (the FP8
// pair checks that per-call caches, like the scaled x of the register mode, stay per op: their scales differ), and
// an op whose tokens' x are bf16 values for some and not for others.
TEST_P(LinearKernel, LinearsEqualLinearOneByOne) {
  DI_SKIP_UNLESS_SUPPORTED(GetParam());
  std::mt19937 rng(61);
  struct Op {
    OwnedWeight weight;
    bool x_of_previous;  // takes the previous op's x
    bool mixed_x = false;  // every second token's x not bf16 values (run as its token runs on a bf16 level)
  };
  std::vector<Op> ops;
  ops.push_back({random_fp4_weight(rng, 300, 512), false});
  ops.push_back({random_fp4_weight(rng, 130, 512), true});
  ops.push_back({random_fp8_weight(rng, 128, 768, 128), false});  // one row block each: a stale cache would hit
  ops.push_back({random_fp8_weight(rng, 96, 768, 128), true});
  ops.push_back({random_fp4_weight(rng, 70, 256), false});
  ops.push_back({random_fp8_weight(rng, 64, 512, 128), false, true});
  ops.push_back({random_linear_weight(rng, DType::kBF16, 80, 512, 0), false, true});  // split on every bf16 level
  ops.push_back({random_linear_weight(rng, DType::kBF16, 48, 512, 0), true});  // the split op's x
  auto fast = make_fast_backend_with_level(2, GetParam());
  for (int64_t T : {1, 3, 12, 100}) {
    std::vector<std::vector<float>> xs, alone, together;
    std::vector<LinearParams> ps;
    for (const Op& op : ops) {
      xs.push_back(op.x_of_previous ? xs.back() : random_bf16_values(rng, T * op.weight.w.n_in));
      for (int64_t t = 1; op.mixed_x && t < T; t += 2) {
        for (int64_t k = 0; k < op.weight.w.n_in; ++k) xs.back()[size_t(t * op.weight.w.n_in + k)] += 0x1p-12f;
      }
      alone.emplace_back(size_t(T * op.weight.w.n_out), 0.0f);
      together.emplace_back(size_t(T * op.weight.w.n_out), 1.0f);
    }
    for (size_t j = 0; j < ops.size(); ++j) {
      const LinearWeight& w = ops[j].weight.w;
      const float* x = ops[j].x_of_previous ? xs[j - 1].data() : xs[j].data();  // the same pointer
      fast->linear({x, w.n_in, T, &w, 0, w.n_out, Epilogue::kBf16, nullptr, alone[j].data(), w.n_out});
      ps.push_back({x, w.n_in, T, &w, 0, w.n_out, Epilogue::kBf16, nullptr, together[j].data(), w.n_out});
    }
    fast->linears(ps);
    for (size_t j = 0; j < ops.size(); ++j) EXPECT_EQ(alone[j], together[j]) << "op " << j << ", T=" << T;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, LinearKernel, ::testing::ValuesIn(all_simd_levels()), level_test_name);

// A backend with a family for prompt tokens and another for generated ones (the default on AMX CPUs) runs
// linear() and linears() on the family of the token kind last set, bit for bit that family's own backend.
TEST(LinearByTokenKind, LinearOpsRunOnTheKindsFamily) {
  const SimdLevel generated = best_simd_level(), prompt = SimdLevel::kScalar;  // two families on any CPU
  if (generated == prompt) GTEST_SKIP() << "this CPU has only the scalar family";
  auto by_kind = make_fast_backend_with_levels(2, generated, prompt);
  EXPECT_TRUE(by_kind->kernels_differ_by_token_kind());
  EXPECT_FALSE(make_fast_backend_with_level(2, generated)->kernels_differ_by_token_kind());
  std::mt19937 rng(67);
  const OwnedWeight fp8 = random_fp8_weight(rng, 256, 1024, 128), fp4 = random_fp4_weight(rng, 192, 512);
  const int64_t T = 20;
  const std::vector<float> x8 = random_bf16_values(rng, T * 1024), x4 = random_bf16_values(rng, T * 512);
  const auto run = [&](Backend& backend) {
    std::vector<float> a(size_t(T * 256)), b(size_t(T * 192));
    backend.linear({x8.data(), 1024, T, &fp8.w, 0, 256, Epilogue::kBf16, nullptr, a.data(), 256});
    const LinearParams ps[] = {{x4.data(), 512, T, &fp4.w, 0, 192, Epilogue::kF32, nullptr, b.data(), 192}};
    backend.linears(ps);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto prompt_alone = run(*make_fast_backend_with_level(2, prompt));
  const auto generated_alone = run(*make_fast_backend_with_level(2, generated));
  ASSERT_NE(prompt_alone, generated_alone) << "the two families' sums must differ somewhere for this test to tell them apart";
  by_kind->set_token_kind(TokenKind::kPrompt);
  EXPECT_EQ(run(*by_kind), prompt_alone);
  by_kind->set_token_kind(TokenKind::kGenerated);
  EXPECT_EQ(run(*by_kind), generated_alone);
  by_kind->set_token_kind(TokenKind::kPrompt);
  EXPECT_EQ(run(*by_kind), prompt_alone);
}

}  // namespace
}  // namespace deepinfer::testing
