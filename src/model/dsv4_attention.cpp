// V4 attention: latent MQA with per-head q norm, the 128-slot window ring, the compressors (ratio 4
// overlapping, ratio 128 non-overlapping), the lightning indexer and sparse attention with sink
// (spec §3.3-3.6; golden op table A1-A12, C1-C6, I1-I10, AT0-AT6).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtypes.h"
#include "model/kv_decode_cache.h"
#include "model/linear_chain.h"
#include "model/model_internal.h"

namespace deepinfer {

namespace {

LayerState& layer_state(SequenceState* s, bool is_mtp, int layer_index) {
  return is_mtp ? s->mtp_layers[size_t(layer_index)] : s->layers[size_t(layer_index)];
}

// C3-C6 for group g of one compressor whose ring holds the group's rows (and for ratio 4 the previous group's).
void pool_group(CompressorState& cs, int64_t g, int64_t d, const uint16_t* norm, const RopeTable& rope,
                int rope_dim, bool is_index, double eps) {
  const int r = cs.ratio, ring = cs.ring_rows();
  std::vector<float> pooled(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) {
    // Candidates: ratio 128 -> column i of the group's rows; ratio 4 -> column i of the previous group's
    // rows (A half) and column d + i of this group's rows (B half). g = 0 has no previous group.
    double score[256], kv[256];
    int n = 0;
    if (r == 4 && g > 0) {
      for (int j = 0; j < r; ++j) {
        const int64_t slot = ((g - 1) * r + j) % ring;
        score[n] = cs.score[size_t(slot * cs.width + i)];
        kv[n++] = cs.kv[size_t(slot * cs.width + i)];
      }
    }
    const int64_t col = r == 4 ? d + i : i;
    for (int j = 0; j < r; ++j) {
      const int64_t slot = (g * r + j) % ring;
      score[n] = cs.score[size_t(slot * cs.width + col)];
      kv[n++] = cs.kv[size_t(slot * cs.width + col)];
    }
    double smax = -INFINITY;
    for (int j = 0; j < n; ++j) smax = std::max(smax, score[j]);
    double denom = 0, num = 0;
    for (int j = 0; j < n; ++j) {
      const double e = std::exp(score[j] - smax);
      denom += e;
      num += e * kv[j];
    }
    pooled[size_t(i)] = round_bf16(num / denom);  // C3: one rounding
  }
  rmsnorm(pooled.data(), norm, d, eps, pooled.data());        // C4
  rope.apply(pooled.data() + d - rope_dim, g * r, false);     // C5: first position of the group
  if (is_index) {                                             // C6
    hadamard_128(pooled.data());
    qdq_fp4(pooled.data(), d, 32);
  } else {
    qdq_fp8(pooled.data(), d - rope_dim, 64);
  }
  DI_CHECK(cs.n_rows() == g);
  cs.append_row(pooled.data());
}

}  // namespace

// C1 and C2 of one compressor for a call's tokens: ops for the caller to hand to the backend in a batch with
// the layer's other projections of u, and their outputs.
struct CompressorProjections {
  int64_t width = 0;
  std::vector<float> kv, score, ape;  // [T, width] each

  // pos: the call's token positions; u: [T, dim].
  void add_ops(const CompressorWeights& w, int ratio, int64_t d, const std::vector<int64_t>& pos, const std::vector<float>& u,
               int64_t dim, std::vector<LinearParams>& ops) {
    const int64_t T = int64_t(pos.size());
    width = (ratio == 4 ? 2 : 1) * d;
    kv.resize(size_t(T * width));
    score.resize(size_t(T * width));
    ape.resize(size_t(T * width));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(w.ape + (pos[size_t(t)] % ratio) * width, width, &ape[size_t(t * width)]);
    }
    ops.push_back({u.data(), dim, T, &w.wkv, 0, width, Epilogue::kF32, nullptr, kv.data(), width});                // C1
    ops.push_back({u.data(), dim, T, &w.wgate, 0, width, Epilogue::kF32AddBias, ape.data(), score.data(), width});  // C2
  }
};

void Model::compressor_update(const CompressorWeights& w, const RopeTable& rope, int ratio, int64_t d,
                                  bool is_index, const Batch& batch, bool is_mtp, int layer_index,
                                  const CompressorProjections& projected) {
  const ModelConfig& c = config_;
  const int64_t width = projected.width;
  for_each_chunk(*backend_, batch, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      LayerState& ls = layer_state(batch.states[size_t(batch.chunk[size_t(t)])], is_mtp, layer_index);
      CompressorState& cs = is_index ? ls.index_compressor : ls.compressor;
      const int64_t pos = batch.pos[size_t(t)];
      const int64_t slot = pos % cs.ring_rows();
      std::copy_n(&projected.kv[size_t(t * width)], width, &cs.kv[size_t(slot * width)]);
      std::copy_n(&projected.score[size_t(t * width)], width, &cs.score[size_t(slot * width)]);
      if ((pos + 1) % ratio == 0) pool_group(cs, pos / ratio, d, w.norm, rope, c.rope_head_dim, is_index, double(float(c.norm_eps)));
    }
  });
}

// The query side runs in blocks of kAttentionBlock tokens: a prefill's per-token query rows (H * HD floats,
// 128 KB for V4-Flash) and attention outputs would otherwise take two 512 MB buffers per layer at 4096 tokens,
// which the heap has to grow to (and fault in) the first time: with them, a 4096-token prefill of the
// benchmark model spent 12.0 of its 60.2 s outside the backend's ops (`bench --op-times`), 2.9 of 47.1 s
// without. Every op below is per token (the linear kernels' sums never depend on the token count), so the
// blocks change no result.
constexpr int64_t kAttentionBlock = 256;

// Per-block buffers, reused from call to call (thread_local as block_buffers: one model call per thread), and the
// call's projections of u: fresh vectors were zero-filled in every layer (~6 MB a ratio-4 layer at batch 256), though
// every element is written before it is read.
struct AttentionBuffers {
  std::vector<float> q, iq, o, z;
  std::vector<float> qr, kv, qrq, index_w;  // [T, QL], [T, HD], [T, QL], [T, IH]
  CompressorProjections compressed, index_compressed;
};

std::vector<LinearParams> Model::query_projections(const BlockWeights& w, const float* qrq, int64_t n_tokens, float* q,
                                                   float* iq) const {
  const ModelConfig& c = config_;
  const int64_t H = c.n_heads, HD = c.head_dim, QL = c.q_lora_rank, IH = c.index_n_heads, ID = c.index_head_dim;
  std::vector<LinearParams> ops = {{qrq, QL, n_tokens, &w.wq_b, 0, H * HD, Epilogue::kBf16, nullptr, q, H * HD, c.act_block}};  // A3
  if (iq) ops.push_back({qrq, QL, n_tokens, &w.index_wq_b, 0, IH * ID, Epilogue::kBf16, nullptr, iq, IH * ID, c.act_block});  // I1
  return ops;
}

void Model::attention(const BlockWeights& w, const RopeTable& rope, Batch& batch, bool is_mtp, int layer_index,
                          MhcFront& front, MhcBack& back) {
  const ModelConfig& c = config_;
  const int64_t T = batch.n_tokens(), D = c.dim, H = c.n_heads, HD = c.head_dim, RD = c.rope_head_dim;
  const int64_t NOPE = HD - RD, QL = c.q_lora_rank, G = c.o_groups, OL = c.o_lora_rank, W = c.window_size;
  const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
  const int ratio = w.compress_ratio;
  const double eps = double(float(c.norm_eps));

  const std::vector<float>& u = front.u();    // u and its QDQ (V4: blocks of 128) once the front has run, below
  const std::vector<float>& uq = front.uq();
  // Every projection of u (quantised or not) in one batch, one wait on a GPU: A1, A10, the compressors' C1 and
  // C2, and the indexer's I5 for all the call's tokens.
  thread_local AttentionBuffers buf;
  std::vector<float>& qr = buf.qr;
  std::vector<float>& kv = buf.kv;
  std::vector<float>& index_w_all = buf.index_w;
  qr.resize(size_t(T * QL));
  kv.resize(size_t(T * HD));
  std::vector<LinearParams> projections = {
      {uq.data(), D, T, &w.wq_a, 0, QL, Epilogue::kBf16, nullptr, qr.data(), QL, c.act_block},  // A1
      {uq.data(), D, T, &w.wkv, 0, HD, Epilogue::kBf16, nullptr, kv.data(), HD, c.act_block},   // A10
  };
  CompressorProjections& compressed = buf.compressed;
  CompressorProjections& index_compressed = buf.index_compressed;
  if (ratio != 0) compressed.add_ops(w.compressor, ratio, HD, batch.pos, u, D, projections);
  if (ratio == 4) {
    index_compressed.add_ops(w.index_compressor, ratio, ID, batch.pos, u, D, projections);
    index_w_all.resize(size_t(T * IH));
    projections.push_back({u.data(), D, T, &w.index_weights_proj, 0, IH, Epilogue::kBf16, nullptr, index_w_all.data(), IH});  // I5
  }
  // A2 and qr's QDQ; with A3 (and I1) in the same chain where the call is one query block (a decode step), so a
  // backend that chains them makes one call of it.
  std::vector<float>& qrq = buf.qrq;
  qrq.resize(size_t(T * QL));
  const bool q_in_chain = T <= kAttentionBlock;
  std::vector<LinearParams> q_ops;
  if (q_in_chain) {
    buf.q.resize(size_t(T * H * HD));
    if (ratio == 4) buf.iq.resize(size_t(T * IH * ID));
    q_ops = query_projections(w, qrq.data(), T, buf.q.data(), ratio == 4 ? buf.iq.data() : nullptr);
  }
  // A backend that keeps arrays (a GPU) takes q's A4-A9 into the chain and keeps q, then the attention reads it
  // there and keeps its output, rotated back (AT4), for the output projection: q and o never cross to the host.
  // The same for the indexer's query (I2-I4), which the index scores then read there.
  std::vector<float> cos_sin;  // [T, RD]: each token's angles
  HeadRope q_rope;
  IndexQueryWork index_q;
  if (q_in_chain && backend_->keeps_arrays()) {
    rope.cos_sin_rows(batch.pos, cos_sin);
    q_rope = {.n_heads = H, .head_dim = HD, .rope_dim = RD, .cos_sin = cos_sin.data(), .inverse = false, .normalize = true, .eps = eps};
    index_q = {.n_heads = IH, .head_dim = ID, .rope_dim = RD, .cos_sin = cos_sin.data(), .v41 = false};
  }
  // The mHC side's first half with the chain: one call where the backend runs them together.
  // qr and qrq are read afterwards only where A3 is not in the chain (ProjectionChainParams::mid_back).
  const bool q_kept = front.run_with({projections, qr.data(), T, QL, w.q_norm, eps, qrq.data(), c.act_block, false, q_ops,
                                      cos_sin.empty() ? nullptr : &q_rope, cos_sin.empty() || ratio != 4 ? nullptr : &index_q,
                                      !q_in_chain}) &&
                      !cos_sin.empty();
  const std::vector<HeadRope> out_rope = q_kept ? inverse_head_ropes(cos_sin.data(), T, H, HD, RD) : std::vector<HeadRope>();  // AT4
  // Every kv row of the call first: a token attends to the fresh rows of all earlier tokens of its chunk.
  backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* kvt = &kv[size_t(t * HD)];
      rmsnorm(kvt, w.kv_norm, HD, eps, kvt);  // A11
      qdq_fp8(kvt, NOPE, 64);                 // A12
      rope.apply(kvt + NOPE, batch.pos[size_t(t)], false);
    }
  });

  // Compressors see every position of this call before any attention reads them.
  if (ratio != 0) compressor_update(w.compressor, rope, ratio, HD, false, batch, is_mtp, layer_index, compressed);
  if (ratio == 4) compressor_update(w.index_compressor, rope, ratio, ID, true, batch, is_mtp, layer_index, index_compressed);

  const float softmax_scale = float(1.0 / std::sqrt(double(HD)));
  const double index_scale = double(float(1.0 / std::sqrt(double(ID) * double(IH))));
  const int64_t group_width = H * HD / G;
  AttentionSlotRows slots(backend_->takes_packed_rows());  // the pending tokens' slot lists, one after another
  std::vector<int64_t> slot_begin;           // where each pending token's list starts
  std::vector<SparseAttentionParams> pending;
  std::vector<float> scores;                 // a block's index scores, token i's at score_at[i]
  std::vector<int64_t> score_at;
  std::vector<IndexQuery> score_queries;
  std::vector<int64_t> selection, select_at;  // I10 (by the backend or on the host's threads): token i's at select_at[i]
  bool selected_on_backend = false;
  bool selection_kept = false;  // and kept there (Backend::keeps_selections): the attention builds its slots there
  std::vector<KeptSelectionSlots> pending_kept;          // the pending tokens' (ratio 4, with selection_kept)
  std::vector<std::vector<PackedRowRun>> pending_runs;  // and the rows they may name, a vector kept per pending token
  // A pending decode token's window ring, whole (SparseAttentionParams::window_ring; n_rows 0: none).
  std::vector<PackedRowRun> pending_rings;
  // I10's count for token t: the index_topk best of its visible keys, at most its layout's slots.
  auto index_fill = [&](const Batch& b, int64_t t) {
    return std::min({int64_t(c.index_topk), b.layout_tokens[size_t(t)] / 4, (b.pos[size_t(t)] + 1) / 4});
  };
  // Packed rows decoded for this call: per chunk, only the slots its tokens read, each once.
  RowDecodeCache window_rows, compressed_rows;
  IndexKeySet index_keys(backend_->takes_packed_rows());
  int bound_chunk = -1;
  for (int64_t b0 = 0; b0 < T; b0 += kAttentionBlock) {
    const int64_t nb = std::min(kAttentionBlock, T - b0);  // tokens b0 .. b0 + nb of the call
    buf.q.resize(size_t(nb * H * HD));
    buf.o.resize(size_t(nb * H * HD));
    buf.z.resize(size_t(nb * G * OL));
    float* q = buf.q.data();  // [nb, H, HD]
    if (ratio == 4) buf.iq.resize(size_t(nb * IH * ID));
    if (!q_in_chain) backend_->linears(query_projections(w, &qrq[size_t(b0 * QL)], nb, q, ratio == 4 ? buf.iq.data() : nullptr));
    if (!q_kept) {
      for_token_ranges(*backend_, nb, H, kHeadRange, [&](int64_t i, int64_t h0, int64_t h1) {
        float* qt = &q[size_t((i * H + h0) * HD)];
        head_rms_normalize(qt, h1 - h0, HD, eps);                                    // A4-A8
        rope.apply_heads(qt + NOPE, h1 - h0, HD, batch.pos[size_t(b0 + i)], false);  // A9
      });
    }
    if (ratio == 4) {
      float *iq = buf.iq.data(), *index_w = &index_w_all[size_t(b0 * IH)];  // [nb, IH, ID], [nb, IH]
      backend_->for_rows(nb, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          if (!q_kept) {  // (kept: done on the backend)
            rope.apply_heads(&iq[size_t(i * IH * ID)] + ID - RD, IH, ID, batch.pos[size_t(b0 + i)], false);  // I2
            for (int64_t hh = 0; hh < IH; ++hh) {
              float* head = &iq[size_t((i * IH + hh) * ID)];
              hadamard_128(head);     // I3
              qdq_fp4(head, ID, 32);  // I4
            }
          }
          for (int64_t hh = 0; hh < IH; ++hh) index_w[size_t(i * IH + hh)] = round_bf16(double(index_w[size_t(i * IH + hh)]) * index_scale);  // I6
        }
      });
      // I7-I9 for the block's tokens ahead of their selections, token i's scores at score_at[i]: one
      // index_scores_batch for the whole block, each chunk's keys decoded once up to the most its tokens read
      // (each token reads its own prefix of them).
      score_at.assign(1, 0);
      for (int64_t i = 0; i < nb; ++i) score_at.push_back(score_at.back() + (batch.pos[size_t(b0 + i)] + 1) / 4);
      scores.resize(size_t(score_at.back()));
      score_queries.resize(size_t(nb));
      for (int64_t i = 0; i < nb; ++i) {
        const CompressorState& keys = layer_state(batch.states[size_t(batch.chunk[size_t(b0 + i)])], is_mtp, layer_index).index_compressor;
        const IndexScoreParams score = {.q = &iq[size_t(i * IH * ID)], .weights = &index_w[size_t(i * IH)],
                                        .n_keys = score_at[size_t(i + 1)] - score_at[size_t(i)],
                                        .scores = scores.data() + score_at[size_t(i)], .q_kept = q_kept};
        score_queries[size_t(i)] = {&keys.row_format, &keys.rows, &keys, {.score = score}};
      }
      // I10 with them where the backend selects (each token's n_fill best, in the order the partial_sort below
      // gives), else the scores for it.
      select_at.assign(1, 0);
      for (int64_t i = 0; i < nb; ++i) select_at.push_back(select_at.back() + index_fill(batch, b0 + i));
      selection.resize(size_t(select_at.back()));
      const int64_t extra_rows = score_at.back() - select_at.back();  // the visible rows beyond the selected ones
      const bool keep = q_kept && backend_->keeps_selections() && extra_rows <= backend_->kept_selection_extra_rows();
      for (int64_t i = 0; i < nb; ++i) {
        score_queries[size_t(i)].select.n_select = select_at[size_t(i + 1)] - select_at[size_t(i)];
        score_queries[size_t(i)].select.selected = selection.data() + select_at[size_t(i)];
        score_queries[size_t(i)].select.keep_selected = keep;
      }
      selected_on_backend = index_keys.select(*backend_, score_queries, IH, ID);
      selection_kept = keep && selected_on_backend;
      if (!selected_on_backend) {  // I10 here, a token per thread (a batched decode step's 256 top-ks were serial)
        backend_->for_rows(nb, [&](int64_t i0, int64_t i1) {
          std::vector<int64_t> order;
          for (int64_t i = i0; i < i1; ++i) {
            const float* token_scores = scores.data() + score_at[size_t(i)];
            order.resize(size_t(score_at[size_t(i + 1)] - score_at[size_t(i)]));  // the visible keys
            std::iota(order.begin(), order.end(), 0);
            const int64_t n_fill = select_at[size_t(i + 1)] - select_at[size_t(i)];
            std::partial_sort(order.begin(), order.begin() + n_fill, order.end(), [&](int64_t a, int64_t b) {
              return token_scores[a] != token_scores[b] ? token_scores[a] > token_scores[b] : a < b;
            });  // larger score first, ties lower index first
            std::copy_n(order.begin(), n_fill, selection.begin() + select_at[size_t(i)]);
          }
        });
      }
    }

    // Sparse attention (AT0-AT3) of the block's tokens, run together (Backend::sparse_attentions: a token per
    // thread) once their slot lists are built, the tokens of every chunk in the block in one call (a batched
    // decode step's sequences: one wait on a GPU instead of one per sequence); earlier when the rows decoded
    // for the pending tokens pass kPendingDecodedRows, after which the decode caches start over.
    auto run_pending = [&] {
      window_rows.decode_reserved(*backend_);
      compressed_rows.decode_reserved(*backend_);
      for (size_t k = 0; k < pending.size(); ++k) {
        pending[k].slots = slots.rows().data() + slot_begin[k];
        if (!slots.packed().empty()) pending[k].packed = slots.packed().data() + slot_begin[k];
        if (selection_kept && pending_kept[k].n > 0) {
          pending_kept[k].runs = pending_runs[k];
          pending[k].kept_selection = &pending_kept[k];
        }
        if (pending_rings[k].n_rows > 0) pending[k].window_ring = &pending_rings[k];
      }
      backend_->sparse_attentions(pending);
      pending.clear();
      pending_kept.clear();
      slot_begin.clear();
      slots.clear();
    };
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t t = b0 + i;
      const int ci = batch.chunk[size_t(t)];
      const LayerState& ls = layer_state(batch.states[size_t(ci)], is_mtp, layer_index);
      if (ci != bound_chunk) {  // the rows decoded for earlier chunks stay valid (RowDecodeCache::bind)
        bound_chunk = ci;
        window_rows.bind(ls.window_format, ls.window.data(), ls.ring_slots);
        if (ratio != 0) compressed_rows.bind(ls.compressor.row_format, ls.compressor.rows);
      }
      const int64_t pos = batch.pos[size_t(t)], chunk_first_pos = batch.first_pos[size_t(ci)];
      const int64_t chunk_first_token = batch.first_token[size_t(ci)];
      const int64_t first_slot = int64_t(slots.size());
      // A token alone in its chunk hands its packed window rows over as its ring too, once every slot has been written.
      if (pending_rings.size() <= pending.size()) pending_rings.resize(pending.size() + 1);
      const bool alone = backend_->takes_packed_rows() && batch.n_chunk_tokens[size_t(ci)] == 1;
      pending_rings[pending.size()] = alone ? whole_window_ring(ls) : PackedRowRun{};
      // Window part: slot i holds position max(0, pos - W + 1) + i while <= pos.
      const int64_t w0 = std::max<int64_t>(0, pos - W + 1);
      for (int64_t j = 0; j < batch.window_slots[size_t(t)]; ++j) {
        const int64_t p = w0 + j;
        if (p > pos) {
          slots.push(nullptr);
        } else if (p >= chunk_first_pos) {
          slots.push(&kv[size_t((chunk_first_token + p - chunk_first_pos) * HD)]);  // fresh row of this call
        } else {
          const int64_t slot = ls.slot(p);
          slots.push_cached(window_rows, slot, ls.window.data() + slot * ls.window_format.row_bytes, ls.window_format,
                            ls.window_stamps[size_t(slot)]);
        }
      }
      const int64_t layout = batch.layout_tokens[size_t(t)];
      if (ratio == 128) {
        const int64_t n_slots = layout / 128, n_visible = (pos + 1) / 128;
        for (int64_t j = 0; j < n_slots; ++j) {
          if (j < n_visible) {
            slots.push_cached(compressed_rows, j, ls.compressor.rows.row(j), ls.compressor.row_format, ls.compressor.rows.stamp(j));
          } else {
            slots.push(nullptr);
          }
        }
      } else if (ratio == 4) {
        const int64_t n_slots = std::min<int64_t>(c.index_topk, layout / 4), n_fill = index_fill(batch, t);
        const int64_t* best = selection.data() + select_at[size_t(i)];  // I10, above
        if (selection_kept) {  // slots [here, here + n_fill) built on the backend from every visible row
          const int64_t n_visible = (pos + 1) / 4;
          if (pending_runs.size() <= pending.size()) pending_runs.resize(pending.size() + 1);
          pending_runs[pending.size()] = packed_row_runs(ls.compressor.rows, n_visible);
          pending_kept.push_back({.selected = best, .n = n_fill, .at = int64_t(slots.size()) - first_slot, .ascending = false,
                                  .format = &ls.compressor.row_format, .runs = {}, .n_rows = n_visible});
          for (int64_t j = 0; j < n_slots; ++j) slots.push(nullptr);
        }
        for (int64_t j = 0; !selection_kept && j < n_slots; ++j) {
          if (j >= n_fill) {
            slots.push(nullptr);
            continue;
          }
          const int64_t row = best[j];
          slots.push_cached(compressed_rows, row, ls.compressor.rows.row(row), ls.compressor.row_format, ls.compressor.rows.stamp(row));
        }
      }
      while ((int64_t(slots.size()) - first_slot) % 64) slots.push(nullptr);
      slot_begin.push_back(first_slot);
      pending.push_back({.q = &q[size_t(i * H * HD)], .n_heads = H, .head_dim = HD, .slots = nullptr,
                         .n_slots = int64_t(slots.size()) - first_slot, .sink = w.attn_sink,
                         .softmax_scale = softmax_scale, .block_running_max = true, .out = &buf.o[size_t(i * H * HD)],
                         .q_kept = q_kept, .out_rope = q_kept ? &out_rope[size_t(t)] : nullptr,
                         .out_kept_array = q_kept ? buf.o.data() : nullptr, .out_kept_floats = q_kept ? nb * H * HD : 0,
                         .rows_unshared = batch.n_chunk_tokens[size_t(ci)] == 1});
      if (window_rows.n_decoded() + compressed_rows.n_decoded() > kPendingDecodedRows) {
        run_pending();
        window_rows.clear();
        compressed_rows.clear();
      }
    }
    run_pending();
    float* o = buf.o.data();  // (buf is thread_local: the lambda below runs on other threads too)
    if (!q_kept) {
      backend_->for_rows(nb, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          rope.apply_heads(o + i * H * HD + NOPE, H, HD, batch.pos[size_t(b0 + i)], true);  // AT4
        }
      });
    }

    // AT5: grouped wo_a (no activation QDQ), the groups as one batch of independent ops; AT6: wo_b, for the
    // block's tokens.
    std::vector<LinearParams> wo_a(static_cast<size_t>(G));
    for (int64_t g = 0; g < G; ++g) {
      wo_a[size_t(g)] = {buf.o.data() + g * group_width, H * HD, nb, &w.wo_a, g * OL, OL, Epilogue::kBf16, nullptr,
                         buf.z.data() + g * OL, G * OL};
    }
    // One call where the backend runs the chain whole (the CUDA backend: z stays on the device); a call of one
    // query block (a decode step) hands it to the side to run with the FFN side (buf outlives the side).
    const LinearChainParams chain{wo_a, buf.z.data(), nb, G * OL, c.act_block, c.is_v41(),
                                  {buf.z.data(), G * OL, nb, &w.wo_b, 0, D, Epilogue::kBf16, nullptr,
                                   back.out().data() + b0 * D, D, c.act_block},
                                  q_kept};
    if (nb == T) {
      back.set_output_chain(chain);
    } else {
      run_linear_chain(*backend_, chain);
    }
  }

  // The window ring takes this call's rows only now: earlier tokens of the call still needed the old ones.
  for_each_chunk(*backend_, batch, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      layer_state(batch.states[size_t(batch.chunk[size_t(t)])], is_mtp, layer_index).store_window_row(batch.pos[size_t(t)], &kv[size_t(t * HD)]);
    }
  });
}

}  // namespace deepinfer
