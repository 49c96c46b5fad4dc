// Random attention projections and an attention side's stream and mHC weights, for the device chains' tests
// (linear_chain_cuda_test.cpp) and the kept arrays' (kept_arrays_cuda_test.cpp).
#pragma once

#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/dtypes.h"
#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {

// The attention's projections as the model's: two FP8 ops on uq (A1 writes mid, A10) and two bf16 ones on u, one
// with a bias (the compressor's scores); then two FP8 ops on mid_q (A3, I1). Random weights, owning every byte.
struct RandomProjections {
  static constexpr int64_t D = 256, QL = 128, KV = 192, C = 64;
  int64_t T, Q, IQ;  // Q: A3's rows (q's heads x head_dim); IQ: I1's (the indexer's heads x 128)
  bool v41;
  int block;
  OwnedWeight wq_a, wkv, wc, wg, wq_b, wi;
  std::vector<float> bias;
  std::vector<uint16_t> norm;

  RandomProjections(int64_t n_tokens, bool v41_rules, std::mt19937& rng, int64_t q_rows = 256, int64_t index_q_rows = 128)
      : T(n_tokens), Q(q_rows), IQ(index_q_rows), v41(v41_rules), block(v41_rules ? 32 : 128), wq_a(random_fp8_weight(rng, QL, D, block)),
        wkv(random_fp8_weight(rng, KV, D, block)), wc(random_bf16_weight(rng, C, D)), wg(random_bf16_weight(rng, C, D)),
        wq_b(random_fp8_weight(rng, Q, QL, block)), wi(random_fp8_weight(rng, IQ, QL, block)),
        bias(random_bf16_values(rng, n_tokens * C, 1.0f)) {
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < QL; ++i) norm.push_back(uint16_t(float_to_bits(1.0f + 0.1f * normal(rng)) >> 16));
  }

  // Every output, filled with -7 until written.
  struct Outputs {
    std::vector<float> qr, kv, c, g, qr_q, q, iq;
    explicit Outputs(const RandomProjections& r)
        : qr(size_t(r.T * QL), -7.0f), kv(size_t(r.T * KV), -7.0f), c(size_t(r.T * C), -7.0f), g(size_t(r.T * C), -7.0f),
          qr_q(size_t(r.T * QL), -7.0f), q(size_t(r.T * r.Q), -7.0f), iq(size_t(r.T * r.IQ), -7.0f) {}
  };
  // The chain's ops on u and uq into o, kept in first / second for the returned params.
  ProjectionChainParams chain(const float* u, const float* uq, Outputs& o) {
    first = {{uq, D, T, &wq_a.w, 0, QL, Epilogue::kBf16, nullptr, o.qr.data(), QL},
             {uq, D, T, &wkv.w, 0, KV, Epilogue::kBf16, nullptr, o.kv.data(), KV},
             {u, D, T, &wc.w, 0, C, Epilogue::kF32, nullptr, o.c.data(), C},
             {u, D, T, &wg.w, 0, C, Epilogue::kF32AddBias, bias.data(), o.g.data(), C}};
    second = {{o.qr_q.data(), QL, T, &wq_b.w, 0, Q, Epilogue::kBf16, nullptr, o.q.data(), Q},
              {o.qr_q.data(), QL, T, &wi.w, 0, IQ, Epilogue::kBf16, nullptr, o.iq.data(), IQ}};
    return {first, o.qr.data(), T, QL, norm.data(), double(1e-6f), o.qr_q.data(), block, v41, second};
  }
  std::vector<LinearParams> first, second;
};

// A random attention side's stream and mHC weights (4 copies, 24 mixes), owning every byte: V4's collapse (the
// side's own pre) or V4.1's (another pre).
struct RandomFrontSide {
  std::vector<float> h, fn, scale, base, collapse_pre;
  std::vector<uint16_t> norm;
  MhcSideParams side;

  RandomFrontSide(int64_t n_tokens, int64_t dim, bool other_pre, std::mt19937& rng) {
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
    h = random_bf16_values(rng, n_tokens * 4 * dim, 1.0f);
    for (int64_t i = 0; i < 24 * 4 * dim; ++i) fn.push_back(0.03f * normal(rng));
    for (int i = 0; i < 3; ++i) scale.push_back(2.0f * uniform(rng));
    for (int i = 0; i < 24; ++i) base.push_back(normal(rng));
    for (int64_t i = 0; i < n_tokens * 4 && other_pre; ++i) collapse_pre.push_back(uniform(rng));
    for (int64_t i = 0; i < dim; ++i) norm.push_back(uint16_t(float_to_bits(1.0f + 0.1f * normal(rng)) >> 16));
    side.h = h.data();
    side.n_tokens = n_tokens;
    side.dim = dim;
    side.mhc = {fn.data(), scale.data(), base.data(), norm.data(), 24, 20, double(1e-6f), double(1e-6f)};
    side.collapse_pre = other_pre ? collapse_pre.data() : nullptr;
  }
};

}  // namespace deepinfer::testing
