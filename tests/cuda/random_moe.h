// A random MoE block with FP4 experts, an FP8 shared expert and a bf16 gate, and its inputs, for the device MoE's
// tests (moe_cuda_test.cpp, moe_side_cuda_test.cpp).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {

// DEEPINFER_CUDA_MOE for the backends made while it lives.
class ScopedMoePath {
 public:
  explicit ScopedMoePath(const char* path) { setenv("DEEPINFER_CUDA_MOE", path, 1); }
  ~ScopedMoePath() { unsetenv("DEEPINFER_CUDA_MOE"); }
  ScopedMoePath(const ScopedMoePath&) = delete;
  ScopedMoePath& operator=(const ScopedMoePath&) = delete;
};

// DEEPINFER_CUDA_MOE=device and DEEPINFER_CUDA_LINEAR_CHAIN=device (a block's tail in one call) for the backends made
// while it lives.
class ScopedTailPaths {
 public:
  ScopedTailPaths() : moe_("device") { setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1); }
  ~ScopedTailPaths() { unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN"); }
  ScopedTailPaths(const ScopedTailPaths&) = delete;
  ScopedTailPaths& operator=(const ScopedTailPaths&) = delete;

 private:
  ScopedMoePath moe_;
};

struct MoeShape {
  bool v41 = false;
  bool hash = false;
  bool hash_repeats = false;  // every third token's hash row names its first expert twice
  int64_t n_experts = 16, top_k = 4, dim = 256, inter = 64, shared_inter = 128;
};

// A random MoE block and its inputs, owning every byte.
struct RandomMoe {
  std::vector<OwnedWeight> owned;
  std::vector<float> gate_bias;
  std::vector<int64_t> tid2eid;
  BlockWeights w;
  std::vector<float> u;
  std::vector<int32_t> ids;

  RandomMoe(const MoeShape& s, int64_t n_tokens, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t E = s.n_experts, K = s.top_k, D = s.dim, vocab = 50;
    owned.reserve(size_t(3 * E + 4));
    auto keep = [&](OwnedWeight o) -> const LinearWeight& {
      owned.push_back(std::move(o));
      return owned.back().w;
    };
    w.gate = keep(random_bf16_weight(rng, E, D));
    w.experts.resize(size_t(E));
    for (ExpertWeights& e : w.experts) {
      e.w1 = keep(random_fp4_weight(rng, s.inter, D));
      e.w3 = keep(random_fp4_weight(rng, s.inter, D));
      e.w2 = keep(random_fp4_weight(rng, D, s.inter));
    }
    w.shared.w1 = keep(random_fp8_weight(rng, s.shared_inter, D, 128));
    w.shared.w3 = keep(random_fp8_weight(rng, s.shared_inter, D, 128));
    w.shared.w2 = keep(random_fp8_weight(rng, D, s.shared_inter, 128));
    w.n_activated_experts = int(K);
    w.hash_routed = s.hash;
    if (s.hash) {
      std::vector<int64_t> experts(static_cast<size_t>(E));
      for (int64_t t = 0; t < vocab; ++t) {
        std::iota(experts.begin(), experts.end(), 0);
        std::shuffle(experts.begin(), experts.end(), rng);
        if (s.hash_repeats && t % 3 == 0 && K > 1) experts[size_t(K - 1)] = experts[0];
        tid2eid.insert(tid2eid.end(), experts.begin(), experts.begin() + K);
      }
      w.tid2eid = tid2eid.data();
    } else {
      std::normal_distribution<float> bias(0.0f, 0.05f);
      for (int64_t e = 0; e < E; ++e) gate_bias.push_back(bias(rng));
      w.gate_bias = gate_bias.data();
    }
    u = random_bf16_values(rng, n_tokens * D, 1.0f);
    std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
    for (int64_t t = 0; t < n_tokens; ++t) ids.push_back(id(rng));
  }

  // The first n_tokens tokens (< 0: all of them).
  MoeParams params(const MoeShape& s, float* out, int64_t n_tokens = -1) const {
    return {u.data(), n_tokens < 0 ? int64_t(ids.size()) : n_tokens, s.dim, &w, ids.data(), s.v41, s.v41 ? 2.5 : double(2.5f),
            double(10.0f), s.v41 ? 32 : 128, out};
  }
};

// The token counts the random-block tests sweep: one token, a few, and (full size) more than one expert's rows.
inline std::vector<int64_t> moe_test_token_counts() {
  return small_test_shapes() ? std::vector<int64_t>{1, 5} : std::vector<int64_t>{1, 2, 5, 33};
}

}  // namespace deepinfer::testing
