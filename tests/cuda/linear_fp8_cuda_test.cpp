// The CUDA backend's FP8-operand linear for prompt tokens (DEEPINFER_CUDA_PROMPT_LINEAR=fp8,
// linear_fp8_kernel.cu; and =wgmma, linear_fp8_wgmma_kernel.cu, on compute capability 9.0 devices) against the exact reference backend: e4m3 weights with 128- and 32-blocks and e2m1
// expert weights, x made by the model's activation QDQ (qdq_fp8 in 128-blocks, V4; qdq_fp8_v41 in 32-blocks,
// V4.1) with x_e4m3_block set, edges (n_rows not a multiple of 64 or 16, K padded to k_pad, row_begin > 0,
// partial last K chunk, all-zero and tiny x blocks), every epilogue, 1..130 tokens. Also: each token's bits
// equal in every batch, at every position and through either block tile (fp8_big / fp8_small: the tile the
// launcher picks depends on the device's SM count, so it must not change a bit), ops that must not take the
// path keep the default path's bits, and a linears() batch equals its ops alone. The wgmma cases also print how
// many outputs differ in bits from the fp8 path's (the two tensor-core sums may round apart; kernels.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"
#include "model/ops.h"

namespace deepinfer::testing {
namespace {

// Per output: 2 bf16 ulps (bf16 outputs) + 2^-14 of sum_k |x_k w_k|. Looser than the bf16-operand path's 2^-16:
// each 32-product step's sum rounds inside the tensor core, whose FP8 sums are reported (DeepSeek-V3 report, on
// Hopper's wgmma) to keep about 14 bits after aligning the products. Unmeasured here: the first GPU run prints
// the worst |err| / mass and tells whether 2^-14 holds for mma.sync m16n8k32.
constexpr int kMassBits = 14;

bool same_bits(float a, float b) {
  uint32_t ua = 0, ub = 0;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub || (std::isnan(a) && std::isnan(b));
}

// x [T, x_stride]: bf16 N(0, 1) values, every 5th token scaled by 2^-12 and every 7th by 300 (block scales far
// apart), token 3's first 128 values zero (an all-zero block), then each token's first k values through the
// model's activation QDQ in blocks of x_block (32: the V4.1 rule).
std::vector<float> quantised_x(std::mt19937& rng, int64_t T, int64_t k, int64_t x_stride, int64_t x_block) {
  std::vector<float> x = random_bf16_values(rng, T * x_stride, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    float* row = x.data() + t * x_stride;
    const float factor = t % 5 == 4 ? 0x1p-12f : t % 7 == 6 ? 300.0f : 1.0f;
    for (int64_t i = 0; i < k; ++i) row[i] *= factor;  // exact for bf16 values times 2^-12; 300x rounds, then QDQ
    if (t == 3) std::fill(row, row + std::min<int64_t>(k, 128), 0.0f);
    if (x_block == 32) qdq_fp8_v41(row, k, 32);
    else qdq_fp8(row, k, x_block);
  }
  return x;
}

// Outputs [T, out_stride] against the reference's within the bound above (kernel_bounds.h, with no limit on how
// many bf16 outputs differ: this path rounds each step's sum on its own); worst_ratio: the largest |err| / mass.
Diff expect_fp8_within_bounds(const std::vector<float>& ref, const std::vector<float>& got, const std::vector<double>& mass,
                              int64_t T, int64_t n_rows, int64_t out_stride, bool bf16_out, const std::string& what,
                              double& worst_ratio) {
  return expect_linear_within_bounds(ref, got, mass, T, n_rows, out_stride, bf16_out, what, "cuda", kMassBits, false, &worst_ratio);
}

// A CUDA backend with DEEPINFER_CUDA_PROMPT_LINEAR = path, or nullptr with *error set.
std::unique_ptr<Backend> backend_on(const std::string& path, std::string* error) {
  const ScopedPromptLinear scope(path);
  return make_cuda_backend(0, 0, error);
}

struct Fp8Case {
  std::string name;
  DType dtype;  // kF8E4M3 or kI8 (packed e2m1)
  int block;    // e4m3 scale block
  int64_t n_out, k, row_begin, n_rows;
  Epilogue epilogue;
  int64_t x_block;  // 128 (V4 QDQ) or 32 (V4.1 QDQ)
};

OwnedWeight make_weight(std::mt19937& rng, const Fp8Case& c) {
  return c.dtype == DType::kF8E4M3 ? random_fp8_weight(rng, c.n_out, c.k, c.block) : random_fp4_weight(rng, c.n_out, c.k);
}

// The wgmma path where the device runs it (compute capability 9.0), else a skip that says why.
#define DI_SKIP_WITHOUT_WGMMA()                                                            \
  do {                                                                                     \
    std::string wgmma_error_;                                                              \
    if (!backend_on("wgmma", &wgmma_error_)) GTEST_SKIP() << wgmma_error_;                 \
  } while (0)

// Small shapes (cuda_util.h): 70 tokens still span two small tiles and part of a big one.
const std::vector<int64_t>& token_counts() {
  static const std::vector<int64_t> all = {1, 7, 64, 130}, small = {1, 7, 64, 70};
  return small_test_shapes() ? small : all;
}

// `path`: fp8 (also through each of its block tiles) or wgmma (also against the fp8 path's bits, reported).
void run_case(const Fp8Case& c, uint32_t seed, const std::string& path = "fp8") {
  std::string error;
  std::unique_ptr<Backend> gpu = backend_on(path, &error), plain = backend_on("mma", &error);
  ASSERT_TRUE(gpu && plain) << error;
  ASSERT_TRUE(gpu->kernels_differ_by_token_kind());
  gpu->set_token_kind(TokenKind::kPrompt);
  plain->set_token_kind(TokenKind::kPrompt);
  std::mt19937 rng(seed);
  const OwnedWeight ow = make_weight(rng, c);
  auto reference = make_reference_backend();
  const int64_t max_t = token_counts().back(), x_stride = c.k + 3, out_stride = c.n_rows + 5;
  const std::vector<float> x = quantised_x(rng, max_t, c.k, x_stride, c.x_block);
  std::vector<float> bias(size_t(max_t * c.n_rows));
  for (auto& b : bias) b = std::normal_distribution<float>(0.0f, 0.5f)(rng);
  const bool bf16_out = c.epilogue == Epilogue::kBf16;
  // Op over tokens [t0, t0 + T) of x (or of another x laid out the same way) into out.
  auto op = [&](const float* xs, const float* bs, int64_t T, float* out) {
    LinearParams p{xs, x_stride, T, &ow.w, c.row_begin, c.n_rows, c.epilogue, bs, out, out_stride};
    p.x_e4m3_block = c.x_block;
    return p;
  };

  std::vector<float> ref(size_t(max_t * out_stride), -7.0f);
  const LinearParams pr = op(x.data(), bias.data(), max_t, ref.data());
  reference->linear(pr);  // it also checks the x_e4m3_block promise
  const std::vector<double> mass = linear_l1_mass(pr);

  // Every token alone, and in calls of 7.
  std::vector<float> by1(size_t(max_t * out_stride), -7.0f), by7(size_t(max_t * out_stride), -7.0f);
  for (int64_t t = 0; t < max_t; ++t) gpu->linear(op(x.data() + t * x_stride, bias.data() + t * c.n_rows, 1, by1.data() + t * out_stride));
  for (int64_t t0 = 0; t0 < max_t; t0 += 7) {
    gpu->linear(op(x.data() + t0 * x_stride, bias.data() + t0 * c.n_rows, std::min<int64_t>(7, max_t - t0),
                   by7.data() + t0 * out_stride));
  }
  auto expect_token_bits = [&](const std::vector<float>& got, int64_t pos, int64_t t, const std::vector<float>& want,
                               const std::string& what, int64_t& n_unlike) {
    for (int64_t i = 0; i < c.n_rows; ++i) {
      const float g = got[size_t(pos * out_stride + i)], w = want[size_t(t * out_stride + i)];
      if (!same_bits(g, w) && ++n_unlike <= 3) {
        ADD_FAILURE() << c.name << " " << what << " token " << t << " row " << i << ": " << g << " vs " << w;
      }
    }
  };

  Diff worst;
  double worst_ratio = 0;
  for (int64_t T : token_counts()) {
    std::vector<float> got(size_t(T * out_stride), -7.0f);
    gpu->linear(op(x.data(), bias.data(), T, got.data()));
    int64_t n_unlike = 0;
    for (int64_t t = 0; t < T; ++t) {
      expect_token_bits(got, t, t, by1, "T=" + std::to_string(T) + " vs alone", n_unlike);
      expect_token_bits(got, t, t, by7, "T=" + std::to_string(T) + " vs calls of 7", n_unlike);
    }
    const Diff d = expect_fp8_within_bounds(ref, got, mass, T, c.n_rows, out_stride, bf16_out,
                                            c.name + " T=" + std::to_string(T), worst_ratio);
    if (d.calc_diff >= worst.calc_diff) worst = d;
  }
  // The tokens in reverse order: each lands in another tile position (and another 64- / 128-token tile).
  std::vector<float> x_rev(x.size()), bias_rev(bias.size()), rev(size_t(max_t * out_stride), -7.0f);
  for (int64_t t = 0; t < max_t; ++t) {
    const int64_t pos = max_t - 1 - t;
    std::copy_n(x.data() + t * x_stride, x_stride, x_rev.data() + pos * x_stride);
    std::copy_n(bias.data() + t * c.n_rows, c.n_rows, bias_rev.data() + pos * c.n_rows);
  }
  gpu->linear(op(x_rev.data(), bias_rev.data(), max_t, rev.data()));
  int64_t n_unlike = 0;
  for (int64_t t = 0; t < max_t; ++t) expect_token_bits(rev, max_t - 1 - t, t, by1, "reversed order", n_unlike);

  // Through each block tile alone (at these shapes the launcher's own choice is the small one).
  const std::vector<const char*> tile_paths = path == "fp8" ? std::vector<const char*>{"fp8_big", "fp8_small"}
                                                             : std::vector<const char*>{};
  for (const char* tile_path : tile_paths) {
    std::unique_ptr<Backend> tiled = backend_on(tile_path, &error);
    ASSERT_TRUE(tiled) << error;
    tiled->set_token_kind(TokenKind::kPrompt);
    for (int64_t T : {int64_t(7), max_t}) {
      std::vector<float> got(size_t(T * out_stride), -7.0f);
      tiled->linear(op(x.data(), bias.data(), T, got.data()));
      n_unlike = 0;
      for (int64_t t = 0; t < T; ++t) {
        expect_token_bits(got, t, t, by1, std::string(tile_path) + " T=" + std::to_string(T) + " vs alone", n_unlike);
      }
    }
  }

  // For the log only: how many outputs the tensor-core bf16-operand path gives differently (0 would suggest
  // that the op never took the FP8 path).
  std::vector<float> mma(size_t(max_t * out_stride), -7.0f);
  plain->linear(op(x.data(), bias.data(), max_t, mma.data()));
  int64_t n_differ_mma = 0;
  for (size_t i = 0; i < mma.size(); ++i) n_differ_mma += !same_bits(mma[i], by1[i]);
  print_diff(std::string(gpu->name()) + " " + path + " " + c.name + " (worst of T=1.." + std::to_string(max_t) + ")",
             worst);
  std::printf("    worst |err| / l1 mass %.3e (bound 2^-%d = %.3e); outputs unlike the mma path's: %lld of %lld\n", worst_ratio,
              kMassBits, std::ldexp(1.0, -kMassBits), (long long)n_differ_mma, (long long)(max_t * c.n_rows));
  if (path == "wgmma") {  // reported, not asserted: whether wgmma's k32 sum rounds as mma.sync's does
    std::unique_ptr<Backend> fp8 = backend_on("fp8", &error);
    ASSERT_TRUE(fp8) << error;
    fp8->set_token_kind(TokenKind::kPrompt);
    std::vector<float> by_fp8(size_t(max_t * out_stride), -7.0f);
    fp8->linear(op(x.data(), bias.data(), max_t, by_fp8.data()));
    int64_t n_differ_fp8 = 0;
    double worst_rel = 0;
    for (int64_t t = 0; t < max_t; ++t) {
      for (int64_t i = 0; i < c.n_rows; ++i) {
        const float a = by_fp8[size_t(t * out_stride + i)], b = by1[size_t(t * out_stride + i)];
        if (same_bits(a, b)) continue;
        ++n_differ_fp8;
        worst_rel = std::max(worst_rel, std::fabs(double(a) - double(b)) / std::max(1e-30, std::fabs(double(a))));
      }
    }
    std::printf("    wgmma vs fp8 path: %lld of %lld outputs differ in bits (worst rel diff %.3e)\n", (long long)n_differ_fp8,
                (long long)(max_t * c.n_rows), worst_rel);
  }
}

TEST(LinearFp8Cuda, Fp8Block128WeightsV4Activations) {
  DI_SKIP_WITHOUT_CUDA();
  run_case({"e4m3/128 wq_a-like [1024x4096] rows 37..337", DType::kF8E4M3, 128, 1024, 4096, 37, 300, Epilogue::kBf16, 128}, 101);
  run_case({"e4m3/128 K=1100 [200x1100] kF32", DType::kF8E4M3, 128, 200, 1100, 0, 200, Epilogue::kF32, 128}, 102);
  run_case({"e4m3/128 [300x2048] rows 100..300 kF32AddBias", DType::kF8E4M3, 128, 300, 2048, 100, 200, Epilogue::kF32AddBias, 128},
           103);
  run_case({"e4m3/128 [256x1024] kSqrtSoftplus", DType::kF8E4M3, 128, 256, 1024, 0, 256, Epilogue::kSqrtSoftplus, 128}, 104);
  run_case({"e4m3/128 odd rows [37x512]", DType::kF8E4M3, 128, 37, 512, 0, 37, Epilogue::kBf16, 128}, 105);
}

TEST(LinearFp8Cuda, Fp8Block32WeightsV41Activations) {
  DI_SKIP_WITHOUT_CUDA();
  run_case({"e4m3/32 V4.1-like [320x5120] rows 5..293", DType::kF8E4M3, 32, 320, 5120, 5, 288, Epilogue::kBf16, 32}, 111);
  run_case({"e4m3/32 K=1000 [100x1000] kF32", DType::kF8E4M3, 32, 100, 1000, 0, 100, Epilogue::kF32, 32}, 112);
}

TEST(LinearFp8Cuda, Fp4ExpertWeights) {
  DI_SKIP_WITHOUT_CUDA();
  run_case({"e2m1 w1-like [256x4096] rows 3..253, V4 x", DType::kI8, 0, 256, 4096, 3, 250, Epilogue::kBf16, 128}, 121);
  run_case({"e2m1 w2-like [300x2048], V4.1 x", DType::kI8, 0, 300, 2048, 0, 300, Epilogue::kBf16, 32}, 122);
  run_case({"e2m1 K=3104 [70x3104] kF32", DType::kI8, 0, 70, 3104, 0, 70, Epilogue::kF32, 128}, 123);
}

// The same cases on the wgmma kernel (compute capability 9.0 only).
TEST(LinearFp8Cuda, WgmmaFp8Block128WeightsV4Activations) {
  DI_SKIP_WITHOUT_CUDA();
  DI_SKIP_WITHOUT_WGMMA();
  run_case({"e4m3/128 wq_a-like [1024x4096] rows 37..337", DType::kF8E4M3, 128, 1024, 4096, 37, 300, Epilogue::kBf16, 128}, 101,
           "wgmma");
  run_case({"e4m3/128 K=1100 [200x1100] kF32", DType::kF8E4M3, 128, 200, 1100, 0, 200, Epilogue::kF32, 128}, 102, "wgmma");
  run_case({"e4m3/128 [300x2048] rows 100..300 kF32AddBias", DType::kF8E4M3, 128, 300, 2048, 100, 200, Epilogue::kF32AddBias, 128},
           103, "wgmma");
  run_case({"e4m3/128 [256x1024] kSqrtSoftplus", DType::kF8E4M3, 128, 256, 1024, 0, 256, Epilogue::kSqrtSoftplus, 128}, 104,
           "wgmma");
  run_case({"e4m3/128 odd rows [37x512]", DType::kF8E4M3, 128, 37, 512, 0, 37, Epilogue::kBf16, 128}, 105, "wgmma");
}

TEST(LinearFp8Cuda, WgmmaFp8Block32WeightsV41Activations) {
  DI_SKIP_WITHOUT_CUDA();
  DI_SKIP_WITHOUT_WGMMA();
  run_case({"e4m3/32 V4.1-like [320x5120] rows 5..293", DType::kF8E4M3, 32, 320, 5120, 5, 288, Epilogue::kBf16, 32}, 111, "wgmma");
  run_case({"e4m3/32 K=1000 [100x1000] kF32", DType::kF8E4M3, 32, 100, 1000, 0, 100, Epilogue::kF32, 32}, 112, "wgmma");
}

TEST(LinearFp8Cuda, WgmmaFp4ExpertWeights) {
  DI_SKIP_WITHOUT_CUDA();
  DI_SKIP_WITHOUT_WGMMA();
  run_case({"e2m1 w1-like [256x4096] rows 3..253, V4 x", DType::kI8, 0, 256, 4096, 3, 250, Epilogue::kBf16, 128}, 121, "wgmma");
  run_case({"e2m1 w2-like [300x2048], V4.1 x", DType::kI8, 0, 300, 2048, 0, 300, Epilogue::kBf16, 32}, 122, "wgmma");
  run_case({"e2m1 K=3104 [70x3104] kF32", DType::kI8, 0, 70, 3104, 0, 70, Epilogue::kF32, 128}, 123, "wgmma");
}

// With the FP8 path on, what must not take it gives the default path's bits exactly: a generated-token call,
// an op without the QDQ promise (x_e4m3_block = 0), and an op on bf16 weights.
TEST(LinearFp8Cuda, OtherOpsKeepTheDefaultBits) {
  DI_SKIP_WITHOUT_CUDA();
  std::string error;
  std::unique_ptr<Backend> fp8 = backend_on("fp8", &error), plain = backend_on("mma", &error);
  ASSERT_TRUE(fp8 && plain) << error;
  EXPECT_TRUE(fp8->kernels_differ_by_token_kind());
  EXPECT_FALSE(plain->kernels_differ_by_token_kind());
  std::mt19937 rng(131);
  const OwnedWeight w8 = random_fp8_weight(rng, 200, 1100, 128), w4 = random_fp4_weight(rng, 256, 1024),
                    wb = random_bf16_weight(rng, 96, 1024);
  const int64_t T = 70;
  auto run = [&](Backend& b, TokenKind kind, const LinearWeight& w, int64_t x_block, const std::vector<float>& x) {
    b.set_token_kind(kind);
    std::vector<float> out(size_t(T * w.n_out), -7.0f);
    LinearParams p{x.data(), w.n_in, T, &w, 0, w.n_out, Epilogue::kBf16, nullptr, out.data(), w.n_out};
    p.x_e4m3_block = x_block;
    b.linear(p);
    return out;
  };
  const std::vector<float> x1100 = quantised_x(rng, T, 1100, 1100, 128), x1024 = quantised_x(rng, T, 1024, 1024, 128);
  struct Check {
    const char* what;
    TokenKind kind;
    const LinearWeight* w;
    int64_t x_block;
    const std::vector<float>* x;
  };
  const Check checks[] = {
      {"e4m3 generated", TokenKind::kGenerated, &w8.w, 128, &x1100},
      {"e2m1 generated", TokenKind::kGenerated, &w4.w, 128, &x1024},
      {"e4m3 prompt without the promise", TokenKind::kPrompt, &w8.w, 0, &x1100},
      {"bf16 prompt", TokenKind::kPrompt, &wb.w, 128, &x1024},
  };
  for (const Check& ck : checks) {
    const std::vector<float> got = run(*fp8, ck.kind, *ck.w, ck.x_block, *ck.x);
    const std::vector<float> want = run(*plain, ck.kind, *ck.w, ck.x_block, *ck.x);
    int64_t n_unlike = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!same_bits(got[i], want[i]) && ++n_unlike <= 3) {
        ADD_FAILURE() << ck.what << " output " << i << ": " << got[i] << " vs the default path's " << want[i];
      }
    }
  }
}

// One linears() batch on the FP8 path as a prefill MoE group sees it: 5 FP4 experts' w1 / w3 pairs (each pair
// reads one x; 1, 7, 70, 130 and 3 tokens) in one grouped launch with a shared prepass per x, three e4m3 ops of
// other shapes, blocks and x blocks in the same kind's group (one with the bias epilogue and a row offset), and
// a bf16 op and an op without the promise, which stay on the tensor-core path. Each output must be bit for bit
// the same op's alone through linear(), and within the reference bound.
// `path`: fp8 (the batch also through each block tile) or wgmma.
void expect_batched_ops_match_single_ops(const std::string& path) {
  std::string error;
  const bool fp8 = path == "fp8";
  std::unique_ptr<Backend> gpu = backend_on(path, &error), big = backend_on(fp8 ? "fp8_big" : path, &error),
                           small = backend_on(fp8 ? "fp8_small" : path, &error);
  ASSERT_TRUE(gpu && big && small) << error;
  for (Backend* b : {gpu.get(), big.get(), small.get()}) b->set_token_kind(TokenKind::kPrompt);
  auto reference = make_reference_backend();
  std::mt19937 rng(141);
  struct Op {
    OwnedWeight w;
    int64_t tokens, row_begin = 0, x_block = 128;
    Epilogue epilogue = Epilogue::kBf16;
    bool shares_x = false;  // reads the previous op's x
  };
  std::vector<Op> ops;
  for (int64_t tokens : {1, 7, 70, 130, 3}) {
    ops.push_back({random_fp4_weight(rng, 256, 1024), tokens});
    ops.push_back({random_fp4_weight(rng, 256, 1024), tokens});
    ops.back().shares_x = true;
  }
  ops.push_back({random_fp8_weight(rng, 300, 2048, 128), 64, 100, 128, Epilogue::kF32AddBias});
  ops.push_back({random_fp8_weight(rng, 200, 1100, 128), 9});
  ops.push_back({random_fp8_weight(rng, 320, 1024, 32), 33, 0, 32});
  ops.push_back({random_bf16_weight(rng, 96, 1024), 5});
  ops.push_back({random_fp8_weight(rng, 128, 768, 128), 66, 0, 0});
  const size_t n_ops = ops.size();
  std::vector<std::vector<float>> xs(n_ops), biases(n_ops), ref(n_ops), alone(n_ops), batched(n_ops);
  std::vector<LinearParams> ps;
  for (size_t i = 0; i < n_ops; ++i) {
    const Op& o = ops[i];
    const LinearWeight& w = o.w.w;
    const int64_t n_rows = w.n_out - o.row_begin, x_stride = w.n_in + 3;
    if (!o.shares_x) xs[i] = quantised_x(rng, o.tokens, w.n_in, x_stride, o.x_block > 0 ? o.x_block : 128);
    biases[i].resize(size_t(o.tokens * n_rows));
    for (auto& b : biases[i]) b = std::normal_distribution<float>(0.0f, 0.5f)(rng);
    ref[i].assign(size_t(o.tokens * n_rows), -7.0f);
    alone[i].assign(size_t(o.tokens * n_rows), -7.0f);
    batched[i].assign(size_t(o.tokens * n_rows), -7.0f);
  }
  for (size_t i = 0; i < n_ops; ++i) {
    const Op& o = ops[i];
    const int64_t n_rows = o.w.w.n_out - o.row_begin;
    // A shared x is the same array, as the model passes an expert's x to its w1 and w3.
    const float* x = o.shares_x ? ps.back().x : xs[i].data();
    LinearParams p{x, o.w.w.n_in + 3, o.tokens, &o.w.w, o.row_begin, n_rows, o.epilogue, biases[i].data(), nullptr, n_rows};
    p.x_e4m3_block = o.x_block;
    run_alone_and_queue(p, *reference, *gpu, ref[i].data(), alone[i].data(), batched[i].data(), ps);
  }
  // The batch on each path (the launcher's tiles, then each tile always), every output as the op alone.
  double worst_ratio = 0;
  const std::vector<Backend*> paths = fp8 ? std::vector<Backend*>{big.get(), small.get(), gpu.get()} : std::vector<Backend*>{gpu.get()};
  for (Backend* b : paths) {
    for (auto& v : batched) std::fill(v.begin(), v.end(), -7.0f);
    b->linears(ps);
    for (size_t i = 0; i < n_ops; ++i) {
      int64_t n_unlike = 0;
      for (size_t j = 0; j < ref[i].size(); ++j) {
        if (!same_bits(batched[i][j], alone[i][j]) && ++n_unlike <= 3) {
          ADD_FAILURE() << (b == big.get() ? "fp8_big" : b == small.get() ? "fp8_small" : path) << " op " << i << " output "
                        << j << ": batched " << batched[i][j] << " differs from alone " << alone[i][j];
        }
      }
    }
  }
  for (size_t i = 0; i < n_ops; ++i) {
    const std::vector<double> mass = linear_l1_mass(ps[i]);
    expect_fp8_within_bounds(ref[i], batched[i], mass, ps[i].n_tokens, ps[i].n_rows, ps[i].n_rows,
                             ps[i].epilogue == Epilogue::kBf16, "op " + std::to_string(i), worst_ratio);
  }
  std::printf("    batched ops (%s): worst |err| / l1 mass %.3e\n", path.c_str(), worst_ratio);
}

TEST(LinearFp8Cuda, BatchedOpsMatchSingleOps) {
  DI_SKIP_WITHOUT_CUDA();
  expect_batched_ops_match_single_ops("fp8");
}

TEST(LinearFp8Cuda, WgmmaBatchedOpsMatchSingleOps) {
  DI_SKIP_WITHOUT_CUDA();
  DI_SKIP_WITHOUT_WGMMA();
  expect_batched_ops_match_single_ops("wgmma");
}

}  // namespace
}  // namespace deepinfer::testing
