// DeepSeek-V4.1 top level: embedding, Engram, single-pass mHC blocks, the final collapse and head
// (spec §7.1, §7.2, §7.6; golden v41 contract steps 1-12, 32-44). Attention lives in dsv41_attention.cpp,
// the MoE (shared with V4) in moe.cpp.
#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "model/model_internal.h"

namespace deepinfer {

void Model::engram_v41(const BlockWeights& w, int layer, const Batch& batch, std::vector<float>& h, KeptStream* stream) {
  const ModelConfig& c = config_;
  const int64_t T = batch.n_tokens(), D = c.dim, HD = c.engram_head_dim, N = c.engram_max_ngram;
  const int64_t n_rows = engram_.n_rows_per_token(), width = n_rows * HD;
  const int e_layer = c.engram_index(layer);
  // Each token's table rows (steps 2-3's hashing), then their values: on the device where the backend keeps the
  // stream (it decodes and QDQs the rows there, so only their stored bytes cross), else here.
  std::vector<int64_t> rows(static_cast<size_t>(T * n_rows));
  // Tokens are independent in the loops below (each reads the batch and the sequences' histories and writes its
  // own rows): they run on the backend's threads.
  backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> history(static_cast<size_t>(N));
    for (int64_t t = t0; t < t1; ++t) {
      const int ci = batch.chunk[size_t(t)];
      const SequenceState& seq = *batch.states[size_t(ci)];
      const int64_t pos = batch.pos[size_t(t)], first_pos = batch.first_pos[size_t(ci)];
      bool padded = false;  // spec §7.6 step 4: from the first missing position on, everything is pad
      for (int64_t n = 0; n < N; ++n) {
        const int64_t q = pos - n;
        if (!padded && q < 0) padded = true;
        if (padded) {
          history[size_t(n)] = engram_.pad;
        } else if (q >= first_pos) {
          history[size_t(n)] = engram_.token_map[size_t(batch.ids[size_t(batch.first_token[size_t(ci)] + q - first_pos)])];
        } else {
          const int64_t back = first_pos - q;  // 1 = the sequence's latest earlier position
          DI_CHECK(back <= int64_t(seq.engram_history.size()));
          history[size_t(n)] = seq.engram_history[seq.engram_history.size() - size_t(back)];
        }
      }
      int64_t* token_rows = &rows[size_t(t * n_rows)];
      engram_.rows(e_layer, history.data(), token_rows);
      for (int64_t r = 0; r < n_rows; ++r) DI_CHECK(token_rows[r] >= 0 && token_rows[r] < w.engram.table.rows);
    }
  });
  EngramGateParams p{.kv = {.x = nullptr, .x_stride = width, .n_tokens = T, .weight = &w.engram.wkv, .row_begin = 0,
                            .n_rows = 5 * D, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = nullptr,
                            .out_stride = 5 * D, .x_e4m3_block = config_.act_block},
                     .table = &w.engram.table, .rows = rows.data(), .rows_per_token = n_rows, .qdq_block = config_.act_block,
                     .h = h.data(), .n_tokens = T, .dim = D, .q_weight = w.engram.q_weight,
                     .k_weight = w.engram.k_weight, .eps = c.norm_eps_value()};
  // (That route reads no x and writes no kv.out: emb and kv are the host route's alone.)
  if (stream && stream->on_backend && backend_->engram_gate(p)) return;  // the stream stays where it is kept
  std::vector<float> emb(static_cast<size_t>(T * width)), kv(static_cast<size_t>(T * 5 * D));
  backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = 0; r < n_rows; ++r) {
        engram_table_row(w.engram.table, rows[size_t(t * n_rows + r)], &emb[size_t(t * width + r * HD)]);
      }
    }
  });
  act_qdq_rows(emb, T, width);
  p.kv.x = emb.data();
  p.kv.out = kv.data();
  if (stream) stream->fetch(*backend_, h);  // the update below is on the host
  backend_->linear(p.kv);
  backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = &kv[size_t(t * 5 * D)];
      for (int k = 0; k < 4; ++k) {  // step 3: gate per copy; step 4: residual update with the one value
        engram_gate(&h[size_t((t * 4 + k) * D)], w.engram.q_weight + k * D, w.engram.k_weight + k * D, row + k * D,
                    row + 4 * D, D, p.eps);
      }
    }
  });
}

void Model::run_block_v41(int layer, Batch& batch, V41Scratch& scratch, std::vector<float>& h, std::vector<float>& pre_in,
                          KeptStream* stream) {
  const ModelConfig& c = config_;
  const BlockWeights& w = weights_.layers[size_t(layer)];
  const int64_t T = batch.n_tokens(), D = c.dim;
  const auto tap = std::find(c.dspark_target_layers.begin(), c.dspark_target_layers.end(), layer);
  const int64_t i_tap = tap - c.dspark_target_layers.begin(), n_taps = int64_t(c.dspark_target_layers.size());
  if (w.has_engram) engram_v41(w, layer, batch, h, stream);  // step 2-4, before the block
  // Step 5 on the backend where it keeps the stream: the taps stay there too, as long as no tap of the pass was
  // written on the host (the backend's array would lack it).
  bool tapped = false;
  if (tap != c.dspark_target_layers.end() && stream && stream->on_backend && !scratch.taps_on_host) {
    tapped = backend_->stream_tap({.h = h.data(), .n_tokens = T, .dim = D, .out = &scratch.taps[size_t(i_tap * D)],
                                   .out_stride = n_taps * D, .out_array = scratch.taps.data(),
                                   .out_floats = int64_t(scratch.taps.size()),
                                   .out_array_kept = scratch.taps_kept.on_backend()});
    if (tapped) scratch.taps_kept.keep(scratch.taps.data(), int64_t(scratch.taps.size()));
  }
  if (stream && tap != c.dspark_target_layers.end() && !tapped) stream->fetch(*backend_, h);  // the tap below reads h
  if (tap != c.dspark_target_layers.end() && !tapped) {  // step 5: the layer's input stream, mean over the copies
    scratch.fetch_taps(*backend_);  // (the other taps, where the backend keeps them; from now on all here)
    std::vector<float>& taps = scratch.taps;
    backend_->for_rows(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t d = 0; d < D; ++d) {
          double sum = 0;
          for (int k = 0; k < 4; ++k) sum += h[size_t((t * 4 + k) * D + d)];
          taps[size_t((t * n_taps + i_tap) * D + d)] = round_bf16(sum / 4.0);
        }
      }
    });
  }
  mhc_block_v41(w, batch, h, pre_in, [&](MhcFront& front, MhcBack& back) {
    attention_v41(layer, batch, scratch, front, back);
  }, stream);
}

void Model::mhc_block_v41(const BlockWeights& w, Batch& batch, std::vector<float>& h, std::vector<float>& pre_in,
                          const std::function<void(MhcFront& front, MhcBack& back)>& attention, KeptStream* stream) {
  BlockBuffers& buffers = block_buffers(h.size());  // reused from call to call
  std::vector<float>& h_next = buffers.h_next;
  std::vector<float> attn_pre(size_t(batch.n_tokens() * 4));
  // Attention side: the input is collapsed with the incoming pre (single-pass mHC).
  MhcSideParams attn = side_params(w, batch, 0, h, h_next);
  attn.collapse_pre = pre_in.data();
  attn.pre_out = attn_pre.data();
  MhcSide side(*backend_, attn, buffers.side, attention, stream);
  // FFN side (h_next -> h, with the attention side's second half: MhcSide::finish_with): mixes of the new stream,
  // input collapsed with the ATTENTION's pre (in attn_pre once the side's first half ran); its own pre collapses
  // the next layer's input.
  MhcSideParams ffn = side_params(w, batch, 1, h_next, h);
  ffn.collapse_pre = attn_pre.data();
  ffn.pre_out = pre_in.data();
  side.finish_with({ffn, moe_params(w, batch)});
}

std::vector<ChunkOutput> Model::forward_v41(std::span<const ForwardChunk> chunks) {
  const ModelConfig& c = config_;
  const int64_t D = c.dim;
  Batch batch = make_forward_batch(chunks, c.window_size);
  const int64_t T = batch.n_tokens();
  for (int64_t t = 0; t < T; ++t) {
    DI_CHECK_MSG(batch.ids[size_t(t)] >= 0 && batch.ids[size_t(t)] < c.vocab_size, "token id out of range");
  }
  std::vector<float> h, pre_in(static_cast<size_t>(T * 4), 0.0f);
  embed_streams(*backend_, weights_.embed, batch.ids, D, h);  // step 1: 4 copies of the embedding
  for (int64_t t = 0; t < T; ++t) pre_in[size_t(t * 4)] = 1.0f;  // pre_in = (1, 0, 0, 0)
  V41Scratch scratch;
  scratch.selection.assign(size_t(T), {});
  scratch.candidates.assign(size_t(T), {});
  scratch.taps.assign(size_t(T) * c.dspark_target_layers.size() * size_t(D), 0.0f);
  for (const auto& ch : chunks) {
    if (ch.layer_streams_of_last) ch.layer_streams_of_last->clear();
  }
  // The stream and the pre may stay on a backend that keeps arrays from block to block; fetched where the host reads
  // them.
  KeptStream stream;
  auto fetch_all = [&] {  // the stream, the pre and the taps on the host again, with one wait
    std::vector<KeptFetch> kept;
    stream.fetch_with(kept, h);
    scratch.fetch_taps_with(kept);
    if (!kept.empty()) backend_->fetch_kept_arrays(kept);
  };
  const bool streams_read = wants_last_streams(chunks);
  for (int l = 0; l < c.n_layers; ++l) {
    if (l == replay_.decoder_kv_layer) {  // spec §7.10, opt-in
      fetch_all();
      swa_replay_split_v41(chunks, batch, scratch, h, pre_in);
    }
    run_block_v41(l, batch, scratch, h, pre_in, &stream);
    if (streams_read) stream.fetch(*backend_, h);
    append_last_streams(batch, chunks, h, D);
  }
  std::vector<ChunkOutput> outputs(chunks.size());
  const double eps = c.norm_eps_value();
  const int64_t n_taps_width = int64_t(c.dspark_target_layers.size()) * D;
  // Steps 43-44 where the stream and the pre are (no chunk then keeps its taps), else on the host.
  // (An SWA bounded replay left only the tails' tokens in the batch, the stream and the pre.)
  const HeadRowsParams rows{.h = h.data(), .n_stream_tokens = batch.n_tokens(), .dim = D, .pre = pre_in.data(),
                            .norm = weights_.head.norm, .eps = eps};
  const bool head_done = stream.pre.at == pre_in.data() &&
                         head_outputs_on_kept_stream(*backend_, weights_.head_proj, rows, stream, batch, chunks, outputs);
  if (!head_done) {  // steps 43-44 on the logit rows of every chunk at once (stack_logit_rows)
    fetch_all();
    std::vector<int64_t> counts;
    thread_local std::vector<float> stacked_h, stacked_pre;  // (20 MB at batch 256: kept, not zero-filled each step)
    std::vector<float>& hs = stacked_h;  // this thread's: the body below runs on other threads too
    std::vector<float>& pres = stacked_pre;
    stack_logit_rows(*backend_, batch, chunks, h, 4 * D, counts, hs);
    stack_logit_rows(*backend_, batch, chunks, pre_in, 4, counts, pres);
    const int64_t n_rows = int64_t(pres.size()) / 4;
    std::vector<float> y(static_cast<size_t>(n_rows * D));
    backend_->for_rows(n_rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {  // step 43: collapse with the last block's ffn pre, then norm
        hc_collapse(&hs[size_t(r * 4 * D)], &pres[size_t(r * 4)], D, &y[size_t(r * D)]);
        rmsnorm(&y[size_t(r * D)], weights_.head.norm, D, eps, &y[size_t(r * D)]);
      }
    });
    head_outputs(*backend_, weights_.head_proj, y.data(), D, counts, draws_of(chunks), outputs);  // step 44
    release_if_large(hs);
  }
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int64_t first = batch.first_token[ci], n = batch.n_chunk_tokens[ci];
    if (chunks[ci].keep_hidden) {  // the DSpark input: main_hidden taps of every token the batch still holds
      outputs[ci].hidden.assign(scratch.taps.begin() + first * n_taps_width, scratch.taps.begin() + (first + n) * n_taps_width);
      outputs[ci].hidden_first_token = int64_t(chunks[ci].ids.size()) - n;  // > 0 after an SWA bounded replay
    }
    SequenceState& seq = *chunks[ci].state;
    if (!engram_.token_map.empty()) {
      for (int32_t id : chunks[ci].ids) seq.engram_history.push_back(engram_.token_map[size_t(id)]);
      const size_t keep = size_t(std::max(0, c.engram_max_ngram - 1) + kSpecSlots);
      if (seq.engram_history.size() > keep) seq.engram_history.erase(seq.engram_history.begin(), seq.engram_history.end() - long(keep));
    }
    seq.n_tokens += int64_t(chunks[ci].ids.size());  // an SWA bounded replay kept fewer rows than it processed
  }
  return outputs;
}

}  // namespace deepinfer
