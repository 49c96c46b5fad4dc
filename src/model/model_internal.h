// Internal to the V4 model files: the flattened token batch of one forward and small helpers.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "model/mhc_side.h"
#include "model/model.h"

namespace deepinfer {

struct Model::Batch {
  // Per token, in chunk order (tokens of one sequence are contiguous and in position order).
  std::vector<int32_t> ids;            // [T] token ids (MTP: unused for routing)
  std::vector<int64_t> pos;            // [T] absolute positions
  std::vector<int> chunk;              // [T] index of the token's chunk
  std::vector<int64_t> window_slots;   // [T] window part length of the index list (spec AT0)
  std::vector<int64_t> layout_tokens;  // [T] P for prompt tokens, t + 1 for decode tokens
  std::vector<char> is_prompt;         // [T] part of a prompt (prefill layout) or a decode token
  // Per chunk.
  std::vector<SequenceState*> states;
  std::vector<int64_t> first_token;    // [n_chunks] index of the chunk's first token
  std::vector<int64_t> n_chunk_tokens; // [n_chunks]
  std::vector<int64_t> first_pos;      // [n_chunks] position of the chunk's first token
  int64_t n_tokens() const { return int64_t(pos.size()); }
};

// Per-forward V4.1 state that flows from layer to layer (spec §7.3-7.5): for every token, the row list of
// the last index source (reuse layers read it) and the candidate blocks of the candidate source.
struct Model::V41Scratch {
  std::vector<std::vector<int64_t>> selection;   // [T] compressed-row indices, ascending
  bool selection_kept = false;                   // selection's values are kept on the backend, not here (sized)
  std::vector<std::vector<int64_t>> candidates;  // [T] kept candidate block ids (empty: none published)
  bool have_candidates = false;
  int kv_source_done_layer = -1;                 // SWA replay: this layer's KV path already ran on every token
  std::vector<float> taps;                       // [T, n_taps * dim] DSpark taps (spec step 5)
  KeptArray taps_kept;        // taps while the backend holds their values (Backend::stream_tap)
  bool taps_on_host = false;  // a tap was written here (or taps moved): the backend's copy would lack it from now on
  // taps on the host again, for good: later taps are the host's.
  void fetch_taps(Backend& backend) {
    taps_kept.fetch(backend);
    taps_on_host = true;
  }
  // The same as one of several arrays (KeptArray::fetch_with).
  void fetch_taps_with(std::vector<KeptFetch>& arrays) {
    taps_kept.fetch_with(arrays);
    taps_on_host = true;
  }
};

Model::Batch make_forward_batch(std::span<const ForwardChunk> chunks, int window_size);

// AT4 / V4.1's step 29 where a backend keeps the attention's output (SparseAttentionParams::out_rope): each of n
// tokens' n_heads heads rotated back by its angles, cos_sin [n, rope_dim] (RopeTable::cos_sin_rows).
inline std::vector<HeadRope> inverse_head_ropes(const float* cos_sin, int64_t n, int64_t n_heads, int64_t head_dim,
                                                int64_t rope_dim) {
  std::vector<HeadRope> ropes;
  for (int64_t t = 0; t < n; ++t) ropes.push_back({n_heads, head_dim, rope_dim, cos_sin + t * rope_dim, true, false, 0.0});
  return ropes;
}

// Per-token work over [0, n) of every token (its columns, its heads) cut into ranges of `range` (the last one
// may be shorter) and run on the backend's threads: body(t, begin, end) for every token t < n_tokens and range.
// What a range computes must depend on that range alone. A decode step has one token, so its per-token loops
// ran on one thread while the others waited (~7% of a batch-1 step) until they were cut into ranges.
inline void for_token_ranges(Backend& backend, int64_t n_tokens, int64_t n, int64_t range,
                             const std::function<void(int64_t t, int64_t begin, int64_t end)>& body) {
  const int64_t n_ranges = (n + range - 1) / range;
  backend.for_rows(n_tokens * n_ranges, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t begin = i % n_ranges * range;
      body(i / n_ranges, begin, std::min(n, begin + range));
    }
  });
}
constexpr int64_t kColumnRange = 512;  // for_token_ranges over a row's columns
constexpr int64_t kHeadRange = 8;      // for_token_ranges over attention heads
// The activation QDQ of each row's first `width` values in place, in blocks of `block` (V4: qdq_fp8, V4.1:
// qdq_fp8_v41), on the backend's threads.
void act_qdq_rows(Backend& backend, float* x, int64_t n_rows, int64_t width, int64_t block, bool v41);

// E1 / V4.1 step 1: h [T, 4, D] = each token's embedding row (bf16) in all 4 copies of the stream, on the backend's
// threads.
void embed_streams(Backend& backend, const uint16_t* embed, const std::vector<int32_t>& ids, int64_t dim, std::vector<float>& h);

// body(t0, t1) over each chunk's tokens [t0, t1), the chunks on the backend's threads: the per-sequence state a token
// writes (window ring, compressor ring and rows) is its chunk's alone, and a chunk's tokens stay in position order
// on one thread (a batched decode step's 256 one-token chunks were one thread's work). Chunks of one sequence, which
// would share that state, run one after another on the calling thread.
void for_each_chunk(Backend& backend, const Model::Batch& batch, const std::function<void(int64_t, int64_t)>& body);
// Decoded KV rows (RowDecodeCache) the pending attention tokens of a call may hold before they run (V4 and
// V4.1): 32 MB of 512-value rows, about what one chunk of a long prompt decodes anyway, and 25 sequences of
// a batched decode step.
constexpr int64_t kPendingDecodedRows = 16384;

// The head runs once over the logit rows of every chunk, stacked in chunk order: a batch of decode steps then
// streams the vocab-sized head matrix once instead of once per sequence (at batch 16 that had been 60% of a
// step). A chunk's logit rows are all of its tokens (all_logits) or its last one. stack_logit_rows copies
// them from x [T, width] into rows (on the backend's threads) and sets counts[ci] for each chunk; head_outputs runs
// the head over them and gives each chunk its rows. A row's logits do not depend on the other rows of the call (the
// kernels' sums never depend on the token count).
// A buffer kept from call to call (thread_local) let go once a call has grown it past `max_bytes`: a batch-256 decode
// step's V4 logits are 132 MB, a long prompt's all-logits rows GBs.
inline constexpr size_t kKeptBufferMaxBytes = size_t(256) << 20;
inline void release_if_large(std::vector<float>& buffer, size_t max_bytes = kKeptBufferMaxBytes) {
  if (buffer.size() * sizeof(float) > max_bytes) std::vector<float>().swap(buffer);
}

template <class Chunk>
int64_t logit_row_count(const Model::Batch& batch, const Chunk& chunk, size_t ci) {
  return chunk.all_logits ? batch.n_chunk_tokens[ci] : std::min<int64_t>(batch.n_chunk_tokens[ci], 1);
}
// The tokens stack_logit_rows stacks, in its order, and its counts.
template <class Chunk>
void logit_row_tokens(const Model::Batch& batch, std::span<const Chunk> chunks, std::vector<int64_t>& counts,
                      std::vector<int64_t>& tokens) {
  counts.assign(chunks.size(), 0);
  tokens.clear();
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    counts[ci] = logit_row_count(batch, chunks[ci], ci);
    const int64_t end = batch.first_token[ci] + batch.n_chunk_tokens[ci];
    for (int64_t t = end - counts[ci]; t < end; ++t) tokens.push_back(t);
  }
}
template <class Chunk>
void stack_logit_rows(Backend& backend, const Model::Batch& batch, std::span<const Chunk> chunks, const std::vector<float>& x,
                      int64_t width, std::vector<int64_t>& counts, std::vector<float>& rows) {
  counts.assign(chunks.size(), 0);
  std::vector<int64_t> at(chunks.size() + 1, 0);  // each chunk's first stacked row
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    counts[ci] = logit_row_count(batch, chunks[ci], ci);
    at[ci + 1] = at[ci] + counts[ci];
  }
  rows.resize(size_t(at.back() * width));  // (every element written below: a buffer kept by the caller is not cleared)
  backend.for_rows(int64_t(chunks.size()), [&](int64_t c0, int64_t c1) {  // (a batch-256 step's 16 MB of V4 streams)
    for (int64_t ci = c0; ci < c1; ++ci) {
      const int64_t row0 = batch.first_token[size_t(ci)] + batch.n_chunk_tokens[size_t(ci)] - counts[size_t(ci)];
      std::copy_n(x.begin() + row0 * width, counts[size_t(ci)] * width, rows.begin() + at[size_t(ci)] * width);
    }
  });
}
// Each chunk's draw where ForwardChunk::draw_only, else nullopt (MTP chunks have none: all nullopt).
template <class Chunk>
std::vector<std::optional<TokenDraw>> draws_of(std::span<const Chunk> chunks) {
  std::vector<std::optional<TokenDraw>> draws(chunks.size());
  if constexpr (requires(const Chunk& ch) { ch.draw_only; }) {
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      if (chunks[ci].draw_only) draws[ci] = chunks[ci].draw;  // (Model::forward checked all_logits)
    }
  }
  return draws;
}
// The head (V4's H5, V4.1's step 44) over the stacked logit rows (counts[ci] of chunk ci) into the chunks' outputs:
// their logits rows, or where draws[ci] is set, the draw of the chunk's row alone (ChunkOutput::drawn). The logits
// go straight into the chunk's own output where the call has one chunk, else into a buffer the thread keeps from call
// to call (a batch-256 decode step's 132 MB of V4 logits were a fresh, zero-filled vector each step, then copied chunk
// by chunk on one thread) and out to the chunks on the backend's threads. run(p, keep_out, row_draws, drawn, logprobs)
// computes the head op p (p.out: the logits, one row a logit row), writing the rows where keep_out[r] != 0 and, unless
// drawn is nullptr (no chunk draws), the draws row_draws[r] (one a row) of the rows where keep_out[r] == 0 into
// drawn[r], and their log-probabilities into logprobs[r] where row_draws[r].logprobs >= 0 (logprobs: nullptr where
// none does); false: it did nothing, and neither does head_outputs_with.
using HeadRun = std::function<bool(const LinearParams& p, std::span<const uint8_t> keep_out,
                                   std::span<const TokenDraw> row_draws, int32_t* drawn, TokenLogprob* logprobs)>;
bool head_outputs_with(Backend& backend, const LinearWeight& head, const float* y, int64_t dim, std::span<const int64_t> counts,
                       std::span<const std::optional<TokenDraw>> draws, std::vector<ChunkOutput>& outputs, const HeadRun& run);
// head_outputs_with on y [n_rows, dim] on the host: the backend draws where it can (Backend::linear_draws), else the
// host's threads draw from the logits (draw_token, and token_logprobs where a draw asks).
void head_outputs(Backend& backend, const LinearWeight& head, const float* y, int64_t dim, std::span<const int64_t> counts,
                  std::span<const std::optional<TokenDraw>> draws, std::vector<ChunkOutput>& outputs);
// head_outputs_with where the backend keeps the stream and runs the head's steps on it (Backend::head_on_kept_stream;
// `rows` without its rows, which this sets): false where it declines, or where a chunk keeps its hidden stream or the
// stream is not kept (the caller then fetches the stream and runs its host steps and head_outputs).
template <class Chunk>
bool head_outputs_on_kept_stream(Backend& backend, const LinearWeight& head, HeadRowsParams rows, const KeptStream& stream,
                                 const Model::Batch& batch, std::span<const Chunk> chunks, std::vector<ChunkOutput>& outputs) {
  if (!stream.on_backend) return false;
  for (const Chunk& ch : chunks) {
    if (ch.keep_hidden) return false;
  }
  std::vector<int64_t> counts, tokens;
  logit_row_tokens(batch, chunks, counts, tokens);
  rows.rows = tokens;
  return head_outputs_with(backend, head, nullptr, rows.dim, counts, draws_of(chunks), outputs,
                           [&](const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> row_draws,
                               int32_t* drawn, TokenLogprob* logprobs) {
                             return backend.head_on_kept_stream(rows, p, keep_out, row_draws, drawn, logprobs);
                           });
}

// The mHC block's per-call buffers (V4's Model::run_block, V4.1's Model::mhc_block_v41), kept by each thread
// from call to call and resized here; every element is written before it is read. In a long prefill h_next
// alone is T x 4 x dim floats (268 MB for 4096 tokens of V4-Flash), and fresh vectors of that size are new
// zeroed pages from the kernel in every layer (perf: clear_page took 8.7% of a 2048-token prefill). Callers
// name the buffers through this reference: a lambda that names a thread_local itself reads the running
// thread's instance, and for_rows runs those lambdas on the backend's threads.
struct BlockBuffers {
  MhcScratch side;  // both mHC sides' steps, in turn (mhc_side.h: they size its buffers themselves)
  std::vector<float> h_next;
};
inline BlockBuffers& block_buffers(size_t stream_size) {
  thread_local BlockBuffers buffers;
  buffers.h_next.resize(stream_size);
  return buffers;
}

// After a layer: appends each chunk's last-token stream [4, dim] to its layer_streams_of_last, if asked.
void append_last_streams(const Model::Batch& batch, std::span<const ForwardChunk> chunks, const std::vector<float>& h, int64_t dim);
// Whether a chunk asks for the streams append_last_streams gathers (then h is read on the host after every block).
bool wants_last_streams(std::span<const ForwardChunk> chunks);

// SWA bounded replay (swa_replay.cpp): keeps only each replayed chunk's last plan.tail_tokens tokens (all
// tokens of other chunks), in order: the batch metadata and the per-token rows of h [T, 4, dim], pre_in
// [T, 4] and the scratch's selections, candidates and DSpark taps. Marks the window rings of layers >=
// plan.decoder_kv_layer of each replayed sequence missing below its tail. False (nothing changed) when no
// chunk is replayed.
bool compact_batch_to_tails(const SwaReplayPlan& plan, const ModelConfig& config, std::span<const ForwardChunk> chunks,
                            Model::Batch& batch, Model::V41Scratch& scratch, std::vector<float>& h, std::vector<float>& pre_in);

}  // namespace deepinfer
