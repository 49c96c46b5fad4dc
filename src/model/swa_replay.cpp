// V4.1 SWA bounded replay (spec §7.10): the plan, the batch compaction and the one layer that straddles the
// split (the decoder KV source: its KV path sees every token, the rest of its block only the tails).
// Must not change anything when no chunk is replayed: the exact path stays bit-identical.
#include "model/swa_replay.h"

#include <algorithm>
#include <string>

#include "model/model_internal.h"
#include "model/ops.h"

namespace deepinfer {

Result<SwaReplayPlan> plan_swa_replay(const ModelConfig& c) {
  if (!c.is_v41()) {
    return Status::error("SWA bounded replay needs a V4.1 checkpoint (an encoder/decoder split); this is deepseek_v4");
  }
  SwaReplayPlan plan;
  for (int l : c.kv_source_layers) plan.decoder_kv_layer = std::max(plan.decoder_kv_layer, l);
  if (plan.decoder_kv_layer < 0) return Status::error("SWA bounded replay: the config names no KV source layer");
  for (int l : c.engram_layers) {
    if (l >= plan.decoder_kv_layer) {
      return Status::error("SWA bounded replay: Engram layer " + std::to_string(l) + " is not before the decoder KV source (layer " +
                           std::to_string(plan.decoder_kv_layer) + "); its n-grams would need the skipped tokens");
    }
  }
  // spec §7.10: tail = window + speculative tokens, so the first draft and verify after the prefill find
  // every window row they read computed.
  plan.tail_tokens = int64_t(c.window_size) + int64_t(std::max(0, c.dspark_block_size));
  return plan;
}

bool replays_chunk(const SwaReplayPlan& plan, int64_t n_tokens, bool all_logits) {
  return plan.decoder_kv_layer >= 0 && !all_logits && n_tokens > plan.tail_tokens;
}

bool compact_batch_to_tails(const SwaReplayPlan& plan, const ModelConfig& c, std::span<const ForwardChunk> chunks,
                            Model::Batch& batch, Model::V41Scratch& scratch, std::vector<float>& h,
                            std::vector<float>& pre_in) {
  const int64_t D = c.dim, n_taps_width = int64_t(c.dspark_target_layers.size()) * D;
  std::vector<int64_t> kept;  // old token indices, in order
  bool any = false;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int64_t first = batch.first_token[ci], n = batch.n_chunk_tokens[ci];
    const bool replay = replays_chunk(plan, n, chunks[ci].all_logits);
    const int64_t skip = replay ? n - plan.tail_tokens : 0;
    for (int64_t t = first + skip; t < first + n; ++t) kept.push_back(t);
    if (!replay) continue;
    any = true;
    // The decoder layers never see the skipped positions: their window rows are missing, not stale.
    const int64_t tail_first_pos = batch.first_pos[ci] + skip;
    for (int l = plan.decoder_kv_layer; l < c.n_layers; ++l) chunks[ci].state->layers[size_t(l)].window_valid_from = tail_first_pos;
  }
  if (!any) return false;
  Model::Batch b;
  b.states = batch.states;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int64_t n = batch.n_chunk_tokens[ci];
    const int64_t keep_n = replays_chunk(plan, n, chunks[ci].all_logits) ? plan.tail_tokens : n;
    b.first_token.push_back(b.first_token.empty() ? 0 : b.first_token.back() + b.n_chunk_tokens.back());
    b.n_chunk_tokens.push_back(keep_n);
    b.first_pos.push_back(batch.first_pos[ci] + n - keep_n);
  }
  const int64_t T = int64_t(kept.size());
  std::vector<float> h_kept(static_cast<size_t>(T * 4 * D)), pre_kept(static_cast<size_t>(T * 4)), taps_kept(static_cast<size_t>(T * n_taps_width));
  std::vector<std::vector<int64_t>> selection(static_cast<size_t>(T)), candidates(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    const size_t t = size_t(kept[size_t(i)]);
    b.ids.push_back(batch.ids[t]);
    b.pos.push_back(batch.pos[t]);
    b.chunk.push_back(batch.chunk[t]);
    b.window_slots.push_back(batch.window_slots[t]);
    b.layout_tokens.push_back(batch.layout_tokens[t]);
    b.is_prompt.push_back(batch.is_prompt[t]);
    std::copy_n(&h[t * 4 * size_t(D)], 4 * D, &h_kept[size_t(i * 4 * D)]);   // [4, dim]
    std::copy_n(&pre_in[t * 4], 4, &pre_kept[size_t(i * 4)]);               // [4]
    std::copy_n(scratch.taps.begin() + int64_t(t) * n_taps_width, n_taps_width, taps_kept.begin() + i * n_taps_width);
    selection[size_t(i)] = std::move(scratch.selection[t]);
    candidates[size_t(i)] = std::move(scratch.candidates[t]);
  }
  batch = std::move(b);
  h = std::move(h_kept);
  pre_in = std::move(pre_kept);
  scratch.taps = std::move(taps_kept);
  scratch.selection = std::move(selection);
  scratch.candidates = std::move(candidates);
  return true;
}

void Model::swa_replay_split_v41(std::span<const ForwardChunk> chunks, Batch& batch, V41Scratch& scratch, std::vector<float>& h,
                                 std::vector<float>& pre_in) {
  const ModelConfig& c = config_;
  const int layer = replay_.decoder_kv_layer;
  bool any = false;
  for (size_t ci = 0; ci < chunks.size(); ++ci) any = any || replays_chunk(replay_, batch.n_chunk_tokens[ci], chunks[ci].all_logits);
  if (!any) return;
  // The KV-producing path of the decoder KV source on every token: the attention input u (single-pass mHC
  // collapses with the incoming pre, spec §7.2) feeds the compressor and index keys exactly as in the block.
  const BlockWeights& w = weights_.layers[size_t(layer)];
  const int64_t T = batch.n_tokens(), D = c.dim;
  std::vector<float> u(static_cast<size_t>(T * D));  // [T, dim]
  for (int64_t t = 0; t < T; ++t) {
    hc_collapse(&h[size_t(t * 4 * D)], &pre_in[size_t(t * 4)], D, &u[size_t(t * D)]);
    rmsnorm(&u[size_t(t * D)], w.attn_norm, D, c.norm_eps_value(), &u[size_t(t * D)]);
  }
  std::vector<LinearParams> projections;
  KvSourceProjections projected;
  add_kv_source_projections(layer, u, T, projected, projections);
  backend_->linears(projections);
  kv_source_update_v41(layer, batch, scratch, projected);
  scratch.kv_source_done_layer = layer;
  compact_batch_to_tails(replay_, c, chunks, batch, scratch, h, pre_in);
}

}  // namespace deepinfer
