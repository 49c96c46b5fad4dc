// The fast CPU backend: fp32 accumulation, weights decoded in place block by block (never expanded in
// memory), rows split across threads so each core streams its own slice of the weights. Same rounding
// points as the reference (outputs rounded to bf16/fp32 as the op says); only the accumulation differs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/epilogue.h"
#include "backend/cpu/weight_decode.h"
#include "core/thread_pool.h"

namespace deepinfer {

namespace {

class FastBackend final : public Backend {
 public:
  explicit FastBackend(int n_threads) : pool_(n_threads) {}
  const char* name() const override { return "fast"; }

  void linear(const LinearParams& p) override {
    const LinearWeight& w = *p.weight;
    const int64_t K = w.n_in;
    pool_.parallel_for(p.n_rows, 8, [&](int64_t n0, int64_t n1) {
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = n0; n < n1; ++n) {
        decode_weight_row(w, p.row_begin + n, row.data());
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          const float* x = p.x + t * p.x_stride;
          float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          int64_t k = 0;
          for (; k + 8 <= K; k += 8) {
            for (int j = 0; j < 8; ++j) acc[j] += x[k + j] * row[size_t(k + j)];
          }
          float total = 0;
          for (int j = 0; j < 8; ++j) total += acc[j];
          for (; k < K; ++k) total += x[k] * row[size_t(k)];
          const float bias = p.bias ? p.bias[t * p.n_rows + n] : 0.0f;
          p.out[t * p.out_stride + n] = apply_epilogue(p.epilogue, total, bias);
        }
      }
    });
  }

  void hc_mix(const HcMixParams& p) override {
    pool_.parallel_for(p.n_tokens, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* x = p.x + t * p.width;
        float sq = 0;
        for (int64_t i = 0; i < p.width; ++i) sq += x[i] * x[i];
        const float r = std::sqrt(sq / float(p.width) + float(p.eps));
        for (int64_t m = 0; m < p.n_mix; ++m) {
          const float* f = p.fn + m * p.width;
          float acc = 0;
          for (int64_t i = 0; i < p.width; ++i) acc += x[i] * f[i];
          p.out[t * p.n_mix + m] = acc / r;
        }
      }
    });
  }

  void sparse_attention(const SparseAttentionParams& p) override {
    pool_.parallel_for(p.n_heads, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> s(static_cast<size_t>(p.n_slots)), acc(size_t(p.head_dim));
      for (int64_t h = h0; h < h1; ++h) {
        const float* q = p.q + h * p.head_dim;
        for (int64_t j = 0; j < p.n_slots; ++j) {
          if (!p.slots[j]) continue;
          float dot = 0;
          for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * p.slots[j][d];
          s[size_t(j)] = p.softmax_scale * dot;
        }
        // Online softmax over 64-slot blocks, P rounded to bf16 against the running max (spec AT2).
        float running = -INFINITY, denom = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        const int64_t block = p.block_running_max ? 64 : p.n_slots;
        for (int64_t b0 = 0; b0 < p.n_slots; b0 += block) {
          float block_max = running;
          for (int64_t j = b0; j < b0 + block; ++j) if (p.slots[j]) block_max = std::max(block_max, s[size_t(j)]);
          if (block_max == -INFINITY) continue;
          if (block_max > running && running != -INFINITY) {
            const float rescale = std::exp(running - block_max);
            for (auto& v : acc) v *= rescale;
            denom *= rescale;
          }
          running = block_max;
          for (int64_t j = b0; j < b0 + block; ++j) {
            if (!p.slots[j]) continue;
            const float e = std::exp(s[size_t(j)] - running);
            denom += e;
            const float prob = round_bf16_from_float(e);
            const float* row = p.slots[j];
            for (int64_t d = 0; d < p.head_dim; ++d) acc[size_t(d)] += prob * row[d];
          }
        }
        denom += std::exp(p.sink[h] - running);
        for (int64_t d = 0; d < p.head_dim; ++d) p.out[h * p.head_dim + d] = round_bf16_from_float(acc[size_t(d)] / denom);
      }
    });
  }

  void index_scores(const IndexScoreParams& p) override {
    pool_.parallel_for(p.n_keys, 64, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const float* key = p.keys + j * p.dim;
        float total = 0;
        for (int64_t h = 0; h < p.n_heads; ++h) {
          const float* q = p.q + h * p.dim;
          float dot = 0;
          for (int64_t d = 0; d < p.dim; ++d) dot += q[d] * key[d];
          const float s = round_bf16_from_float(dot);
          total += round_bf16_from_float(std::max(s, 0.0f) * p.weights[h]);
        }
        p.scores[j] = round_bf16_from_float(total);
      }
    });
  }

 private:
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_fast_backend(int n_threads) { return std::make_unique<FastBackend>(n_threads); }

}  // namespace deepinfer
