// V4.1 DSpark draft (spec §7.8; golden v41 contract D1-D8): three window-only stages over the main
// stream's KV, a rank-r Markov bias chained greedily over the block, and a confidence head. The stages
// are V4.1 blocks (single-pass mHC, CSA2 attention pieces, MoE) with non-causal attention over the ring
// plus the block's own rows.
#include <algorithm>

#include "core/dtypes.h"
#include "model/kv_decode_cache.h"
#include "model/model_internal.h"

namespace deepinfer {

void Model::dspark_seed(SequenceState& seq, int64_t first_pos, std::span<const float> taps) {
  const ModelConfig& c = config_;
  DI_CHECK_MSG(c.is_v41(), "DSpark is a V4.1 feature");
  // Drafting runs on the generated tokens' kernels, whatever the seeded positions are (a drafter only proposes).
  backend_->set_token_kind(TokenKind::kGenerated);
  const int64_t D = c.dim, HD = c.head_dim, RD = c.rope_head_dim;
  const int64_t width = int64_t(c.dspark_target_layers.size()) * D, n = int64_t(taps.size()) / width;
  const double eps = c.norm_eps_value();
  std::vector<float> x(taps.begin(), taps.end()), mx(static_cast<size_t>(n * D)), kv(static_cast<size_t>(n * HD));
  act_qdq_rows(x, n, width);  // D1: main_x = main_norm(main_proj(main_hidden))
  backend_->linear({.x = x.data(), .x_stride = width, .n_tokens = n, .weight = &weights_.dspark.main_proj, .row_begin = 0,
                    .n_rows = D, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = mx.data(), .out_stride = D,
                    .x_e4m3_block = c.act_block});
  for (int64_t i = 0; i < n; ++i) rmsnorm(&mx[size_t(i * D)], weights_.dspark.main_norm, D, eps, &mx[size_t(i * D)]);
  act_qdq_rows(mx, n, D);
  for (int s = 0; s < c.n_mtp_layers; ++s) {  // D2: each stage's ring takes the main KV of these positions
    const BlockWeights& w = weights_.mtp[size_t(s)].block;
    const RopeTable& rope = layer_rope_[size_t(c.n_layers + s)];
    backend_->linear({.x = mx.data(), .x_stride = D, .n_tokens = n, .weight = &w.wkv, .row_begin = 0, .n_rows = HD,
                      .epilogue = Epilogue::kBf16, .bias = nullptr, .out = kv.data(), .out_stride = HD, .x_e4m3_block = c.act_block});
    for (int64_t i = 0; i < n; ++i) {
      float* row = &kv[size_t(i * HD)];
      rmsnorm(row, w.kv_norm, HD, eps, row);
      rope.apply(row + HD - RD, first_pos + i, false);
      qdq_fp8_v41(row, HD, 32);
      seq.mtp_layers[size_t(s)].store_window_row(first_pos + i, row);
    }
  }
  seq.n_mtp_tokens = std::max(seq.n_mtp_tokens, first_pos + n);
}

DsparkDraft Model::dspark_draft(SequenceState& seq, int64_t pos, int32_t anchor, std::span<const int32_t> forced_chain) {
  const ModelConfig& c = config_;
  DI_CHECK_MSG(c.is_v41(), "DSpark is a V4.1 feature");
  DI_CHECK_MSG(seq.n_mtp_tokens == pos + 1, "dspark_draft needs the stage rings seeded up to pos");
  backend_->set_token_kind(TokenKind::kGenerated);
  const int64_t B = c.dspark_block_size, D = c.dim, V = c.vocab_size, HD = c.head_dim, H = c.n_heads, W = c.window_size;
  const int64_t R = c.dspark_markov_rank;
  const double eps = c.norm_eps_value();
  // D3: the block [anchor, noise x (B - 1)] at positions pos + 1 .. pos + B, 4 copies, pre_in = (1, 0, 0, 0).
  Batch batch;
  batch.states.push_back(&seq);
  batch.first_token.push_back(0);
  batch.n_chunk_tokens.push_back(B);
  batch.first_pos.push_back(pos + 1);
  for (int64_t i = 0; i < B; ++i) {
    batch.ids.push_back(i == 0 ? anchor : c.dspark_noise_token_id);
    batch.pos.push_back(pos + 1 + i);
    batch.chunk.push_back(0);
    batch.is_prompt.push_back(0);
    batch.window_slots.push_back(W);
    batch.layout_tokens.push_back(pos + 2 + i);
  }
  std::vector<float> h(static_cast<size_t>(B * 4 * D)), pre_in(static_cast<size_t>(B * 4), 0.0f);
  for (int64_t i = 0; i < B; ++i) {
    const uint16_t* row = weights_.embed + int64_t(batch.ids[size_t(i)]) * D;
    for (int k = 0; k < 4; ++k) {
      for (int64_t d = 0; d < D; ++d) h[size_t((i * 4 + k) * D + d)] = bf16_to_float(row[d]);
    }
    pre_in[size_t(i * 4)] = 1.0f;
  }
  for (int s = 0; s < c.n_mtp_layers; ++s) {  // D4
    const BlockWeights& w = weights_.mtp[size_t(s)].block;
    const RopeTable& rope = layer_rope_[size_t(c.n_layers + s)];
    const LayerState& ring = seq.mtp_layers[size_t(s)];
    std::vector<float> o(static_cast<size_t>(B * H * HD));  // the output chain reads it after the lambda returns
    mhc_block_v41(w, batch, h, pre_in, [&](MhcFront& front, MhcBack& back) {
      QkvV41 qkv;
      project_qkv_v41(w, rope, batch.pos, front, qkv);
      std::vector<const float*> rows;
      RowDecodeCache window_rows;
      window_rows.bind(ring.window_format, ring.window.data(), ring.ring_slots);
      for (int64_t p = std::max<int64_t>(0, pos - W + 1); p <= pos; ++p) rows.push_back(window_rows.row(ring.slot(p)));
      for (int64_t i = 0; i < B; ++i) rows.push_back(&qkv.kv[size_t(i * HD)]);  // non-causal over the block
      std::vector<int64_t> positions, row_begin{0};
      for (int64_t i = 0; i < B; ++i) {
        positions.push_back(pos + 1 + i);
        row_begin.push_back(int64_t(rows.size()) * (i + 1));
      }
      std::vector<const float*> all_rows;  // every query of the block reads the same rows
      for (int64_t i = 0; i < B; ++i) all_rows.insert(all_rows.end(), rows.begin(), rows.end());
      attend_v41(w, rope, qkv.q.data(), positions, all_rows, row_begin, o.data());
      output_projection_v41(w, o, B, back);
    });
  }
  // D5: base logits from the last stage's collapse and norm.
  std::vector<float> y(static_cast<size_t>(B * D)), normed(static_cast<size_t>(B * D)), base(static_cast<size_t>(B * V));
  for (int64_t i = 0; i < B; ++i) {
    hc_collapse(&h[size_t(i * 4 * D)], &pre_in[size_t(i * 4)], D, &y[size_t(i * D)]);
    rmsnorm(&y[size_t(i * D)], weights_.dspark.norm, D, eps, &normed[size_t(i * D)]);
  }
  backend_->linear({.x = normed.data(), .x_stride = D, .n_tokens = B, .weight = &weights_.head_proj, .row_begin = 0, .n_rows = V,
                    .epilogue = Epilogue::kF32, .bias = nullptr, .out = base.data(), .out_stride = V});
  DsparkDraft draft;
  draft.tokens.push_back(anchor);
  draft.logits.resize(size_t(B * V));
  draft.confidence.resize(size_t(B));
  std::vector<float> embed_row(static_cast<size_t>(R)), bias(static_cast<size_t>(V)), concat(static_cast<size_t>(D + R));
  for (int64_t i = 0; i < B; ++i) {
    const int32_t prev = forced_chain.empty() ? draft.tokens.back() : forced_chain[size_t(i)];
    for (int64_t r = 0; r < R; ++r) embed_row[size_t(r)] = bf16_to_float(weights_.dspark.markov_embed[int64_t(prev) * R + r]);
    backend_->linear({.x = embed_row.data(), .x_stride = R, .n_tokens = 1, .weight = &weights_.dspark.markov_head, .row_begin = 0,
                      .n_rows = V, .epilogue = Epilogue::kF32, .bias = nullptr, .out = bias.data(), .out_stride = V});  // D6
    float* logits = &draft.logits[size_t(i * V)];
    for (int64_t v = 0; v < V; ++v) logits[v] = base[size_t(i * V + v)] + bias[size_t(v)];  // D7: fp32 add
    draft.tokens.push_back(int32_t(argmax(logits, V)));
    std::copy_n(&y[size_t(i * D)], D, concat.begin());  // D8: confidence from [y_i, markov embed of tok_i]
    std::copy(embed_row.begin(), embed_row.end(), concat.begin() + D);
    backend_->linear({.x = concat.data(), .x_stride = D + R, .n_tokens = 1, .weight = &weights_.dspark.confidence_proj, .row_begin = 0,
                      .n_rows = 1, .epilogue = Epilogue::kF32, .bias = nullptr, .out = &draft.confidence[size_t(i)], .out_stride = 1});
  }
  return draft;
}

}  // namespace deepinfer
