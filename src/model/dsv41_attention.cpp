// DeepSeek-V4.1 attention (CSA2, spec §7.3-7.5; golden v41 contract steps 13-31): latent MQA without the
// per-head q norm, fp8 window KV on all 512 dims, KV sources (ratio-2 compressor or ratio-1 projection)
// publishing FP4 compressed rows and index keys, index sources with the two-level candidate selection,
// reuse layers, and sparse attention with sink against the global max.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtypes.h"
#include "model/kv_decode_cache.h"
#include "model/linear_chain.h"
#include "model/model_internal.h"

namespace deepinfer {

namespace {

// The most recent layer <= `layer` for which `pred` holds (the KV owner / the last index source).
template <typename Pred>
int latest_layer(int layer, Pred pred) {
  for (int l = layer; l >= 0; --l) if (pred(l)) return l;
  return -1;
}

}  // namespace

int Model::published_keys_layer(int layer, int64_t pos, bool is_prompt, int64_t prompt_len) const {
  // The reference republishes its index_k slot whenever a KV source completes a group, in layer order.
  // One-shot prefill: every KV source with at least one row published during the prompt. Decode at pos:
  // the latest KV source up to this layer that completes a group at pos, else the last one that did at
  // pos - 1 (the previous decode step). Derived per token, so chunking and batching cannot change it.
  const ModelConfig& c = config_;
  for (int l = layer; l >= 0; --l) {
    if (!c.is_kv_source(l)) continue;
    const int r = c.compress_ratio(l);
    if (is_prompt ? prompt_len / r >= 1 : (pos + 1) % r == 0) return l;
  }
  for (int l = c.n_layers - 1; l >= 0 && !is_prompt; --l) {
    if (c.is_kv_source(l) && pos % c.compress_ratio(l) == 0) return l;
  }
  for (int l = layer; l >= 0; --l) if (c.is_kv_source(l)) return l;  // the owner
  return -1;
}

void Model::add_kv_source_projections(int layer, const std::vector<float>& u, int64_t n_tokens, KvSourceProjections& out,
                                      std::vector<LinearParams>& ops) {
  const ModelConfig& c = config_;
  const BlockWeights& w = weights_.layers[size_t(layer)];
  const int64_t T = n_tokens, D = c.dim, HD = c.head_dim;
  out.kv.resize(size_t(T * HD));
  if (c.compress_ratio(layer) == 1) {  // step 15: the latents themselves
    ops.push_back({.x = u.data(), .x_stride = D, .n_tokens = T, .weight = &w.compressor.wkv, .row_begin = 0, .n_rows = HD,
                   .epilogue = Epilogue::kBf16, .bias = nullptr, .out = out.kv.data(), .out_stride = HD});
    return;
  }
  out.score.resize(size_t(T * HD));  // step 16
  ops.push_back({.x = u.data(), .x_stride = D, .n_tokens = T, .weight = &w.compressor.wkv, .row_begin = 0, .n_rows = HD,
                 .epilogue = Epilogue::kF32, .bias = nullptr, .out = out.kv.data(), .out_stride = HD});
  ops.push_back({.x = u.data(), .x_stride = D, .n_tokens = T, .weight = &w.compressor.wgate, .row_begin = 0, .n_rows = HD,
                 .epilogue = Epilogue::kF32, .bias = nullptr, .out = out.score.data(), .out_stride = HD});
}

void Model::kv_source_update_v41(int layer, const Batch& batch, V41Scratch& scratch, KvSourceProjections& projected) {
  const ModelConfig& c = config_;
  const BlockWeights& w = weights_.layers[size_t(layer)];
  const RopeTable& rope = layer_rope_[size_t(layer)];
  const int ratio = c.compress_ratio(layer);
  const int64_t T = batch.n_tokens(), HD = c.head_dim, ID = c.index_head_dim, RD = c.rope_head_dim;
  const double eps = c.norm_eps_value();
  DI_CHECK_MSG(ratio == 1 || ratio == 2, "a V4.1 KV source compresses by 1 or 2");
  // The tokens that finish a row (every one at ratio 1, the last of each group at ratio 2), in token order: row r is
  // token row_token[r]'s, row latent_row[r] of its sequence. A chunk's tokens, and so its rows, are consecutive.
  std::vector<int64_t> row_token, latent_row, token_row(static_cast<size_t>(T), -1);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = batch.pos[size_t(t)];
    if ((pos + 1) % ratio != 0) continue;
    token_row[size_t(t)] = int64_t(row_token.size());
    row_token.push_back(t);
    latent_row.push_back(pos / ratio);
  }
  const int64_t n_new = int64_t(row_token.size());
  // New latents (pre-RoPE, step 15 / 17), a chunk per thread (its compressor ring is its sequence's).
  std::vector<float> latents;
  if (ratio == 1) {  // step 15: every position is its own row
    latents = std::move(projected.kv);
    backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) rmsnorm(&latents[size_t(t * HD)], w.compressor.norm, HD, eps, &latents[size_t(t * HD)]);
    });
  } else {  // steps 16-17: ratio-2 groups pooled per channel with a softmax over the group's scores
    latents.resize(size_t(n_new * HD));
    const std::vector<float>& ckv = projected.kv;
    const std::vector<float>& csc = projected.score;
    for_each_chunk(*backend_, batch, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        CompressorState& cs = batch.states[size_t(batch.chunk[size_t(t)])]->layers[size_t(layer)].compressor;
        const int64_t pos = batch.pos[size_t(t)], ring = cs.ring_rows(), slot = pos % ring;
        std::copy_n(&ckv[size_t(t * HD)], HD, &cs.kv[size_t(slot * HD)]);
        std::copy_n(&csc[size_t(t * HD)], HD, &cs.score[size_t(slot * HD)]);
        if (token_row[size_t(t)] < 0) continue;
        float* pooled = &latents[size_t(token_row[size_t(t)] * HD)];
        const int64_t group_first = pos + 1 - ratio;
        for (int64_t i = 0; i < HD; ++i) {
          double smax = -INFINITY;
          for (int j = 0; j < ratio; ++j) smax = std::max(smax, double(cs.score[size_t(((group_first + j) % ring) * HD + i)]));
          double num = 0, den = 0;
          for (int j = 0; j < ratio; ++j) {
            const int64_t row = (group_first + j) % ring;
            const double e = std::exp(double(cs.score[size_t(row * HD + i)]) - smax);
            num += double(cs.kv[size_t(row * HD + i)]) * e;
            den += e;
          }
          pooled[i] = round_bf16(num / den);
        }
        rmsnorm(pooled, w.compressor.norm, HD, eps, pooled);
      }
    });
  }
  if (n_new == 0) return;
  // Step 19: index keys from the pre-RoPE latent; step 18: the FP4 compressed row; appended a chunk per thread.
  std::vector<float> keys(static_cast<size_t>(n_new * ID));
  backend_->linear({.x = latents.data(), .x_stride = HD, .n_tokens = n_new, .weight = &w.index_wk, .row_begin = 0, .n_rows = ID,
                    .epilogue = Epilogue::kBf16, .bias = nullptr, .out = keys.data(), .out_stride = ID});
  for_each_chunk(*backend_, batch, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = token_row[size_t(t)];
      if (r < 0) continue;
      const int64_t j = latent_row[size_t(r)];
      float* key = &keys[size_t(r * ID)];
      rmsnorm(key, w.index_k_norm, ID, eps, key);
      rope.apply(key + ID - RD, j * ratio, false);
      qdq_fp4_pow2_v41(key, ID, 32);
      float* row = &latents[size_t(r * HD)];
      rope.apply(row + HD - RD, j * ratio, false);
      qdq_fp4_e4m3_scale(row, HD, 16);
      LayerState& ls = batch.states[size_t(batch.chunk[size_t(t)])]->layers[size_t(layer)];
      DI_CHECK(ls.compressor.n_rows() == j && ls.index_compressor.n_rows() == j);
      ls.compressor.append_row(row);
      ls.index_compressor.append_row(key);
    }
  });
}

void Model::project_qkv_v41(const BlockWeights& w, const RopeTable& rope, std::span<const int64_t> positions,
                            MhcFront& front, QkvV41& out, std::span<const LinearParams> with_u,
                            const LinearWeight* index_wq_b, float* iq, bool keep_q) {
  const ModelConfig& c = config_;
  const int64_t T = int64_t(positions.size()), D = c.dim, H = c.n_heads, HD = c.head_dim, RD = c.rope_head_dim;
  const int64_t QL = c.q_lora_rank;
  const double eps = c.norm_eps_value();
  const std::vector<float>& uq = front.uq();  // u's QDQ once the front has run, below
  std::vector<float> qr(static_cast<size_t>(T * QL));
  out.q.resize(size_t(T * H * HD));
  out.kv.resize(size_t(T * HD));
  std::vector<LinearParams> projections = {  // independent: one batch (one wait on a GPU)
      {.x = uq.data(), .x_stride = D, .n_tokens = T, .weight = &w.wq_a, .row_begin = 0, .n_rows = QL,
       .epilogue = Epilogue::kBf16, .bias = nullptr, .out = qr.data(), .out_stride = QL, .x_e4m3_block = c.act_block},
      {.x = uq.data(), .x_stride = D, .n_tokens = T, .weight = &w.wkv, .row_begin = 0, .n_rows = HD,
       .epilogue = Epilogue::kBf16, .bias = nullptr, .out = out.kv.data(), .out_stride = HD, .x_e4m3_block = c.act_block},
  };
  projections.insert(projections.end(), with_u.begin(), with_u.end());
  out.qr_quantized.resize(size_t(T * QL));
  std::vector<LinearParams> q_ops = {
      {.x = out.qr_quantized.data(), .x_stride = QL, .n_tokens = T, .weight = &w.wq_b, .row_begin = 0, .n_rows = H * HD,
       .epilogue = Epilogue::kBf16, .bias = nullptr, .out = out.q.data(), .out_stride = H * HD, .x_e4m3_block = c.act_block}};
  if (index_wq_b) {  // step 20, on the same input
    q_ops.push_back({.x = out.qr_quantized.data(), .x_stride = QL, .n_tokens = T, .weight = index_wq_b, .row_begin = 0,
                     .n_rows = index_wq_b->n_out, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = iq,
                     .out_stride = index_wq_b->n_out, .x_e4m3_block = c.act_block});
  }
  // A backend that keeps arrays takes step 13 into the chain and keeps q (the attention reads it there).
  // So does the indexer's query's steps 21-22.
  HeadRope q_rope;
  IndexQueryWork index_q;
  const bool keep = keep_q && backend_->keeps_arrays();
  if (keep) {
    rope.cos_sin_rows(positions, out.cos_sin);
    q_rope = {.n_heads = H, .head_dim = HD, .rope_dim = RD, .cos_sin = out.cos_sin.data(), .inverse = false, .normalize = false, .eps = 0};
    index_q = {.n_heads = c.index_n_heads, .head_dim = c.index_head_dim, .rope_dim = RD, .cos_sin = out.cos_sin.data(), .v41 = true};
  }
  // The mHC side's first half, the projections of u, then qr's norm and QDQ, then the projections of qr: one call
  // where a backend runs them together.
  out.q_kept = front.run_with({.first = projections, .mid = qr.data(), .n_tokens = T, .mid_width = QL, .mid_norm = w.q_norm, .eps = eps,
                               .mid_q = out.qr_quantized.data(), .qdq_block = c.act_block, .v41 = c.is_v41(), .second = q_ops,
                               .q_rope = keep ? &q_rope : nullptr, .index_q = keep && index_wq_b ? &index_q : nullptr,
                               .mid_back = false}) &&  // qr and its QDQ are read only as q_ops' x
               keep;
  // Ranges of query heads; a token's last range also takes its kv row.
  for_token_ranges(*backend_, T, H, kHeadRange, [&](int64_t t, int64_t h0, int64_t h1) {
    const int64_t pos = positions[size_t(t)];
    if (!out.q_kept) rope.apply_heads(&out.q[size_t((t * H + h0) * HD + HD - RD)], h1 - h0, HD, pos, false);  // step 13
    if (h1 < H) return;
    float* kvt = &out.kv[size_t(t * HD)];
    rmsnorm(kvt, w.kv_norm, HD, eps, kvt);  // step 14
    rope.apply(kvt + HD - RD, pos, false);
    qdq_fp8_v41(kvt, HD, 32);
  });
}

void Model::attend_v41(const BlockWeights& w, const RopeTable& rope, const float* q, std::span<const int64_t> positions,
                       std::span<const float* const> rows, std::span<const int64_t> row_begin, float* o,
                       std::span<const PackedSlot> packed, const KeptAttention* kept,
                       std::span<const KeptSelectionSlots> kept_selections, std::span<const char> rows_unshared,
                       std::span<const PackedRowRun> window_rings) {
  const ModelConfig& c = config_;
  const int64_t H = c.n_heads, HD = c.head_dim, RD = c.rope_head_dim, n = int64_t(positions.size());
  DI_CHECK(int64_t(row_begin.size()) == n + 1);
  DI_CHECK(packed.empty() || packed.size() == rows.size());
  DI_CHECK(kept_selections.empty() || int64_t(kept_selections.size()) == n);
  DI_CHECK(rows_unshared.empty() || int64_t(rows_unshared.size()) == n);
  DI_CHECK(window_rings.empty() || int64_t(window_rings.size()) == n);
  std::vector<const float*> slots;
  std::vector<PackedSlot> packed_slots;
  std::vector<int64_t> slot_begin;
  for (int64_t i = 0; i < n; ++i) {
    slot_begin.push_back(int64_t(slots.size()));
    const size_t b = size_t(row_begin[size_t(i)]), e = size_t(row_begin[size_t(i + 1)]);
    slots.insert(slots.end(), rows.begin() + b, rows.begin() + e);
    if (!packed.empty()) packed_slots.insert(packed_slots.end(), packed.begin() + b, packed.begin() + e);
    while ((int64_t(slots.size()) - slot_begin.back()) % 64) {
      slots.push_back(nullptr);
      if (!packed.empty()) packed_slots.push_back({});
    }
  }
  slot_begin.push_back(int64_t(slots.size()));
  const double softmax_scale = 1.0 / std::sqrt(double(HD));  // a double constant in the V4.1 contract
  std::vector<SparseAttentionParams> ps;
  const std::vector<HeadRope> out_rope = kept ? inverse_head_ropes(kept->cos_sin, n, H, HD, RD) : std::vector<HeadRope>();  // step 29
  for (int64_t i = 0; i < n; ++i) {
    ps.push_back({.q = q + i * H * HD, .n_heads = H, .head_dim = HD, .slots = slots.data() + slot_begin[size_t(i)],
                  .n_slots = slot_begin[size_t(i + 1)] - slot_begin[size_t(i)], .sink = w.attn_sink,
                  .softmax_scale = softmax_scale, .block_running_max = false, .out = o + i * H * HD,
                  .packed = packed.empty() ? nullptr : packed_slots.data() + slot_begin[size_t(i)],  // step 28
                  .q_kept = kept != nullptr, .out_rope = kept ? &out_rope[size_t(i)] : nullptr,
                  .out_kept_array = kept ? kept->o_array : nullptr, .out_kept_floats = kept ? kept->o_floats : 0,
                  .kept_selection = kept_selections.empty() || kept_selections[size_t(i)].n == 0 ? nullptr : &kept_selections[size_t(i)],
                  .rows_unshared = !rows_unshared.empty() && rows_unshared[size_t(i)] != 0,
                  .window_ring = window_rings.empty() || window_rings[size_t(i)].n_rows == 0 ? nullptr : &window_rings[size_t(i)]});
  }
  backend_->sparse_attentions(ps);
  if (kept) return;
  backend_->for_rows(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      rope.apply_heads(o + i * H * HD + HD - RD, H, HD, positions[size_t(i)], true);  // step 29
    }
  });
}

void Model::output_projection_v41(const BlockWeights& w, const std::vector<float>& o, int64_t n_tokens, MhcBack& back,
                                  bool o_kept) {
  const ModelConfig& c = config_;
  const int64_t T = n_tokens, D = c.dim, H = c.n_heads, HD = c.head_dim, G = c.o_groups, OL = c.o_lora_rank;
  const int64_t group_width = H * HD / G;
  thread_local std::vector<float> z;  // reused from call to call, and kept until the side runs the chain
  z.resize(size_t(T * G * OL));
  std::vector<LinearParams> wo_a(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) {  // step 30: grouped wo_a on bf16 values, the groups as one batch
    wo_a[size_t(g)] = {.x = o.data() + g * group_width, .x_stride = H * HD, .n_tokens = T, .weight = &w.wo_a, .row_begin = g * OL,
                       .n_rows = OL, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = z.data() + g * OL, .out_stride = G * OL};
  }
  // Step 31 (z's QDQ) between them; one call where the backend runs the chain whole, and that with the FFN side
  // where it runs the block's tail whole (the side runs it).
  back.set_output_chain({.first = wo_a, .mid = z.data(), .n_tokens = T, .mid_width = G * OL, .qdq_block = c.act_block,
                         .v41 = c.is_v41(),
                         .second = {.x = z.data(), .x_stride = G * OL, .n_tokens = T, .weight = &w.wo_b, .row_begin = 0,
                                    .n_rows = D, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = back.out().data(),
                                    .out_stride = D, .x_e4m3_block = c.act_block},
                         .x_kept = o_kept});
}

// Query tokens whose index scores are held at once (their selections run on the backend's threads).
constexpr int64_t kSelectionBlock = 256;
// Calls of at most this many tokens (decode steps) keep q and the attention's output on a backend that keeps arrays;
// a prefill's large blocks (at 4096 tokens, 512 MB each for V4.1-Flash) go to the host as before.
constexpr int64_t kKeptAttentionTokens = 256;
static_assert(kKeptAttentionTokens <= kSelectionBlock, "a call that keeps its selections selects in one block");

void Model::attention_v41(int layer, Batch& batch, V41Scratch& scratch, MhcFront& front, MhcBack& back) {
  const ModelConfig& c = config_;
  const BlockWeights& w = weights_.layers[size_t(layer)];
  const RopeTable& rope = layer_rope_[size_t(layer)];
  const int64_t T = batch.n_tokens(), D = c.dim, H = c.n_heads, HD = c.head_dim, RD = c.rope_head_dim;
  const int64_t W = c.window_size;
  const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
  const int ratio = c.compress_ratio(layer);
  // The projections go to the backend as one chain with the mHC side's first half (project_qkv_v41): those of u
  // (wq_a, wkv, the KV source's compressor, the indexer's weights projection), then those of the quantised q
  // latent (wq_b, the indexer's wq_b); one wait on a GPU that runs the chain whole, three otherwise.
  const bool kv_source = ratio != 0 && c.is_kv_source(layer) && scratch.kv_source_done_layer != layer;
  const bool index_source = ratio != 0 && c.is_index_source(layer);
  const std::vector<float>& u = front.u();  // u once project_qkv_v41 has run the front
  std::vector<LinearParams> with_u;
  KvSourceProjections kv_source_projected;
  if (kv_source) add_kv_source_projections(layer, u, T, kv_source_projected, with_u);
  // iq is reused from call to call (thread_local, as qkv below): a backend may keep it, named by its address. Named
  // through a reference: the lambdas below run on the backend's threads too.
  thread_local std::vector<float> iq_buffer;
  std::vector<float>& iq = iq_buffer;
  std::vector<float> iw;
  if (index_source) {
    DI_CHECK(w.index_wq_b.n_out == IH * ID);
    iq.resize(size_t(T * IH * ID));
    iw.resize(size_t(T * IH));
    with_u.push_back({.x = u.data(), .x_stride = D, .n_tokens = T, .weight = &w.index_weights_proj, .row_begin = 0,
                      .n_rows = IH, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = iw.data(), .out_stride = IH});  // step 23
  }
  // The [T, H, HD] query and output rows in buffers reused from call to call (thread_local, as block_buffers;
  // no call below re-enters attention_v41), so a long prefill does not allocate and fault in hundreds of MB
  // of them per layer.
  thread_local QkvV41 qkv;
  project_qkv_v41(w, rope, batch.pos, front, qkv, with_u, index_source ? &w.index_wq_b : nullptr, iq.data(),
                  T <= kKeptAttentionTokens);
  const std::vector<float>& q = qkv.q;
  const std::vector<float>& kv = qkv.kv;

  const int owner = ratio == 0 ? -1 : latest_layer(layer, [&](int l) { return c.is_kv_source(l); });
  if (kv_source) kv_source_update_v41(layer, batch, scratch, kv_source_projected);
  if (index_source) {  // steps 20-27
    std::vector<float> scores;
    const double index_scale = 1.0 / std::sqrt(double(ID) * double(IH));
    const bool is_candidate_source = layer == c.candidate_source_layer;
    const bool uses_candidates = c.candidate_source_layer >= 0 && layer > c.candidate_source_layer;
    // The per-token query preparation on the backend's threads; then, block by block, the scores (one
    // index_scores_batch for the block's tokens) and the selections (on the backend's threads again: each token
    // reads only its own scores and an earlier layer's candidates).
    const bool iq_kept = qkv.q_kept;  // (qkv is thread_local: the lambda runs on the backend's threads too)
    backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (!iq_kept) {  // (kept: done on the backend)
          rope.apply_heads(&iq[size_t(t * IH * ID + ID - RD)], IH, ID, batch.pos[size_t(t)], false);
          for (int64_t hh = 0; hh < IH; ++hh) qdq_fp4_pow2_v41(&iq[size_t((t * IH + hh) * ID)], ID, 32);
        }
        for (int64_t hh = 0; hh < IH; ++hh) iw[size_t(t * IH + hh)] = round_bf16(double(iw[size_t(t * IH + hh)]) * index_scale);
      }
    });
    // Index keys decoded once per block and key cache (the cache a token scores against can vary by token).
    IndexKeySet index_keys(backend_->takes_packed_rows());
    std::vector<int64_t> score_begin;  // a block's token b0 + i has its scores at [score_begin[i], score_begin[i + 1])
    std::vector<IndexQuery> score_queries;
    for (int64_t b0 = 0; b0 < T; b0 += kSelectionBlock) {  // blocks bound the scores' memory (T^2 / 2 at ratio 1)
      const int64_t b1 = std::min(T, b0 + kSelectionBlock);
      score_begin.assign(1, 0);
      for (int64_t t = b0; t < b1; ++t) score_begin.push_back(score_begin.back() + (batch.pos[size_t(t)] + 1) / ratio);
      scores.resize(size_t(score_begin.back()));
      // Which key cache each token scores against (spec §7.5): its KV owner's, or the one the reference last
      // published (see published_keys_layer). The block's tokens go to the backend as one index_scores_batch,
      // each key cache decoded once up to the most keys its tokens read.
      auto keys_layer_of = [&](int64_t t) {
        return options_.index_owner_keys ? owner : published_keys_layer(layer, batch.pos[size_t(t)], batch.is_prompt[size_t(t)] != 0,
                                                                       batch.layout_tokens[size_t(t)]);
      };
      score_queries.resize(size_t(b1 - b0));
      for (int64_t t = b0; t < b1; ++t) {
        const int64_t n_visible = score_begin[size_t(t - b0 + 1)] - score_begin[size_t(t - b0)];
        const CompressorState& keys = batch.states[size_t(batch.chunk[size_t(t)])]->layers[size_t(keys_layer_of(t))].index_compressor;
        DI_CHECK(keys.n_rows() >= n_visible);
        const IndexScoreParams score = {.q = &iq[size_t(t * IH * ID)], .weights = &iw[size_t(t * IH)], .n_keys = n_visible,
                                        .scores = scores.data() + score_begin[size_t(t - b0)], .q_kept = qkv.q_kept};
        score_queries[size_t(t - b0)] = {&keys.row_format, &keys.rows, &keys, {.score = score}};
      }
      // Steps 25-27 with the scores where the backend selects: the candidate source's blocks, or the mask of the
      // candidates, and the top-k, as the loop below makes them (the top-k sorted here).
      const bool masked = uses_candidates && scratch.have_candidates && !is_candidate_source;
      // Kept on the backend (Backend::kept_selection_extra_rows) where the candidate source's candidates need not come
      // back, and where every layer that reuses the selections (up to the next index source) has this layer's ratio:
      // each hands the backend its own KV owner's rows, which the selections name only at the same ratio.
      bool keep = qkv.q_kept && backend_->keeps_selections() && !is_candidate_source;
      for (int l = layer + 1; l < c.n_layers && !c.is_index_source(l); ++l) {
        keep = keep && (c.compress_ratio(l) == 0 || c.compress_ratio(l) == ratio);
      }
      int64_t extra_rows = 0;  // handed over where kept, beyond the selected
      for (int64_t t = b0; t < b1; ++t) {
        IndexSelectParams& q = score_queries[size_t(t - b0)].select;
        std::vector<int64_t>& sel = scratch.selection[size_t(t)];
        sel.resize(size_t(std::min({int64_t(c.index_topk), batch.layout_tokens[size_t(t)] / ratio, q.score.n_keys})));
        q.n_select = int64_t(sel.size());
        q.selected = sel.data();
        extra_rows += q.score.n_keys - q.n_select;
      }
      keep = keep && extra_rows <= backend_->kept_selection_extra_rows();
      for (int64_t t = b0; t < b1; ++t) {
        IndexSelectParams& q = score_queries[size_t(t - b0)].select;
        q.masked = masked;
        q.keep_blocks = masked ? std::span<const int64_t>(scratch.candidates[size_t(t)]) : std::span<const int64_t>();
        q.block_size = c.candidate_block_size;
        q.keep_selected = keep;
        if (is_candidate_source) {
          std::vector<int64_t>& candidates = scratch.candidates[size_t(t)];
          const int64_t n_blocks = (q.score.n_keys + c.candidate_block_size - 1) / c.candidate_block_size;
          candidates.resize(size_t(std::min<int64_t>(c.candidate_topk_blocks, n_blocks)));
          q.n_candidates = int64_t(candidates.size());
          q.candidates = candidates.data();
        }
      }
      const bool selected_on_backend = index_keys.select(*backend_, score_queries, IH, ID);
      scratch.selection_kept = keep && selected_on_backend;  // (sorted on the backend: KeptSelectionSlots::ascending)
      if (scratch.selection_kept) continue;
      if (selected_on_backend) {
        backend_->for_rows(b1 - b0, [&](int64_t i0, int64_t i1) {
          for (int64_t t = b0 + i0; t < b0 + i1; ++t) {
            std::vector<int64_t>& sel = scratch.selection[size_t(t)];
            std::sort(sel.begin(), sel.end());  // V4.1 lists the top-k in ascending position order
          }
        });
        continue;
      }
      backend_->for_rows(b1 - b0, [&](int64_t i0, int64_t i1) {
        std::vector<int64_t> order, block_order;
        std::vector<float> block_score;
        for (int64_t t = b0 + i0; t < b0 + i1; ++t) {
          const int64_t pos = batch.pos[size_t(t)];
          const int64_t n_visible = (pos + 1) / ratio;
          const int64_t n_layout = batch.layout_tokens[size_t(t)] / ratio;
          const int64_t n_fill = std::min({int64_t(c.index_topk), n_layout, n_visible});
          std::vector<int64_t>& sel = scratch.selection[size_t(t)];
          sel.clear();
          if (n_visible == 0) {
            if (is_candidate_source) scratch.candidates[size_t(t)].clear();
            continue;
          }
          float* token_scores = &scores[size_t(score_begin[size_t(t - b0)])];
          auto better = [](const float* s, int64_t a, int64_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; };
          if (is_candidate_source) {  // step 25: blocks of rows, the newest forced in, top-k blocks kept
            const int64_t B = c.candidate_block_size, n_blocks = (n_visible + B - 1) / B;
            block_score.assign(size_t(n_blocks), -INFINITY);
            for (int64_t j = 0; j < n_visible; ++j) block_score[size_t(j / B)] = std::max(block_score[size_t(j / B)], token_scores[j]);
            block_score[size_t((n_visible - 1) / B)] = INFINITY;
            block_order.resize(size_t(n_blocks));
            std::iota(block_order.begin(), block_order.end(), 0);
            const int64_t n_keep = std::min<int64_t>(c.candidate_topk_blocks, n_blocks);
            std::partial_sort(block_order.begin(), block_order.begin() + n_keep, block_order.end(),
                              [&](int64_t a, int64_t b) { return better(block_score.data(), a, b); });
            scratch.candidates[size_t(t)].assign(block_order.begin(), block_order.begin() + n_keep);
          } else if (uses_candidates && scratch.have_candidates) {  // step 26: reindex inside the candidates
            std::vector<char> keep(static_cast<size_t>((n_visible + c.candidate_block_size - 1) / c.candidate_block_size), 0);
            for (int64_t b : scratch.candidates[size_t(t)]) if (b < int64_t(keep.size())) keep[size_t(b)] = 1;
            for (int64_t j = 0; j < n_visible; ++j) if (!keep[size_t(j / c.candidate_block_size)]) token_scores[j] = -INFINITY;
          }
          order.resize(size_t(n_visible));
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + n_fill, order.end(),
                            [&](int64_t a, int64_t b) { return better(token_scores, a, b); });
          sel.assign(order.begin(), order.begin() + n_fill);
          std::sort(sel.begin(), sel.end());  // V4.1 lists the top-k in ascending position order
        }
      });
    }
    if (is_candidate_source) {  // step 25 publishes candidates once a token of the call had a visible row
      for (int64_t t = 0; t < T; ++t) {
        if ((batch.pos[size_t(t)] + 1) / ratio > 0) scratch.have_candidates = true;
      }
    }
  }

  // Step 28: window rows + the selected compressed rows of the KV owner.
  thread_local std::vector<float> o;
  o.resize(size_t(T * H * HD));  // every token's row is written below (on the backend where q is kept there)
  const KeptAttention kept{qkv.cos_sin.data(), o.data(), T * H * HD};
  // The tokens' row lists go to attend_v41 together, those of every chunk in one call (a batched decode step's
  // sequences: one wait on a GPU instead of one per sequence); earlier when the rows decoded for the pending
  // tokens pass kPendingDecodedRows, after which the decode caches start over.
  AttentionSlotRows rows(backend_->takes_packed_rows());
  RowDecodeCache window_rows, compressed_rows;  // per chunk: the rows its tokens read, each decoded once
  // Selections kept on the backend (scratch.selection_kept): each token's compressed rows built there, from every
  // row its selection may name.
  const bool selection_kept = ratio != 0 && scratch.selection_kept;
  std::vector<KeptSelectionSlots> kept_selections(selection_kept ? size_t(T) : 0);
  std::vector<std::vector<PackedRowRun>> kept_selection_runs(kept_selections.size());
  std::vector<int64_t> row_begin{0};
  std::vector<char> rows_unshared(static_cast<size_t>(T));  // a token alone in its chunk: no other token of the call reads its rows
  for (int64_t t = 0; t < T; ++t) rows_unshared[size_t(t)] = batch.n_chunk_tokens[size_t(batch.chunk[size_t(t)])] == 1;
  // Such a token hands its packed window rows over as its ring too, once every slot has been written.
  std::vector<PackedRowRun> window_rings(backend_->takes_packed_rows() ? size_t(T) : 0);
  int64_t first_pending = 0;
  auto attend_pending = [&](int64_t t_end) {
    if (t_end == first_pending) return;
    window_rows.decode_reserved(*backend_);
    compressed_rows.decode_reserved(*backend_);
    KeptAttention pending_kept = kept;
    if (qkv.q_kept) pending_kept.cos_sin += first_pending * RD;
    attend_v41(w, rope, &q[size_t(first_pending * H * HD)],
               std::span<const int64_t>(batch.pos).subspan(size_t(first_pending), size_t(t_end - first_pending)), rows.rows(),
               row_begin, &o[size_t(first_pending * H * HD)], rows.packed(), qkv.q_kept ? &pending_kept : nullptr,
               selection_kept ? std::span<const KeptSelectionSlots>(kept_selections).subspan(size_t(first_pending), size_t(t_end - first_pending))
                              : std::span<const KeptSelectionSlots>(),
               std::span<const char>(rows_unshared).subspan(size_t(first_pending), size_t(t_end - first_pending)),
               window_rings.empty() ? std::span<const PackedRowRun>()
                                    : std::span<const PackedRowRun>(window_rings).subspan(size_t(first_pending), size_t(t_end - first_pending)));
    rows.clear();
    row_begin.assign(1, 0);
    first_pending = t_end;
  };
  int bound_chunk = -1;
  for (int64_t t = 0; t < T; ++t) {
    const int ci = batch.chunk[size_t(t)];
    const SequenceState& seq = *batch.states[size_t(ci)];
    const LayerState& ls = seq.layers[size_t(layer)];
    if (ci != bound_chunk) {  // the rows decoded for earlier chunks stay valid (RowDecodeCache::bind)
      bound_chunk = ci;
      window_rows.bind(ls.window_format, ls.window.data(), ls.ring_slots);
      if (ratio != 0) {
        const CompressorState& cmp = seq.layers[size_t(owner)].compressor;
        compressed_rows.bind(cmp.row_format, cmp.rows);
      }
    }
    const int64_t pos = batch.pos[size_t(t)], chunk_first_pos = batch.first_pos[size_t(ci)];
    const int64_t chunk_first_token = batch.first_token[size_t(ci)];
    if (!window_rings.empty() && rows_unshared[size_t(t)]) window_rings[size_t(t)] = whole_window_ring(ls);
    // Window rows an SWA bounded replay never computed are left out (window_valid_from; 0 when exact).
    for (int64_t p = std::max<int64_t>({0, pos - W + 1, ls.window_valid_from}); p <= pos; ++p) {
      if (p >= chunk_first_pos) {
        rows.push(&kv[size_t((chunk_first_token + p - chunk_first_pos) * HD)]);
      } else {
        const int64_t slot = ls.slot(p);
        rows.push_cached(window_rows, slot, ls.window.data() + slot * ls.window_format.row_bytes, ls.window_format,
                         ls.window_stamps[size_t(slot)]);
      }
    }
    if (selection_kept) {
      const CompressorState& cmp = seq.layers[size_t(owner)].compressor;
      const int64_t n_select = int64_t(scratch.selection[size_t(t)].size());
      const int64_t n_rows = std::min(cmp.n_rows(), (pos + 1) / ratio);
      kept_selection_runs[size_t(t)] = packed_row_runs(cmp.rows, n_rows);
      kept_selections[size_t(t)] = {.selected = scratch.selection[size_t(t)].data(), .n = n_select,
                                    .at = int64_t(rows.size()) - row_begin.back(), .ascending = true, .format = &cmp.row_format,
                                    .runs = kept_selection_runs[size_t(t)], .n_rows = n_rows};
      for (int64_t j = 0; j < n_select; ++j) rows.push(nullptr);
    } else if (ratio != 0) {
      const CompressorState& cmp = seq.layers[size_t(owner)].compressor;
      for (int64_t j : scratch.selection[size_t(t)]) {
        DI_CHECK(j < cmp.n_rows());
        rows.push_cached(compressed_rows, j, cmp.rows.row(j), cmp.row_format, cmp.rows.stamp(j));
      }
    }
    row_begin.push_back(int64_t(rows.size()));
    if (window_rows.n_decoded() + compressed_rows.n_decoded() > kPendingDecodedRows) {
      attend_pending(t + 1);
      window_rows.clear();
      compressed_rows.clear();
    }
  }
  attend_pending(T);
  for_each_chunk(*backend_, batch, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      batch.states[size_t(batch.chunk[size_t(t)])]->layers[size_t(layer)].store_window_row(batch.pos[size_t(t)], &kv[size_t(t * HD)]);
    }
  });
  output_projection_v41(w, o, T, back, qkv.q_kept);
}

}  // namespace deepinfer
