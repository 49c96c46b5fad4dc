// The reference backend: every op computed exactly (double accumulation; products of bf16/fp8/fp4 values
// are exact in double) and rounded once to its output dtype, as the golden precision contract demands.
// It is the test oracle of the fast backend; speed is not a goal here.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/weight_decode.h"
#include "backend/cpu/epilogue.h"
#include "core/status.h"

namespace deepinfer {

namespace {

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }

  void linear(const LinearParams& p) override {
    const LinearWeight& w = *p.weight;
    if (p.x_e4m3_block > 0) check_x_e4m3_blocks(p);
    std::vector<double> row(static_cast<size_t>(w.n_in));
    for (int64_t n = 0; n < p.n_rows; ++n) {
      decode_weight_row(w, p.row_begin + n, row.data());
      for (int64_t t = 0; t < p.n_tokens; ++t) {
        const float* x = p.x + t * p.x_stride;
        double acc = 0;
        for (int64_t k = 0; k < w.n_in; ++k) acc += double(x[k]) * row[size_t(k)];
        const float bias = p.bias ? p.bias[t * p.n_rows + n] : 0.0f;
        p.out[t * p.out_stride + n] = apply_epilogue(p.epilogue, acc, bias);
      }
    }
  }

  void hc_mix(const HcMixParams& p) override {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const float* x = p.x + t * p.width;
      double sq = 0;
      for (int64_t i = 0; i < p.width; ++i) sq += double(x[i]) * x[i];
      const double r = std::sqrt(sq / double(p.width) + p.eps);
      for (int64_t m = 0; m < p.n_mix; ++m) {
        const float* f = p.fn + m * p.width;
        double acc = 0;
        for (int64_t i = 0; i < p.width; ++i) acc += double(x[i]) * f[i];
        p.out[t * p.n_mix + m] = round_f32(acc / r);
      }
    }
  }

  void sparse_attention(const SparseAttentionParams& p) override {
    DI_CHECK_MSG(!p.packed, "packed attention slots for a backend that does not take them");
    const int64_t n_blocks = p.n_slots / 64;
    std::vector<double> s(static_cast<size_t>(p.n_slots));
    std::vector<double> acc(static_cast<size_t>(p.head_dim));
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const float* q = p.q + h * p.head_dim;
      for (int64_t j = 0; j < p.n_slots; ++j) {
        if (!p.slots[j]) continue;
        double dot = 0;
        for (int64_t d = 0; d < p.head_dim; ++d) dot += double(q[d]) * p.slots[j][d];
        s[size_t(j)] = double(p.softmax_scale) * dot;
      }
      // Running max per 64-block (spec AT2); M = the max over all blocks.
      std::vector<double> block_max(static_cast<size_t>(n_blocks));
      double running = -INFINITY;
      for (int64_t b = 0; b < n_blocks; ++b) {
        for (int64_t j = b * 64; j < b * 64 + 64; ++j) if (p.slots[j]) running = std::max(running, s[size_t(j)]);
        block_max[size_t(b)] = running;
      }
      const double m_all = running;
      std::fill(acc.begin(), acc.end(), 0.0);
      double denom = 0;
      for (int64_t j = 0; j < p.n_slots; ++j) {
        if (!p.slots[j]) continue;
        const double mb = p.block_running_max ? block_max[size_t(j / 64)] : m_all;
        const double prob = round_bf16(std::exp(s[size_t(j)] - mb));  // the bf16 P of the tilelang kernel
        const double w = std::exp(mb - m_all) * prob;
        for (int64_t d = 0; d < p.head_dim; ++d) acc[size_t(d)] += w * p.slots[j][d];
        denom += std::exp(s[size_t(j)] - m_all);
      }
      denom += std::exp(double(p.sink[h]) - m_all);
      for (int64_t d = 0; d < p.head_dim; ++d) p.out[h * p.head_dim + d] = round_bf16(acc[size_t(d)] / denom);
    }
  }

  void index_scores(const IndexScoreParams& p) override {
    DI_CHECK_MSG(!p.key_format, "packed index keys for a backend that does not take them");
    for (int64_t j = 0; j < p.n_keys; ++j) {
      const float* key = p.keys + j * p.dim;
      double total = 0;
      for (int64_t h = 0; h < p.n_heads; ++h) {
        const float* q = p.q + h * p.dim;
        double dot = 0;
        for (int64_t d = 0; d < p.dim; ++d) dot += double(q[d]) * key[d];
        const double s = round_bf16(dot);
        total += round_bf16(std::max(s, 0.0) * double(p.weights[h]));
      }
      p.scores[j] = round_bf16(total);
    }
  }

 private:
  // LinearParams::x_e4m3_block is a promise that a backend may compute on (FP8 operands); the oracle holds
  // every caller to it, so a model call site that claims it wrongly fails the tests.
  static void check_x_e4m3_blocks(const LinearParams& p) {
    const int64_t n_in = p.weight->n_in, block = p.x_e4m3_block;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      for (int64_t k0 = 0; k0 < n_in; k0 += block) {
        if (is_scaled_e4m3_block(p.x + t * p.x_stride + k0, std::min(block, n_in - k0))) continue;
        const std::string what = "linear x_e4m3_block = " + std::to_string(block) + ": token " + std::to_string(t) +
                                 ", columns " + std::to_string(k0) + ".. are not e4m3 values times one power of two";
        DI_CHECK_MSG(false, what);
      }
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace deepinfer
