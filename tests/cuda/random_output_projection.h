// A random attention output projection in the V4 layout (wo_a's groups are row ranges of one wo_a, each reading its
// columns of o; then wo_b), for the device chain's tests (linear_chain_cuda_test.cpp) and the block tail's
// (moe_side_cuda_test.cpp).
#pragma once

#include <random>
#include <vector>

#include "backend/backend.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {

// Random FP8 weights and bf16 inputs o, owning every byte; chain() writes [T, D].
struct RandomOutputProjection {
  static constexpr int64_t G = 4, group_width = 128, OL = 64;
  int64_t T, D;
  bool v41;
  OwnedWeight wo_a, wo_b;
  std::vector<float> o, z;
  std::vector<LinearParams> groups;

  RandomOutputProjection(int64_t n_tokens, bool v41_rules, std::mt19937& rng, int64_t dim = 192)
      : T(n_tokens), D(dim), v41(v41_rules), wo_a(random_fp8_weight(rng, G * OL, group_width, 128)),
        wo_b(random_fp8_weight(rng, dim, G * OL, 128)), o(random_bf16_values(rng, n_tokens * G * group_width, 1.0f)),
        z(size_t(n_tokens * G * OL)) {
    for (int64_t g = 0; g < G; ++g) {
      groups.push_back({o.data() + g * group_width, G * group_width, T, &wo_a.w, g * OL, OL, Epilogue::kBf16, nullptr,
                        z.data() + g * OL, G * OL});
    }
  }
  LinearChainParams chain(float* out) {
    const int64_t block = v41 ? 32 : 128;
    return {groups, z.data(), T, G * OL, block, v41, {z.data(), G * OL, T, &wo_b.w, 0, D, Epilogue::kBf16, nullptr, out, D, block}};
  }
};

}  // namespace deepinfer::testing
