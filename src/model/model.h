// The DeepSeek-V4 family model (V4-Flash, V4-Pro, the V4-Flash-0731 backbone, V4.1-Flash): config-driven forward pass over
// a mapped checkpoint, with the MTP layer. One object per loaded model; forward() may batch chunks of
// several sequences (prefill chunks of any size and decode tokens); each sequence's state lives in its
// SequenceState. The numerics follow spec §3 and the golden precision contract; which kernels run the
// heavy ops (exact reference or fast) is the backend's business.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/engram.h"
#include "model/ops.h"
#include "model/sequence_state.h"
#include "model/token_draw.h"
#include "model/swa_replay.h"
#include "model/weights.h"

namespace deepinfer {

class MhcFront;     // model/mhc_side.h
class MhcBack;      // model/mhc_side.h
struct KeptStream;  // model/mhc_side.h

struct ModelOptions {
  bool exact = false;       // reference kernels (double accumulation) instead of the fast ones
  // V4.1: every index source scores against its own KV owner's keys, instead of the reference's
  // republish behaviour (spec §7.5 / §11.1; the default follows DeepSeek's model.py).
  bool index_owner_keys = false;
  // V4.1 prefill approximation (spec §7.10 "SWA bounded replay", off = exact): in a chunk longer than
  // window + DSpark block tokens, the decoder layers (from the last KV source on) run only on its tail;
  // the global path (encoder, compressed rows, index keys) stays bit-identical. V4 checkpoints refuse it.
  bool swa_bounded_replay = false;
  int n_threads = 0;        // fast kernels: 0 = all hardware threads
  bool cuda = false;        // the CUDA backend (a -DDEEPINFER_CUDA=ON build) instead of the CPU kernels
  int cuda_device = 0;
  bool show_progress = false;
  bool lock_weights = false;  // mlock the checkpoint (Checkpoint::OpenOptions::lock_in_memory)
  // Tests: a backend of their own instead of the one exact / cuda select (e.g. one that runs every op on two
  // backends and compares them, tests/cuda/op_by_op_cuda_test.cpp).
  std::function<std::unique_ptr<Backend>()> make_backend = nullptr;
  // Receives the backend selected above (or made by make_backend) and returns the one the model runs on,
  // e.g. the same one inside a TimedBackend (`deepinfer bench --op-times`). nullptr returned: an error.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend = nullptr;
};

// A run of consecutive tokens of one sequence, starting at its next position.
struct ForwardChunk {
  SequenceState* state = nullptr;
  std::span<const int32_t> ids;
  // > 0: these are prompt tokens of a prompt of this many tokens in all (the one-shot prefill layout of
  // the golden contract: window part min(P, window) slots, compressed part sized from P); 0: decode.
  int64_t prompt_len = 0;
  bool all_logits = false;  // logits for every token, else for the last one only
  // Only the last token's draw (`draw`, with its edits, mask and log-probabilities), not its logits:
  // ChunkOutput::drawn (and ::logprob), drawn on the backend where it can (Backend::linear_draws: a GPU then sends one
  // id back instead of the vocabulary's logits). Not with all_logits.
  bool draw_only = false;
  TokenDraw draw = {};
  bool keep_hidden = false; // return the final 4-copy stream of every token (the MTP input)
  // Debugging / golden checks: receives [n_layers, hc_mult, dim], the stream of the chunk's last token
  // after every main layer.
  std::vector<float>* layer_streams_of_last = nullptr;
};

// The MTP layer's input: the main model's final streams at consecutive positions and the next tokens.
struct MtpChunk {
  SequenceState* state = nullptr;
  std::span<const float> hidden;    // [n, hc_mult, dim]
  std::span<const int32_t> next_ids;  // [n]
  int64_t prompt_len = 0;           // as ForwardChunk
  bool all_logits = false;
};

struct ChunkOutput {
  std::vector<float> logits;   // [n_rows, vocab]: every token or just the last (empty with draw_only)
  int32_t drawn = -1;          // draw_only: draw_token of the last token's logits (-1: the chunk had no tokens)
  TokenLogprob logprob;        // draw_only with draw.logprobs >= 0: the drawn token's (token_logprobs)
  std::vector<float> hidden;   // [n, hc_mult, dim] when keep_hidden (V4.1: [n, n_taps * dim] DSpark taps)
  // The chunk token that hidden's first row belongs to: 0, except after an SWA bounded replay, whose
  // hidden holds only the tail's rows (the skipped tokens never reach the tap layers).
  int64_t hidden_first_token = 0;
};

// One DSpark draft (V4.1 spec §7.8): the anchor and the chained draft tokens, their logits and confidences.
struct DsparkDraft {
  std::vector<int32_t> tokens;    // [block_size + 1]: anchor, d1..d_block
  std::vector<float> logits;      // [block_size, vocab]
  std::vector<float> confidence;  // [block_size]
};

struct CompressorProjections;  // dsv4_attention.cpp

class Model {
 public:
  static Result<std::unique_ptr<Model>> open(const std::string& model_dir, const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }
  Backend& backend() { return *backend_; }
  // A fresh state whose rows go to `pool` (the engine's, sized from its cache budget); null: the model's own
  // pool, without a capacity limit, shared by every sequence made that way (so their copies share pages too).
  SequenceState new_sequence(std::shared_ptr<PagePool> pool = nullptr) const;
  // Checks token ids a caller wants to feed are inside the vocabulary; the error names the id and its
  // position. (A bare V4.1 image placeholder id is an ordinary token without image data, as in the
  // reference; image input itself is refused where requests are parsed.)
  Status validate_tokens(std::span<const int32_t> ids) const;

  // Runs every chunk through the main model. Chunks must belong to distinct sequences. A chunk's result
  // never depends on the other chunks (prompt and generated chunks may run as two passes: Backend::set_token_kind).
  std::vector<ChunkOutput> forward(std::span<const ForwardChunk> chunks);
  // Runs the MTP layer (mtp.0) on its own window state of each sequence.
  std::vector<ChunkOutput> forward_mtp(std::span<const MtpChunk> chunks);

  // Forgets every position >= n_tokens (at most kSpecSlots of them): the state becomes exactly what
  // processing only the first n_tokens positions left. Used to reject speculative tokens.
  void rollback(SequenceState& seq, int64_t n_tokens) const;

  // V4.1 DSpark (dspark.cpp). Seeds every stage's window ring with the main-stream KV of positions
  // [first_pos, first_pos + n) from their taps ([n, n_taps * dim], ChunkOutput::hidden of a V4.1 forward).
  void dspark_seed(SequenceState& seq, int64_t first_pos, std::span<const float> taps);
  // Drafts block_size tokens after position `pos` (the last seeded one), anchor at pos + 1; greedy chain.
  // `forced_chain` ([block_size + 1], tests only): the Markov head conditions on these tokens instead of
  // its own choices, so logits can be compared row by row with a reference chain.
  DsparkDraft dspark_draft(SequenceState& seq, int64_t pos, int32_t anchor, std::span<const int32_t> forced_chain = {});

  struct Batch;  // flattened tokens of one forward (defined in model_internal.h)
  struct V41Scratch;  // per-forward V4.1 selections (defined in model_internal.h)

 private:
  Model() = default;
  // The activation fake-quant in front of every fp8/fp4 GEMM, per row: V4 QDQ8 (block 128) or V4.1's.
  void act_qdq_rows(std::vector<float>& x, int64_t n_rows, int64_t width) const;
  // One pass over chunks of one token kind (forward() splits the kinds where the backend's kernels differ).
  std::vector<ChunkOutput> forward_v4(std::span<const ForwardChunk> chunks);
  std::vector<ChunkOutput> forward_mtp_pass(std::span<const MtpChunk> chunks);
  // V4.1 (dsv41.cpp, dsv41_attention.cpp): single-pass mHC, Engram, CSA2 attention.
  std::vector<ChunkOutput> forward_v41(std::span<const ForwardChunk> chunks);
  // stream: where h is between the pass's blocks (mhc_side.h's KeptStream), or nullptr: on the host.
  void run_block_v41(int layer, Batch& batch, V41Scratch& scratch, std::vector<float>& h, std::vector<float>& pre_in,
                     KeptStream* stream = nullptr);
  // Steps 2-4 on h; where the backend keeps the stream, it may update it there (Backend::engram_gate) and keep it.
  void engram_v41(const BlockWeights& w, int layer, const Batch& batch, std::vector<float>& h, KeptStream* stream);
  void attention_v41(int layer, Batch& batch, V41Scratch& scratch, MhcFront& front, MhcBack& back);
  // The KV source's projections of u (steps 15-17: the compressor's wkv, and for ratio 2 its wgate), as ops for
  // the caller to batch with the layer's other projections of u; then the rows they make (steps 15-19).
  struct KvSourceProjections {
    std::vector<float> kv, score;  // [T, head_dim]: ratio 1 the latents (bf16), ratio 2 wkv and wgate (f32)
  };
  void add_kv_source_projections(int layer, const std::vector<float>& u, int64_t n_tokens, KvSourceProjections& out,
                                 std::vector<LinearParams>& ops);
  void kv_source_update_v41(int layer, const Batch& batch, V41Scratch& scratch, KvSourceProjections& projected);
  // SWA bounded replay at the decoder KV source (swa_replay.cpp): its KV path on every token, then the
  // batch compacted to the replayed chunks' tails. Does nothing when no chunk is replayed.
  void swa_replay_split_v41(std::span<const ForwardChunk> chunks, Batch& batch, V41Scratch& scratch, std::vector<float>& h,
                            std::vector<float>& pre_in);
  int published_keys_layer(int layer, int64_t pos, bool is_prompt, int64_t prompt_len) const;
  // Pieces of the V4.1 attention shared with the DSpark stages.
  struct QkvV41 {
    std::vector<float> q;             // [T, n_heads, head_dim] roped
    std::vector<float> kv;            // [T, head_dim] window rows (QDQ8)
    std::vector<float> qr_quantized;  // [T, q_lora_rank] QDQ8(q_norm(wq_a(u))), the indexer's input (unspecified where
                                      // the backend ran the chain whole: ProjectionChainParams::mid_back)
    // keep_q on a backend that keeps arrays: q (roped) stays on the backend, not in q (backend.h's kept arrays), and
    // the tokens' angles for the attention's step 29 there.
    bool q_kept = false;
    std::vector<float> cos_sin;       // [T, rope_head_dim]
  };
  // attend_v41's tokens' outputs kept on the backend, step 29 done there: their angles and the whole output array.
  struct KeptAttention {
    const float* cos_sin = nullptr;  // [n, rope_head_dim], attend_v41's token i's at i * rope_head_dim
    const float* o_array = nullptr;  // the call's [T, H * HD] outputs, of which attend_v41's are a part
    int64_t o_floats = 0;
  };
  // Runs the mHC side's first half (front: u) with the projections. with_u: further projections of front.u() (or of
  // its rows) to run in the batch of wq_a and wkv; index_wq_b / iq: the indexer's query projection (step 20) of
  // qr_quantized into iq [T, index heads * index_head_dim], in the batch of wq_b (nullptr: none).
  void project_qkv_v41(const BlockWeights& w, const RopeTable& rope, std::span<const int64_t> positions,
                       MhcFront& front, QkvV41& out, std::span<const LinearParams> with_u = {},
                       const LinearWeight* index_wq_b = nullptr, float* iq = nullptr, bool keep_q = false);
  // Steps 28-29 for several query tokens at once (one Backend::sparse_attentions call): token i attends with
  // q + i * H * HD at positions[i] to rows[row_begin[i], row_begin[i + 1]) and writes o + i * H * HD. packed:
  // empty, or beside rows (SparseAttentionParams::packed: a backend that takes cache rows packed). kept_selections:
  // empty, or token i's compressed rows built on the backend (SparseAttentionParams::kept_selection; n = 0: none),
  // its rows holding as many placeholders there. rows_unshared: empty, or token i's SparseAttentionParams::rows_unshared;
  // window_rings: empty, or token i's window_ring (n_rows = 0: none).
  void attend_v41(const BlockWeights& w, const RopeTable& rope, const float* q, std::span<const int64_t> positions,
                  std::span<const float* const> rows, std::span<const int64_t> row_begin, float* o,
                  std::span<const PackedSlot> packed = {}, const KeptAttention* kept = nullptr,
                  std::span<const KeptSelectionSlots> kept_selections = {}, std::span<const char> rows_unshared = {},
                  std::span<const PackedRowRun> window_rings = {});
  // Steps 30-31 on o [n_tokens, H * HD] (o_kept: kept on the backend), handed to back as the sub-block's output chain
  // (o must stay as it is until the side has finished).
  void output_projection_v41(const BlockWeights& w, const std::vector<float>& o, int64_t n_tokens, MhcBack& back,
                             bool o_kept = false);
  // The single-pass mHC block around an attention function (spec §7.2), which runs the side's front.
  void mhc_block_v41(const BlockWeights& w, Batch& batch, std::vector<float>& h, std::vector<float>& pre_in,
                     const std::function<void(MhcFront& front, MhcBack& back)>& attention, KeptStream* stream = nullptr);
  void run_block(const BlockWeights& w, const RopeTable& rope, Batch& batch, bool is_mtp, int layer_index,
                 std::vector<float>& h, KeptStream* stream = nullptr);
  // H1-H5 over the logit rows of every chunk in one head call (stack_logit_rows); head_norm_rows: H1-H4 on n_tokens
  // rows of h [n_tokens, 4, dim] into y [n_tokens, dim], the head's input.
  template <class Chunk>
  void run_head(const HeadWeights& w, const Batch& batch, std::span<const Chunk> chunks, const std::vector<float>& h,
                std::vector<ChunkOutput>& outputs);
  void head_norm_rows(const HeadWeights& w, const float* h, int64_t n_tokens, std::vector<float>& y);
  void attention(const BlockWeights& w, const RopeTable& rope, Batch& batch, bool is_mtp, int layer_index,
                 MhcFront& front, MhcBack& back);
  // A3 of n_tokens rows of qrq into q, with the indexer's I1 into iq where iq is not nullptr (both read qrq).
  std::vector<LinearParams> query_projections(const BlockWeights& w, const float* qrq, int64_t n_tokens, float* q,
                                              float* iq) const;
  // The MoE's parameters for batch (u and out left for the caller), and one side's mHC parameters (0: attention,
  // 1: FFN) from h into h_out.
  MoeParams moe_params(const BlockWeights& w, const Batch& batch) const;
  MhcSideParams side_params(const BlockWeights& w, const Batch& batch, int side, const std::vector<float>& h,
                            std::vector<float>& h_out) const;
  Status place_experts();  // Backend::place_experts, once when the model opens
  void compressor_update(const CompressorWeights& w, const RopeTable& rope, int ratio, int64_t d, bool is_index,
                         const Batch& batch, bool is_mtp, int layer_index, const CompressorProjections& projected);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<PagePool> default_pool_ = std::make_shared<PagePool>(kDefaultPageBytes, PagePool::kUnlimited);
  std::vector<RopeTable> layer_rope_;  // per main layer, then per MTP layer
  ModelOptions options_;
  EngramHashing engram_;               // V4.1 with Engram layers
  SwaReplayPlan replay_;               // decoder_kv_layer -1 unless options_.swa_bounded_replay
};

}  // namespace deepinfer
