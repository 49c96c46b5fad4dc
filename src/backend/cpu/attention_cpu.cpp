#include "backend/cpu/attention_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>

#include "backend/cpu/simd_kernels.h"
#include "core/dtypes.h"

namespace deepinfer::cpu {

namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// body over [0, n): split across the pool's threads, or all of it on the calling thread (pool == nullptr).
void run_ranges(WorkerPool* pool, int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
  if (pool) pool->parallel_for(n, min_chunk, body);
  else body(0, n);
}

// The portable loop (SimdLevel::kScalar): fp32 dots, online softmax over the 64-slot blocks.
void sparse_attention_portable(const SparseAttentionParams& p, WorkerPool* pool) {
  run_ranges(pool, p.n_heads, 1, [&](int64_t h0, int64_t h1) {
    thread_local std::vector<float> s, acc;
    s.resize(size_t(p.n_slots));
    acc.resize(size_t(p.head_dim));
    for (int64_t h = h0; h < h1; ++h) {
      const float* q = p.q + h * p.head_dim;
      float m_all = -INFINITY;
      for (int64_t j = 0; j < p.n_slots; ++j) {
        if (!p.slots[j]) continue;
        float dot = 0;
        for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * p.slots[j][d];
        s[size_t(j)] = p.softmax_scale * dot;
        m_all = std::max(m_all, s[size_t(j)]);
      }
      float running = -INFINITY, denom = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int64_t block = p.block_running_max ? 64 : std::max<int64_t>(p.n_slots, 1);
      for (int64_t b0 = 0; b0 < p.n_slots; b0 += block) {
        const int64_t b1 = std::min(p.n_slots, b0 + block);
        float block_max = p.block_running_max ? running : m_all;
        for (int64_t j = b0; j < b1; ++j) if (p.slots[j]) block_max = std::max(block_max, s[size_t(j)]);
        if (block_max == -INFINITY) continue;
        if (block_max > running && running != -INFINITY) {
          const float rescale = std::exp(running - block_max);
          for (auto& v : acc) v *= rescale;
          denom *= rescale;
        }
        running = block_max;
        for (int64_t j = b0; j < b1; ++j) {
          if (!p.slots[j]) continue;
          const float e = std::exp(s[size_t(j)] - running);
          denom += e;
          const float prob = round_bf16_from_float(e);
          for (int64_t d = 0; d < p.head_dim; ++d) acc[size_t(d)] += prob * p.slots[j][d];
        }
      }
      if (running == -INFINITY) {
        std::fill(p.out + h * p.head_dim, p.out + (h + 1) * p.head_dim, 0.0f);
        continue;
      }
      denom += std::exp(p.sink[h] - running);
      for (int64_t d = 0; d < p.head_dim; ++d) p.out[h * p.head_dim + d] = round_bf16_from_float(acc[size_t(d)] / denom);
    }
  });
}

// Packs K (and V pairs) and q for one family; false when some value is not exact in its format.
bool pack_attention(const SimdKernels& ks, AttentionLayout& a, WorkerPool* pool, AttentionWorkspace& ws) {
  a.k_padded = round_up(a.head_dim, ks.chunk);
  a.stride = row_stride(a.k_padded, ks.elem_bytes);
  const int64_t k_rows = round_up(a.n_rows, 4);
  ws.k.resize(size_t(k_rows * a.stride) * ks.elem_bytes);
  std::fill(ws.k.begin() + ptrdiff_t(size_t(a.n_rows * a.stride) * ks.elem_bytes), ws.k.end(), uint8_t(0));
  if (ks.paired_v) ws.v.resize(size_t(a.n_rows / 2 * a.head_dim) * 4);
  ws.q.resize(size_t(a.n_heads * a.stride) * ks.elem_bytes);
  a.k_packed = ws.k.data();
  a.v_packed = ws.v.data();
  a.q_packed = ws.q.data();
  std::atomic<bool> ok{true};
  const int64_t n_pairs = a.n_rows / 2;
  run_ranges(pool, n_pairs, 16, [&](int64_t i0, int64_t i1) {
    bool good = ks.attention_pack_kv(a, 2 * i0, 2 * i1);
    good &= ks.attention_pack_q(a, a.n_heads * i0 / n_pairs, a.n_heads * i1 / n_pairs);
    if (!good) ok = false;
  });
  return ok;
}

}  // namespace

void sparse_attention_fast(const SparseAttentionParams& p, SimdLevel level, WorkerPool* pool, AttentionWorkspace& ws) {
  const SimdKernels* ks = &simd_kernels(level);
  if (!ks->attention_attend) return sparse_attention_portable(p, pool);

  // Compact the non-empty slots per 64-slot block (the blocks of the running max, spec AT2).
  ws.rows.clear();
  ws.seg_begin.clear();
  ws.seg_valid.clear();
  for (int64_t b0 = 0; b0 < p.n_slots; b0 += 64) {
    const int64_t begin = int64_t(ws.rows.size());
    for (int64_t j = b0; j < std::min(p.n_slots, b0 + 64); ++j) if (p.slots[j]) ws.rows.push_back(p.slots[j]);
    const int64_t valid = int64_t(ws.rows.size()) - begin;
    if (valid == 0) continue;
    if (valid % 2) ws.rows.push_back(nullptr);
    ws.seg_begin.push_back(begin);
    ws.seg_valid.push_back(valid);
  }
  ws.seg_begin.push_back(int64_t(ws.rows.size()));
  if (ws.seg_valid.empty()) {  // no visible slot: the reference's 0 / (sink term)
    std::fill(p.out, p.out + p.n_heads * p.head_dim, 0.0f);
    return;
  }
  AttentionLayout a;
  a.rows = ws.rows.data();
  a.n_rows = int64_t(ws.rows.size());
  a.seg_begin = ws.seg_begin.data();
  a.seg_valid = ws.seg_valid.data();
  a.n_seg = int64_t(ws.seg_valid.size());
  a.q = p.q;
  a.n_heads = p.n_heads;
  a.head_dim = p.head_dim;
  a.sink = p.sink;
  a.scale = p.softmax_scale;
  a.running_max = p.block_running_max;
  a.out = p.out;
  if (!pack_attention(*ks, a, pool, ws)) {
    ks = &fp32_simd_kernels(level);  // rows or queries that are not bf16 values: the fp32 family
    DI_CHECK(pack_attention(*ks, a, pool, ws));
  }
  run_ranges(pool, p.n_heads, 4, [&](int64_t h0, int64_t h1) { ks->attention_attend(a, h0, h1); });
}

void sparse_attentions_fast(std::span<const SparseAttentionParams> ps, SimdLevel level, WorkerPool& pool,
                            AttentionWorkspace& ws) {
  // A token per thread once there are enough tokens to go round: a 640-slot token took 534 us on one Zen 4
  // core and 421 us on two (kernel_bench), whose split of the heads leaves each core reading the K / V rows
  // the other packed, and two synchronisations per token.
  if (int64_t(ps.size()) < 2 * pool.size()) {
    for (const SparseAttentionParams& p : ps) sparse_attention_fast(p, level, &pool, ws);
    return;
  }
  pool.parallel_for(int64_t(ps.size()), 1, [&](int64_t i0, int64_t i1) {
    thread_local AttentionWorkspace own;  // a thread's packed rows stay in its own caches
    for (int64_t i = i0; i < i1; ++i) sparse_attention_fast(ps[size_t(i)], level, nullptr, own);
  });
}

void index_scores_fast(const IndexScoreParams& p, SimdLevel level, WorkerPool& pool, IndexWorkspace& ws) {
  if (p.n_keys <= 0) return;
  const SimdKernels* ks = &simd_kernels(level);
  auto pack = [&](const SimdKernels& k) {
    const int64_t st = row_stride(round_up(p.dim, k.chunk), k.elem_bytes), rows = round_up(p.n_keys, 4) + 4;
    ws.keys.resize(size_t(rows * st) * k.elem_bytes);
    std::fill(ws.keys.begin() + ptrdiff_t(size_t(p.n_keys * st) * k.elem_bytes), ws.keys.end(), uint8_t(0));
    ws.q.resize(size_t(p.n_heads * st) * k.elem_bytes);
    bool ok = k.pack_x(p.keys, p.dim, 0, p.n_keys, p.dim, st, false, ws.keys.data());
    return ok & k.pack_x(p.q, p.dim, 0, p.n_heads, p.dim, st, false, ws.q.data());
  };
  if (!pack(*ks)) {
    ks = &fp32_simd_kernels(level);
    DI_CHECK(pack(*ks));
  }
  const int64_t kp = round_up(p.dim, ks->chunk), st = row_stride(kp, ks->elem_bytes);
  auto body = [&](int64_t j0, int64_t j1) {
    thread_local std::vector<float> dots;
    dots.resize(size_t(p.n_heads * (j1 - j0)));
    ks->index_scores(ws.keys.data(), ws.q.data(), p.weights, p.n_heads, kp, st, j0, j1, dots.data(), p.scores);
  };
  if (p.n_keys * p.n_heads * p.dim >= (int64_t(1) << 18)) pool.parallel_for(p.n_keys, 64, body);
  else body(0, p.n_keys);
}

void hc_mix_fast(const HcMixParams& p, SimdLevel level, WorkerPool& pool) {
  // fn is fp32: the fp32 family of the widest available width.
  const SimdKernels* ks = &fp32_simd_kernels(level);
  const bool direct = p.width % ks->chunk == 0 && p.n_mix % 4 == 0;
  const int64_t kp = round_up(p.width, ks->chunk), fn_rows = round_up(p.n_mix, 4);
  thread_local std::vector<float> fn_padded;
  if (!direct) {
    fn_padded.assign(size_t(fn_rows * kp), 0.0f);
    for (int64_t m = 0; m < p.n_mix; ++m) std::copy_n(p.fn + m * p.width, p.width, &fn_padded[size_t(m * kp)]);
  }
  const float* fn = direct ? p.fn : fn_padded.data();
  auto normalize = [&](int64_t t0, int64_t t1) {  // out /= rms(x), per token
    for (int64_t t = t0; t < t1; ++t) {
      const float sq = ks->sum_squares(p.x + t * p.width, p.width);
      const float r = std::sqrt(sq / float(p.width) + float(p.eps));
      for (int64_t m = 0; m < p.n_mix; ++m) p.out[t * p.n_mix + m] /= r;
    }
  };
  const int64_t stride = direct ? p.width : kp;
  auto rows_of_x = [&](int64_t t0, int64_t t1) -> const float* {  // tokens [t0, t1) of x, rows of `stride`
    if (direct) return p.x + t0 * p.width;
    thread_local std::vector<float> x_padded;
    x_padded.assign(size_t((t1 - t0) * kp), 0.0f);
    for (int64_t t = t0; t < t1; ++t) std::copy_n(p.x + t * p.width, p.width, &x_padded[size_t((t - t0) * kp)]);
    return x_padded.data();
  };
  if (p.n_tokens < 2 * pool.size()) {
    // Few tokens (decode): the threads split the mix rows (4 at a time, the tile kernel's row group) instead,
    // and each streams its share of fn (1.5 MB for a V4-Flash block). A row's sums are the same either way.
    const float* x = rows_of_x(0, p.n_tokens);
    pool.parallel_for(fn_rows / 4, 1, [&](int64_t g0, int64_t g1) {
      const int64_t r0 = 4 * g0, r1 = std::min(p.n_mix, 4 * g1);
      ks->dot_tiles(fn + r0 * stride, stride, r1 - r0, x, stride, p.n_tokens, kp, p.out + r0, p.n_mix);
    });
    normalize(0, p.n_tokens);
    return;
  }
  pool.parallel_for(p.n_tokens, 1, [&](int64_t t0, int64_t t1) {
    ks->dot_tiles(fn, stride, p.n_mix, rows_of_x(t0, t1), stride, t1 - t0, kp, p.out + t0 * p.n_mix, p.n_mix);
    normalize(t0, t1);
  });
}

}  // namespace deepinfer::cpu
