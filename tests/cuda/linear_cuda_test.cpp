// The CUDA linear op against the exact reference backend, on the cases and bounds of the CPU kernel test
// (tests/kernel/linear_test.cpp): bf16, e4m3 with 128- and 32-blocks, packed e2m1, odd K, row_begin
// offsets, 1..130 tokens (token groups of 1, 2, 4 and 8; on the mma_staged path, 64-token tiles from 64
// tokens on), strided inputs and outputs, every epilogue, non-bf16 activations and large scale bytes. Bound
// per output: 2 bf16 ulps of ref (bf16 outputs) + 2^-16 * sum_k |x_k w_k| (fp32 accumulation); padding past
// n_rows untouched; every token's outputs bit-identical to the same token's in calls of at most 8 tokens
// (batch invariance, and the staged tensor-core kernel giving the register kernel's bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {
namespace {

struct LinearCase {
  std::string name;
  DType dtype;
  int block;
  int64_t n_out, k;
  int64_t row_begin, n_rows;
  Epilogue epilogue = Epilogue::kBf16;
  int scale_lo = 0, scale_hi = 0;
  bool fp32_x = false;      // every x an fp32 value (three bf16 terms each)
  bool mixed_x = false;     // fp32 values in every third 8-token group, bf16 values elsewhere
};

// Small shapes (cuda_util.h): one count per register tile shape (1, 2, 5: one 8-token tile; 16: a 32-token tile)
// and staged tiling (64: one tile; 70: two, the second partial).
const std::vector<int64_t>& token_counts() {
  static const std::vector<int64_t> all = {1, 2, 3, 4, 5, 7, 16, 33, 64, 70, 130}, small = {1, 2, 5, 16, 64, 70};
  return small_test_shapes() ? small : all;
}

// The same float bits (+0 and -0 differ), or both NaN.
bool same_bits(float a, float b) {
  uint32_t ua = 0, ub = 0;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub || (std::isnan(a) && std::isnan(b));
}

void run_case(const LinearCase& c, uint32_t seed) {
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(seed);
  OwnedWeight ow = random_linear_weight(rng, c.dtype, c.n_out, c.k, c.block, c.scale_lo, c.scale_hi);
  auto reference = make_reference_backend();
  const int64_t max_t = token_counts().back(), x_stride = c.k + 3, out_stride = c.n_rows + 5;
  std::vector<float> x = random_bf16_values(rng, max_t * x_stride, 1.0f);
  if (c.fp32_x || c.mixed_x) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t t = 0; t < max_t; ++t) {
      if (c.mixed_x && (t / 8) % 3 != 1) continue;
      for (int64_t k = 0; k < x_stride; ++k) x[size_t(t * x_stride + k)] = u(rng);
    }
  }
  std::vector<float> bias(size_t(max_t * c.n_rows));
  for (auto& b : bias) b = std::normal_distribution<float>(0.0f, 0.5f)(rng);
  const bool bf16_out = c.epilogue == Epilogue::kBf16;
  // The reference outputs and bounds depend on the case alone: computed on the first path, kept for the others.
  static std::map<std::string, std::pair<std::vector<float>, std::vector<double>>> reference_of;
  const std::string key = c.name + "/" + std::to_string(seed) + "/" + std::to_string(int(c.dtype)) + "/" +
                          std::to_string(c.block) + "/" + std::to_string(c.n_out) + "x" + std::to_string(c.k) + "/" +
                          std::to_string(c.row_begin) + "+" + std::to_string(c.n_rows) + "/" + std::to_string(int(c.epilogue)) +
                          "/" + std::to_string(c.scale_lo) + "-" + std::to_string(c.scale_hi) + "/" +
                          std::to_string(c.fp32_x) + std::to_string(c.mixed_x);
  auto [known, fresh] = reference_of.try_emplace(key);
  std::vector<float>& ref = known->second.first;
  std::vector<double>& mass = known->second.second;
  if (fresh) {
    ref.assign(size_t(max_t * out_stride), -7.0f);
    LinearParams pr{x.data(), x_stride, max_t, &ow.w, c.row_begin, c.n_rows, c.epilogue, bias.data(), ref.data(), out_stride};
    reference->linear(pr);
    mass = linear_l1_mass(pr);
  }

  // Every token in calls of at most 8 tokens: one token group, the register kernel on every path.
  std::vector<float> by8(size_t(max_t * out_stride), -7.0f);
  for (int64_t t0 = 0; t0 < max_t; t0 += 8) {
    LinearParams p{x.data() + t0 * x_stride, x_stride, std::min<int64_t>(8, max_t - t0), &ow.w, c.row_begin, c.n_rows,
                   c.epilogue, bias.data() + t0 * c.n_rows, by8.data() + t0 * out_stride, out_stride};
    gpu->linear(p);
  }

  Diff worst;
  for (int64_t T : token_counts()) {
    std::vector<float> got(size_t(T * out_stride), -7.0f);
    LinearParams p{x.data(), x_stride, T, &ow.w, c.row_begin, c.n_rows, c.epilogue, bias.data(), got.data(), out_stride};
    gpu->linear(p);
    int64_t n_unlike_by8 = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < c.n_rows; ++i) {
        const float g = got[size_t(t * out_stride + i)], small = by8[size_t(t * out_stride + i)];
        if (!same_bits(g, small) && ++n_unlike_by8 <= 3) {
          ADD_FAILURE() << c.name << " T=" << T << " t=" << t << " row=" << i << ": " << g
                        << " differs from the same token in an 8-token call: " << small;
        }
      }
    }
    const Diff d = expect_linear_within_bounds(ref, got, mass, T, c.n_rows, out_stride, bf16_out,
                                               c.name + " T=" + std::to_string(T), "cuda");
    if (d.calc_diff >= worst.calc_diff) worst = d;
  }
  const char* path = std::getenv("DEEPINFER_CUDA_LINEAR");
  print_diff(std::string(gpu->name()) + " " + (path ? path : "default path") + " " + c.name + " (worst of T=1.." +
                 std::to_string(max_t) + ")",
             worst);
}

// Every case on each linear path: fma (portable FMA), mma (tensor cores; weights whose scale bytes are too
// extreme for exact bf16 operands, like "extreme scale bytes", stay on fma there) and mma_staged.
class LinearCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearCuda, Bf16WeightsAllEpilogues) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  run_case({"bf16 head-like [300x4096] kBf16", DType::kBF16, 0, 300, 4096, 0, 300}, 11);
  run_case({"bf16 compressor [200x4096] kF32", DType::kBF16, 0, 200, 4096, 0, 200, Epilogue::kF32}, 12);
  run_case({"bf16 wgate [96x1000]+7 kF32AddBias", DType::kBF16, 0, 120, 1000, 7, 96, Epilogue::kF32AddBias}, 13);
  run_case({"bf16 gate [256x4096] kSqrtSoftplus", DType::kBF16, 0, 256, 4096, 0, 256, Epilogue::kSqrtSoftplus}, 14);
  run_case({"bf16 odd [37x77]", DType::kBF16, 0, 37, 77, 0, 37}, 15);
}

TEST_P(LinearCuda, Fp8Block128) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  run_case({"e4m3/128 wq_a-like [1024x4096] rows 37..337", DType::kF8E4M3, 128, 1024, 4096, 37, 300}, 21);
  run_case({"e4m3/128 wo_a-like [2048x1024] rows 1024..1280", DType::kF8E4M3, 128, 2048, 1024, 1024, 256}, 22);
  run_case({"e4m3/128 odd K [200x1000]", DType::kF8E4M3, 128, 200, 1000, 0, 200}, 23);
  run_case({"e4m3/128 wide scale bytes [64x512]", DType::kF8E4M3, 128, 64, 512, 0, 64, Epilogue::kF32, 128, 140}, 24);
}

TEST_P(LinearCuda, Fp8Block32) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  run_case({"e4m3/32 V4.1-like [320x5120] rows 5..293", DType::kF8E4M3, 32, 320, 5120, 5, 288}, 31);
  run_case({"e4m3/32 odd K [100x1000]", DType::kF8E4M3, 32, 100, 1000, 0, 100}, 32);
}

TEST_P(LinearCuda, Fp4Experts) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  run_case({"e2m1 w1-like [256x4096] rows 3..253", DType::kI8, 0, 256, 4096, 3, 250}, 41);
  run_case({"e2m1 w2-like [300x2048]", DType::kI8, 0, 300, 2048, 0, 300}, 42);
  run_case({"e2m1 extreme scale bytes [40x256]", DType::kI8, 0, 40, 256, 0, 40, Epilogue::kF32, 1, 200}, 43);
}

TEST_P(LinearCuda, NonBf16Activations) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  LinearCase c{"fp32 x, e4m3/128 [130x768] kF32", DType::kF8E4M3, 128, 130, 768, 0, 130, Epilogue::kF32};
  c.fp32_x = true;
  run_case(c, 51);
  // fp32 and bf16 token groups in one call (the mid / lo terms of some groups only), over two K slices
  LinearCase mixed{"mixed x, e4m3/128 [100x2100] kF32", DType::kF8E4M3, 128, 100, 2100, 0, 100, Epilogue::kF32};
  mixed.mixed_x = true;
  run_case(mixed, 52);
}

// K slices of unequal length (K 1100: 35 chunks, slices of 18 and 17), which the staged kernel folds at the
// end of K rather than at a slice boundary.
TEST_P(LinearCuda, UnevenKSlices) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  run_case({"e4m3/128 K=1100 [100x1100]", DType::kF8E4M3, 128, 100, 1100, 0, 100}, 71);
  run_case({"e2m1 K=3104 [70x3104] kF32", DType::kI8, 0, 70, 3104, 0, 70, Epilogue::kF32}, 72);
}

// One linears() batch as the MoE and the grouped launch see it: 5 FP4 experts' w1 / w3 pairs (each pair
// reads one x, the experts 1, 2, 70, 9 and 1 tokens: on mma_staged the group takes the staged kernel, the
// few-token experts alone the register kernel), two FP8 ops of another K with row offsets (one with the bias
// epilogue), a bf16 op, an FP4 expert whose extreme scale bytes keep it off the tensor cores, and two ops of
// 70 and 66 tokens and two K slices each, alone in their kind and K (on mma_split both split over K through
// the same scratch, one after the other). Every output must be bit for bit what the same op gives alone
// through linear(), and within the reference bound.
TEST_P(LinearCuda, BatchedOpsMatchSingleOps) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths(GetParam());
  DI_MAKE_CUDA_BACKEND(gpu);
  auto reference = make_reference_backend();
  std::mt19937 rng(61);
  std::vector<OwnedWeight> weights;
  std::vector<int64_t> op_tokens;
  for (int64_t tokens : {1, 2, 70, 9, 1}) {
    weights.push_back(random_fp4_weight(rng, 256, 1024));  // w1
    weights.push_back(random_fp4_weight(rng, 256, 1024));  // w3
    op_tokens.push_back(tokens);
    op_tokens.push_back(tokens);
  }
  weights.push_back(random_fp8_weight(rng, 512, 768, 128));
  op_tokens.push_back(4);
  weights.push_back(random_fp8_weight(rng, 512, 768, 128));
  op_tokens.push_back(7);
  weights.push_back(random_bf16_weight(rng, 96, 1024));
  op_tokens.push_back(2);
  weights.push_back(random_fp4_weight(rng, 64, 1024, 1, 200));
  op_tokens.push_back(3);
  weights.push_back(random_fp8_weight(rng, 300, 2048, 128));
  op_tokens.push_back(70);
  weights.push_back(random_bf16_weight(rng, 200, 1600));
  op_tokens.push_back(66);
  const size_t n_ops = weights.size();
  std::vector<std::vector<float>> xs, biases, ref(n_ops), alone(n_ops), batched(n_ops);
  std::vector<LinearParams> ps;
  for (size_t i = 0; i < n_ops; ++i) {
    const LinearWeight& w = weights[i].w;
    const int64_t T = op_tokens[i], row_begin = i == 10 ? 100 : 0, n_rows = w.n_out - row_begin - (i == 11 ? 33 : 0);
    const int64_t x_stride = w.n_in + 3;
    if (i % 2 == 0 || i >= 10) xs.push_back(random_bf16_values(rng, T * x_stride, 1.0f));  // w3 reads w1's x
    biases.push_back(std::vector<float>(size_t(T * n_rows)));
    for (auto& b : biases.back()) b = std::normal_distribution<float>(0.0f, 0.5f)(rng);
    const Epilogue e = i == 11 ? Epilogue::kF32AddBias : Epilogue::kBf16;
    LinearParams p{xs.back().data(), x_stride, T, &w, row_begin, n_rows, e, biases.back().data(), nullptr, n_rows};
    ref[i].assign(size_t(T * n_rows), -7.0f);
    alone[i].assign(size_t(T * n_rows), -7.0f);
    batched[i].assign(size_t(T * n_rows), -7.0f);
    run_alone_and_queue(p, *reference, *gpu, ref[i].data(), alone[i].data(), batched[i].data(), ps);
  }
  gpu->linears(ps);
  for (size_t i = 0; i < n_ops; ++i) {
    const std::vector<double> mass = linear_l1_mass(ps[i]);
    int64_t n_bad = 0;
    for (size_t j = 0; j < ref[i].size(); ++j) {
      EXPECT_TRUE(same_bits(batched[i][j], alone[i][j]))
          << "op " << i << " output " << j << ": batched " << batched[i][j] << " differs from alone " << alone[i][j];
      const double ulp = ps[i].epilogue == Epilogue::kBf16 ? bf16_ulp(ref[i][j]) : 0.0;
      const double bound = 2 * ulp + std::ldexp(mass[j], -16) + 1e-30;
      if (!(std::fabs(double(batched[i][j]) - double(ref[i][j])) <= bound) && ++n_bad <= 3) {
        ADD_FAILURE() << "op " << i << " output " << j << ": ref " << ref[i][j] << ", cuda " << batched[i][j];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, LinearCuda, ::testing::ValuesIn(linear_paths()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace deepinfer::testing
