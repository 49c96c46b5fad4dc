// The op-level backend contract: the heavy ops of the V4 forward pass, one POD params struct per op.
// Two CPU implementations: the reference backend (exact: double accumulation, one rounding per op, the
// golden precision contract) and the fast backend (fp32 accumulation, vectorised, multithreaded). The
// model code is the same for both; cheap elementwise ops (norms, RoPE, QDQ, Sinkhorn) are shared exact code.
// Activations are float arrays whose values are already bf16 (or fp32 where the op table says so).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "model/token_draw.h"
#include "model/weights.h"

namespace deepinfer {

struct KvRowFormat;  // model/kv_format.h

// What a linear layer does with its exact accumulator before writing the output.
enum class Epilogue {
  kBf16,          // out = bf16(acc)
  kF32,           // out = f32(acc)
  kF32AddBias,    // out = f32(acc + bias[t, n])              (compressor scores + ape, spec C2)
  kSqrtSoftplus,  // out = f32(sqrt(softplus(acc)))           (MoE gate scores, spec M1)
};

// out[t, n] = epilogue( sum_k x[t, k] * W[row_begin + n, k] ), t < n_tokens, n < n_rows.
// x values are used as given (callers apply the activation QDQ of qlinear themselves).
struct LinearParams {
  const float* x = nullptr;       // [n_tokens, x_stride], the first W.n_in columns are read
  int64_t x_stride = 0;
  int64_t n_tokens = 0;
  const LinearWeight* weight = nullptr;
  int64_t row_begin = 0;          // first weight row (grouped wo_a)
  int64_t n_rows = 0;
  Epilogue epilogue = Epilogue::kBf16;
  const float* bias = nullptr;    // [n_tokens, n_rows] for kF32AddBias
  float* out = nullptr;           // [n_tokens, out_stride]
  int64_t out_stride = 0;
  // > 0: the caller applied the activation QDQ (qdq_fp8 / qdq_fp8_v41) to x in blocks of this many columns, so
  // every block of a token's first W.n_in values is e4m3 values times one power of two. A backend may then run
  // the op on FP8 operands (the CUDA backend's prompt path); the reference backend checks the promise.
  int64_t x_e4m3_block = 0;
};

// mHC mixes (spec B1/H1): out[t, m] = f32( (x_t . fn[m]) / sqrt(mean(x_t^2) + eps) ).
struct HcMixParams {
  const float* x = nullptr;       // [n_tokens, width] bf16 values (4 copies flattened)
  int64_t n_tokens = 0;
  int64_t width = 0;
  const float* fn = nullptr;      // [n_mix, width] fp32
  int64_t n_mix = 0;
  double eps = 0;
  float* out = nullptr;           // [n_tokens, n_mix]
};

// A packed cache row (model/kv_format.h) as an attention slot, for a backend that decodes cache rows itself.
// The stamp is the row's write stamp (model/paged_rows.h): every row the model hands over with a given stamp has
// the same bytes, in this call and every later one, so a device may keep the rows it has seen by stamp.
struct PackedSlot {
  const uint8_t* row = nullptr;           // [format->row_bytes]; nullptr: no packed row
  const KvRowFormat* format = nullptr;    // format->n_values == head_dim
  uint64_t stamp = 0;                     // nonzero for a packed row
};

// Per-head work on a token's heads where the backend does it (a decode step's query and attention output kept on a
// GPU): each of n_heads vectors of head_dim values optionally normalised (head_rms_normalize, A4-A8), then its last
// rope_dim values rotated by the token's angles (RopeTable::apply_heads; inverse: by -pos).
struct HeadRope {
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;
  const float* cos_sin = nullptr;  // [n_tokens, rope_dim]: RopeTable::cos_sin of each token's position
  bool inverse = false;
  bool normalize = false;          // A4-A8 first, with eps
  double eps = 0;
};

// The indexer's query heads where the backend does them (a decode step's, kept on a GPU): each head's last rope_dim
// values rotated by the token's angles (RopeTable::apply_heads), then V4's I3-I4 (hadamard_128, qdq_fp4 in blocks
// of 32) or V4.1's step 22 (qdq_fp4_pow2_v41 in blocks of 32).
struct IndexQueryWork {
  int64_t n_heads = 0;
  int64_t head_dim = 0;            // 128
  int64_t rope_dim = 0;
  const float* cos_sin = nullptr;  // [n_tokens, rope_dim]: RopeTable::cos_sin of each token's position
  bool v41 = false;
};

// Consecutive packed cache rows (one page's run of index keys or compressed rows), with their write stamps (PackedSlot).
struct PackedRowRun {
  const uint8_t* rows = nullptr;      // [n_rows, row_bytes]
  int64_t n_rows = 0;
  const uint64_t* stamps = nullptr;   // [n_rows], each nonzero
};

// A token's compressed slots built by the backend from a selection it kept (IndexSelectParams::keep_selected), so that
// the selection never comes back to the host: slots [at, at + n) are the rows the selection names, row r being the
// r-th of `runs` (packed rows of `format`, every row a selection may name), in the selection's order, or with
// ascending in ascending row order (V4.1). What slots and packed hold there is not read.
struct KeptSelectionSlots {
  const int64_t* selected = nullptr;    // the kept selection, named by its host address (IndexSelectParams::selected)
  int64_t n = 0;                        // its n_select
  int64_t at = 0;
  bool ascending = false;
  const KvRowFormat* format = nullptr;  // format->n_values == head_dim
  std::span<const PackedRowRun> runs;   // rows [0, n_rows), every one stamped (PackedSlot::stamp)
  int64_t n_rows = 0;
};

// Sparse attention with sink for one query token (spec AT1-AT3): the slot list (window part, compressed
// part, padding) is given as row pointers, nullptr = empty slot. V4: blocks of 64 slots define the running
// max that P is rounded against; V4.1 (block_running_max = false): P is rounded against the global max.
// For a backend whose takes_packed_rows() is true the model may give cache rows packed instead: slot j is
// then packed[j] where slots[j] is nullptr and packed[j].row is not, its values those unpack_kv_row gives.
struct SparseAttentionParams {
  const float* q = nullptr;              // [n_heads, head_dim]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  const float* const* slots = nullptr;   // [n_slots] rows of [head_dim] (K = V), nullptr = empty (or packed)
  int64_t n_slots = 0;                   // a multiple of 64
  const float* sink = nullptr;           // [n_heads] fp32
  double softmax_scale = 0;               // V4: f32(head_dim^-0.5); V4.1: the real head_dim^-0.5
  bool block_running_max = true;
  float* out = nullptr;                  // [n_heads, head_dim] bf16 values
  const PackedSlot* packed = nullptr;    // [n_slots] or nullptr (always nullptr unless takes_packed_rows())
  // Arrays the backend keeps (Backend::fetch_kept): q_kept, q is part of an array a chain left on the backend
  // (ProjectionChainParams::q_rope), named by its host address; with out_rope set (n_tokens 1: this token's angles),
  // the output is rotated back there (AT4) and kept there as part of the array starting at out_kept_array (the
  // block's outputs, out_kept_floats of them), its host copy not written. The call may then return before the
  // attention has run: what reads the kept output (a later call, fetch_kept) is ordered after it.
  bool q_kept = false;
  const HeadRope* out_rope = nullptr;
  const float* out_kept_array = nullptr;
  int64_t out_kept_floats = 0;
  const KeptSelectionSlots* kept_selection = nullptr;  // only for a backend whose keeps_selections() is true
  // A hint for a backend that gathers a call's rows once (SlotGather): no other token of the call reads this token's
  // rows (a decode step's token, the only one of its sequence in the call), so they need not be looked for among the
  // other tokens' rows. A row shared anyway (a prefix page two sequences share) is then placed twice, which changes
  // no output.
  bool rows_unshared = false;
  // With rows_unshared: the token's sequence's window ring as a run (every row stamped), where its packed slots name
  // rows of it, so that a backend that gathers rows places the ring whole and a slot by its place there.
  const PackedRowRun* window_ring = nullptr;
};

// Indexer scores for one query token (spec I7-I9):
// score[j] = bf16( sum_h bf16( relu(bf16(q_h . K_j)) * w_h ) ) for j < n_keys.
// For a backend whose takes_packed_rows() is true the model may give the keys packed instead of `keys`: rows
// of key_format in key_runs, in order, their values those unpack_kv_row gives.
struct IndexScoreParams {
  const float* q = nullptr;        // [n_heads, dim]
  const float* weights = nullptr;  // [n_heads] bf16 values (I6)
  int64_t n_heads = 0;
  int64_t dim = 0;
  const float* keys = nullptr;     // [n_keys, dim] (nullptr when packed)
  int64_t n_keys = 0;
  float* scores = nullptr;         // [n_keys]
  const KvRowFormat* key_format = nullptr;  // packed keys: their format (n_values == dim), else nullptr
  std::span<const PackedRowRun> key_runs = {};  // packed keys: at least n_keys rows
  bool q_kept = false;  // q is part of an array a chain left on the backend (ProjectionChainParams::index_q)
};

// An indexer query's top-k selection from its scores (spec I10; V4.1 steps 26-27): the n_select best of the
// query's keys, larger score first and ties to the lower index, best first (the model's partial_sort), where
// with `masked` the keys outside keep_blocks' blocks (block b: keys [b * block_size, (b + 1) * block_size)) first
// score -inf. With candidates set (V4.1's candidate source, step 25; not masked): also the n_candidates best blocks
// of block_size keys by their largest score, the newest block (with the last key) scoring +inf, best first in the
// same order.
struct IndexSelectParams {
  IndexScoreParams score;                     // score.scores is not written
  int64_t n_select = 0;                       // <= score.n_keys
  bool masked = false;
  std::span<const int64_t> keep_blocks = {};  // with masked: the kept blocks (V4.1's candidates)
  int64_t block_size = 0;
  int64_t* selected = nullptr;                // [n_select]
  int64_t n_candidates = 0;                   // <= the blocks
  int64_t* candidates = nullptr;              // [n_candidates] or nullptr
  // A backend whose keeps_selections() is true keeps the selection for a later attention (named by `selected`, its
  // host address: SparseAttentionParams::kept_selection) and does not write it; not with candidates. Every op of a
  // call the same. The backend's next index_select_batch that keeps replaces what this one kept.
  bool keep_selected = false;
};

// The MoE of one block (spec M1-M8) exactly as model/moe.cpp computes it, for a backend that runs it whole
// (Backend::moe): u's activation QDQ, the gate (M1) and the shared expert (M7), the routing (M2/M3,
// route_token in model/moe.h), the routed experts (M4-M6) and the sum (M8).
struct MoeParams {
  const float* u = nullptr;              // [n_tokens, dim] bf16 values: the block's normed input
  int64_t n_tokens = 0;
  int64_t dim = 0;
  const BlockWeights* weights = nullptr;
  const int32_t* token_ids = nullptr;    // [n_tokens]: a hash-routed block's tid2eid rows
  bool v41 = false;                      // V4.1's rules (moe.cpp's head comment)
  double route_scale = 0;                // as moe.cpp rounds it
  double swiglu_limit = 0;
  int64_t act_block = 0;                 // the activation QDQ's block
  float* out = nullptr;                  // [n_tokens, dim] bf16 values
};

// One side's mHC weights and constants (spec B1-B8: hc_attn_* and attn_norm, or hc_ffn_* and ffn_norm).
struct MhcWeights {
  const float* fn = nullptr;        // [n_mix, 4 * dim] fp32
  const float* scale = nullptr;     // [3] fp32
  const float* base = nullptr;      // [n_mix] fp32
  const uint16_t* norm = nullptr;   // [dim] bf16: the side's rmsnorm (B8)
  int64_t n_mix = 0;                // 24 for 4 copies
  int sinkhorn_iters = 0;
  double eps = 0, hc_eps = 0;
};

// One side of a block's mHC around its sub-block (model/mhc_side.h): the mixes of h (B1), the coefficients
// (B2-B6), u = the collapse of h (B7) and its norm (B8), the sub-block on u, then h_out = the expansion of h and
// the sub-block's output (P1 / P2).
struct MhcSideParams {
  const float* h = nullptr;             // [n_tokens, 4 * dim] the residual copies
  int64_t n_tokens = 0;
  int64_t dim = 0;
  MhcWeights mhc;
  const float* collapse_pre = nullptr;  // [n_tokens, 4] the pre that B7 takes (V4.1); nullptr: the side's own (V4)
  float* h_out = nullptr;               // [n_tokens, 4 * dim]
  float* pre_out = nullptr;             // [n_tokens, 4]: the side's pre (V4.1 collapses with it later), or nullptr
  bool h_kept = false;  // the backend also keeps h as it is on the host (MhcProjectionParams::keep_h), and may read it there
};

// A block's FFN side whole: the mHC side with the MoE as its sub-block (moe.u and moe.out are not read).
struct MoeSideParams {
  MhcSideParams side;
  MoeParams moe;
};

// Two steps of linear ops with the model's activation QDQ between them, as the model computes them
// (model/linear_chain.h; the attention's output projection: wo_a's groups, each writing its columns of mid, then
// wo_b on mid after mid's QDQ): first's ops, then mid's QDQ over [n_tokens, mid_width] in blocks of qdq_block
// (qdq_fp8, or qdq_fp8_v41 where v41), then second, which reads mid. What mid holds afterwards is unspecified.
struct LinearChainParams {
  std::span<const LinearParams> first;  // each writes columns of mid (out_stride mid_width), together all of them
  float* mid = nullptr;                 // [n_tokens, mid_width]
  int64_t n_tokens = 0;
  int64_t mid_width = 0;
  int64_t qdq_block = 0;
  bool v41 = false;
  LinearParams second;                  // x = mid, x_stride = mid_width
  bool x_kept = false;                  // first's x is part of an array the backend keeps (the attention's output)
};

// The attention's projections and its q path as the model computes them (model/linear_chain.h; spec A1, A2 and A3
// with A10 and the other projections of u; V4.1's the same steps): first's ops, each on the caller's arrays; then
// mid, which one of them wrote, normed in place (rmsnorm with mid_norm); mid_q = mid's activation QDQ (qdq_fp8, or
// qdq_fp8_v41 where v41, in blocks of qdq_block); then second's ops, which read mid_q.
struct ProjectionChainParams {
  std::span<const LinearParams> first;
  float* mid = nullptr;                // [n_tokens, mid_width]: one of first's ops writes it whole
  int64_t n_tokens = 0;
  int64_t mid_width = 0;
  const uint16_t* mid_norm = nullptr;  // [mid_width] bf16
  double eps = 0;
  float* mid_q = nullptr;              // [n_tokens, mid_width]
  int64_t qdq_block = 0;
  bool v41 = false;
  std::span<const LinearParams> second;  // each x = mid_q, x_stride = mid_width
  // Where set: second[0]'s output (q: [n_tokens, q_rope->n_heads, head_dim], out_stride n_heads x head_dim) gets
  // q_rope's head work too, and where the backend runs the chain whole, it keeps q (Backend::fetch_kept) instead of
  // writing it to the host; where the model runs the steps, the model does q_rope's work itself.
  const HeadRope* q_rope = nullptr;
  // The same for second[1]'s output (the indexer's query: [n_tokens, index_q->n_heads, head_dim]) and index_q's work.
  const IndexQueryWork* index_q = nullptr;
  // False: mid and mid_q need not come back where the backend runs the chain whole (their arrays' values are then
  // unspecified; the model reads them only as second's x). Where second's outputs all stay on the backend too, a
  // backend may then return once first's outputs are back, while second's work still runs.
  bool mid_back = true;
};

// An mHC side's first half with its sub-block's first call (model/mhc_side.h's MhcFront): the mixes of h (B1), the
// coefficients (B2-B6), u = the collapse (B7) and its norm (B8), uq = u's activation QDQ (the chain's qdq_block and
// rules), then the projection chain, whose first ops each read u or uq (x = u or uq, x_stride = dim).
struct MhcProjectionParams {
  MhcSideParams side;        // h_out and pre_out are the side's second half's, not written here
  float* u = nullptr;        // [n_tokens, dim]
  float* uq = nullptr;       // [n_tokens, dim]
  float* coeffs = nullptr;   // [n_tokens, 24]: each token's coefficients as model/ops.h's HcCoefficients
  ProjectionChainParams chain;
  // A backend that keeps arrays also keeps side.h (a copy: the host's array is unchanged), for the block's tail to
  // read there (BlockTailParams::attention.h_kept) while the host's array stays as it is.
  bool keep_h = false;
  // side.h is the array a block's tail left on the backend (BlockTailParams::keep_h_out): read there (its host array
  // is stale).
  bool h_on_backend = false;
  // The same for side.collapse_pre (BlockTailParams::keep_pre_out: V4.1's pre from the block before).
  bool pre_on_backend = false;
  // False: u and uq need not come back where the backend runs it whole (their arrays' values are then unspecified;
  // the model reads them only as the chain's first ops' x).
  bool u_back = true;
};

// A block's tail as the model computes it (model/mhc_side.h's block_tail_on_backend): the attention's output
// projection (run_linear_chain), whose second op writes the attention side's sub-block output; the attention side's
// second half (P1 / P2, hc_expand_columns with the coefficients its first half computed) into attention.h_out; then
// the FFN side on that stream (moe_side_on_backend). The FFN side's h_out and pre_out are the outputs; what
// output.mid, output.second.out and attention.h_out hold afterwards is unspecified. ffn.side.h is attention.h_out,
// and ffn.side.h_out may be attention.h (a block's two stream buffers take turns).
struct BlockTailParams {
  LinearChainParams output;
  MhcSideParams attention;                  // h, n_tokens, dim and h_out are read; its weights and pre_out are not
  const float* attention_coeffs = nullptr;  // [n_tokens, 24]: the attention side's coefficients (HcCoefficients)
  MoeSideParams ffn;
  // A backend that keeps arrays leaves ffn.side.h_out there (kept under its host address, the host's array not
  // written) for the next block's front (MhcProjectionParams::h_on_backend).
  bool keep_h_out = false;
  // The same for ffn.side.pre_out (V4.1: the next block's collapse_pre, MhcProjectionParams::pre_on_backend); else it
  // is written as always. With nothing to bring back (both kept, or no pre), the call may return before its work has
  // run: what reads the kept arrays (a later call, fetch_kept) is ordered after it.
  bool keep_pre_out = false;
};

// V4.1's DSpark tap (spec step 5) of a stream the backend keeps (BlockTailParams::keep_h_out), for a backend that
// keeps arrays: each token's mean over its 4 copies, out[t * out_stride + d] = bf16((h[t, 0, d] + h[t, 1, d] +
// h[t, 2, d] + h[t, 3, d]) / 4) summed in double in copy order, kept on the backend as part of the array starting at
// out_array (out_floats of them; Backend::fetch_kept), its host copy not written. The call may return before the
// work has run.
struct StreamTapParams {
  const float* h = nullptr;          // [n_tokens, 4, dim]: the kept stream, named by its host address
  int64_t n_tokens = 0;
  int64_t dim = 0;
  float* out = nullptr;              // token t's dim values at out + t * out_stride, inside the out array
  int64_t out_stride = 0;
  const float* out_array = nullptr;
  int64_t out_floats = 0;
  bool out_array_kept = false;       // an earlier tap of the pass left the array on the backend: it must still be there
};

// The head's input where the backend keeps the stream (BlockTailParams::keep_h_out: the last block's tail left it
// there): y[r] for each logit row r, from the stream's row of token rows[r], as the model's host steps give it. V4
// (hc_fn set): H1 (hc_mix with hc_fn, eps), H2 (hc_head_pre with hc_scale, hc_base, hc_eps), H3 (hc_collapse), H4
// (rmsnorm with norm, eps). V4.1 (pre set): step 43, hc_collapse with the kept pre's row of the token, then rmsnorm.
struct HeadRowsParams {
  const float* h = nullptr;         // [n_stream_tokens, 4, dim]: the kept stream, named by its host address
  int64_t n_stream_tokens = 0;
  int64_t dim = 0;
  std::span<const int64_t> rows = {};  // [n_rows]: the token of each logit row
  const float* hc_fn = nullptr;     // V4: [4, 4 * dim]
  const float* hc_scale = nullptr;  // V4: [1]
  const float* hc_base = nullptr;   // V4: [4]
  double hc_eps = 0;
  const float* pre = nullptr;       // V4.1: [n_stream_tokens, 4], kept too, named by its host address
  const uint16_t* norm = nullptr;   // [dim] bf16
  double eps = 0;
};

// V4.1's Engram steps 3-4 (spec §7.6) on a stream the backend keeps (BlockTailParams::keep_h_out), for a backend
// that keeps arrays: x[t] = token t's table rows' values (engram_table_row of rows[t, 0 .. rows_per_token), side by
// side), then the activation QDQ (qdq_fp8_v41 in blocks of qdq_block, as Model::act_qdq_rows); kv = the linear op
// `kv` (wkv, bf16 out, [n_tokens, 5 * dim]) on that x as linear() computes it; then each copy k of each token has
// h[t, k] updated in place by model/ops.h's engram_gate with key = kv[t, k * dim ..] and val = kv[t, 4 * dim ..].
// kv.x is not read (the backend builds x from the rows' stored bytes); h is updated where it is kept (its host array
// not written); kv.out is not written. The call may return before the work has run.
struct EngramGateParams {
  LinearParams kv;
  const EngramTable* table = nullptr;
  const int64_t* rows = nullptr;       // [n_tokens, rows_per_token], each < table->rows
  int64_t rows_per_token = 0;          // rows_per_token * table->dim == kv's K
  int64_t qdq_block = 0;
  float* h = nullptr;                  // [n_tokens, 4, dim]: the kept stream, named by its host address
  int64_t n_tokens = 0;
  int64_t dim = 0;
  const uint16_t* q_weight = nullptr;  // [4, dim] bf16
  const uint16_t* k_weight = nullptr;  // [4, dim] bf16
  double eps = 0;
};

// A kept array's host address and length (Backend::fetch_kept_arrays).
struct KeptFetch {
  float* host = nullptr;
  int64_t n = 0;
};

// Which tokens the ops that follow compute. The model's own numerics already tell the two apart (a prompt
// chunk uses the one-shot prefill layout); a backend may also pick its kernels by it, never by how many tokens
// an op has, so a token's result depends on its kind but never on what else is in its batch.
enum class TokenKind { kPrompt, kGenerated };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual void linear(const LinearParams& p) = 0;
  virtual void hc_mix(const HcMixParams& p) = 0;
  virtual void sparse_attention(const SparseAttentionParams& p) = 0;
  virtual void index_scores(const IndexScoreParams& p) = 0;
  // Several independent linear ops (none reads another's output), each as linear() would compute it; the
  // fast backend runs them as one parallel region.
  virtual void linears(std::span<const LinearParams> ps) {
    for (const LinearParams& p : ps) linear(p);
  }
  // Several independent sparse attentions (the query tokens of a prefill block: none reads another's output,
  // and every slot row stays unchanged until the call returns), each as sparse_attention() would compute it;
  // the fast backend gives each token a thread of its own instead of splitting one token's heads.
  virtual void sparse_attentions(std::span<const SparseAttentionParams> ps) {
    for (const SparseAttentionParams& p : ps) sparse_attention(p);
  }
  // Several independent index-score ops (the query tokens of a prefill block, none writing what another
  // reads), each as index_scores() would compute it; tokens that score against the same keys array (their
  // n_keys may differ) may share one pass over it. Every input stays unchanged until the call returns.
  virtual void index_scores_batch(std::span<const IndexScoreParams> ps) {
    for (const IndexScoreParams& p : ps) index_scores(p);
  }
  // Runs body(begin, end) over ranges that cover [0, n) rows of independent per-row work (a prefill's
  // per-token norms, rotations, quantisation), on the backend's CPU threads where it has them. The body
  // must not call the backend, and what it computes for a row must not depend on the range it is in.
  virtual void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) { body(0, n); }
  // True when the backend takes cache rows packed (SparseAttentionParams::packed, IndexScoreParams::key_runs)
  // and decodes them itself: the CUDA backend then copies a row's packed bytes to the device instead of four
  // bytes per value.
  virtual bool takes_packed_rows() const { return false; }
  // True when prompt and generated tokens run on different kernels (their sums may differ in the last bits):
  // the model then runs a forward pass that holds both kinds as two passes, one per kind.
  virtual bool kernels_differ_by_token_kind() const { return false; }
  // True when every call waits for a device (the CUDA backend copies its outputs back and synchronises once per
  // call, except the calls with nothing to bring back: an attention whose outputs it keeps, a block's tail whose
  // outputs it keeps, an index call whose selections it keeps): the model then puts independent ops into one call wherever it can, also where a CPU backend
  // runs them faster apart (a prefill's MoE experts, which the fast backend streams one expert at a time).
  virtual bool each_call_waits() const { return false; }
  // Called once, before the first op: every routed expert's weights in the order a backend with too little
  // memory for all of them should place them (the main layers' experts layer by layer, then the MTP / DSpark
  // layers'), and the bytes of every other weight, which a device keeps whatever its size. The CUDA backend
  // keeps as many experts on the device as its memory holds and runs the other experts' ops on the host's CPU
  // kernels; which experts stay where depends on this list and the memory alone, never on the requests. An
  // error when the device cannot hold even the other weights.
  virtual Status place_experts(int64_t /*other_weight_bytes*/, std::span<const LinearWeight* const> /*experts*/) { return {}; }
  virtual void set_token_kind(TokenKind /*kind*/) {}
  // Runs a block's MoE whole, where the backend can (the CUDA backend: on the device in one wait, with every
  // intermediate kept there), with out equal to what the model's own code computes on this backend bit for bit;
  // false: it did nothing, and the model runs its own code (the CPU backends always).
  virtual bool moe(const MoeParams& /*p*/) { return false; }
  // Index scores and their top-k selections for several query tokens (as index_scores_batch), where the backend
  // selects itself (the CUDA backend with DEEPINFER_CUDA_INDEX_SELECT=device: on the device, the selections coming
  // back instead of every key's score), with the model's selections exactly; false: it did nothing, and the model
  // scores and selects on the host.
  virtual bool index_select_batch(std::span<const IndexSelectParams> /*ps*/) { return false; }
  // True where index_select_batch keeps selections (IndexSelectParams::keep_selected) whenever it selects, and the
  // attention builds compressed slots from them (SparseAttentionParams::kept_selection): the CUDA backend with
  // DEEPINFER_CUDA_INDEX_SELECT=kept and packed cache rows, whose index call then does not wait.
  virtual bool keeps_selections() const { return false; }
  // Where it keeps them: the model keeps a call's selections (where its query and attention output stay on the backend
  // too: a decode step, or a prompt chunk of up to 256 tokens) only while the rows it hands over beyond those selected,
  // summed over the call's tokens, are at most this many. The attention then hands over every row a selection may name
  // (so that the device finds the selected ones itself), and each costs the host some work, against the wait for the
  // selections that keeping them saves.
  virtual int64_t kept_selection_extra_rows() const { return 0; }
  // Runs a linear chain whole where the backend can (the CUDA backend: mid stays on the device, one wait), with
  // second's outputs equal to the model's own steps on this backend bit for bit; false: it did nothing, and the
  // model runs the steps itself (the CPU backends always).
  virtual bool linear_chain(const LinearChainParams& /*p*/) { return false; }
  // The same for a projection chain: first's outputs, mid, mid_q and second's outputs those of the model's steps
  // (projection_chain_on_backend) bit for bit; false: it did nothing.
  virtual bool projection_chain(const ProjectionChainParams& /*p*/) { return false; }
  // The same for an mHC side's first half with a projection chain (the attention side's first call): u, uq, the
  // coefficients and the chain's outputs those of the steps (MhcFront::run_with) bit for bit; false: it did nothing.
  virtual bool mhc_projection_chain(const MhcProjectionParams& /*p*/) { return false; }
  // Runs a block's FFN side whole where the backend can (the CUDA backend: h in, h_out and pre_out back, one
  // wait), with the outputs of the model's own steps on this backend (moe_side_on_backend) bit for bit; false:
  // it did nothing, and the model runs the steps itself (the CPU backends always).
  virtual bool moe_side(const MoeSideParams& /*p*/) { return false; }
  // Runs a block's tail whole where the backend can (the CUDA backend: the attention's output in, the block's
  // output stream back, one wait), with the FFN side's outputs those of the model's steps on this backend
  // (block_tail_on_backend) bit for bit; false: it did nothing, and the model runs the steps (the CPU backends always).
  virtual bool block_tail(const BlockTailParams& /*p*/) { return false; }
  // The tap where the backend keeps the stream (StreamTapParams); false: it did nothing, and the model fetches the
  // stream and taps it on the host.
  virtual bool stream_tap(const StreamTapParams& /*p*/) { return false; }
  // The Engram update where the backend keeps the stream (EngramGateParams); false: it did nothing, and the model
  // fetches the stream and updates it on the host.
  virtual bool engram_gate(const EngramGateParams& /*p*/) { return false; }
  // A linear op whose rows' draws are all the caller needs for some tokens (the head of a sequence's draw, its edits
  // (penalties), JSON mask and log-probabilities included): the op as linear() computes it, drawn[t] =
  // model/token_draw.h's draw_token(token t's outputs, draws[t]) for every token (draws: one a token), where
  // draws[t].logprobs >= 0 logprobs[t] = token_logprobs(token t's outputs, drawn[t], draws[t].logprobs) (logprobs: one a
  // token, nullptr where no draw asks), and the outputs of only the tokens with keep_out[t] != 0 written to p.out; the
  // others' rows there are left as they were (a drawing row with edits is never kept). false: it did nothing, and the
  // caller runs linear() and draws itself (the CPU backends always). The CUDA backend brings back the kept rows and one
  // id a token (with its log-probabilities' few values) instead of every token's outputs (V4's head: 517 KB a token).
  virtual bool linear_draws(const LinearParams& /*p*/, std::span<const uint8_t> /*keep_out*/,
                            std::span<const TokenDraw> /*draws*/, int32_t* /*drawn*/, TokenLogprob* /*logprobs*/) {
    return false;
  }
  // How many draws linear_draws() and head_on_kept_stream() took so far whose row's logits had to come back (a
  // nucleus draw whose cut lay past the candidates the device found): for tests and `bench --op-times`.
  virtual int64_t draws_with_logits_back() const { return 0; }
  // The head (linear_draws's op `head`, its x the rows' y: head.x is not read) on the head's input rows where the
  // backend keeps the stream (HeadRowsParams): the outputs of the tokens with keep_out[t] != 0 written to head.out, and
  // where drawn is not nullptr every token's draw (draws, drawn and logprobs as linear_draws's) there. false: it did
  // nothing, and the model fetches the stream and runs the host's steps. The CUDA backend runs it whole with one wait: nothing but the
  // kept rows and the ids cross (with the host's steps the stream came back, hc_mix's input went out again, and each
  // waited).
  virtual bool head_on_kept_stream(const HeadRowsParams& /*rows*/, const LinearParams& /*head*/,
                                   std::span<const uint8_t> /*keep_out*/, std::span<const TokenDraw> /*draws*/,
                                   int32_t* /*drawn*/, TokenLogprob* /*logprobs*/) {
    return false;
  }
  // True where the backend can keep arrays between calls (HeadRope, ProjectionChainParams::q_rope and the kept
  // arrays below): the model then hands it the work that keeps them.
  virtual bool keeps_arrays() const { return false; }
  // A kept array's values copied to its host address: an array an op left on the backend (a chain's q, the
  // attention's kept output), named by that address and its length, for a step that reads it on the host after all
  // (a chain the backend declined to run whole). Only a backend that keeps arrays is ever asked.
  virtual void fetch_kept(float* /*host*/, int64_t /*n*/) { DI_CHECK_MSG(false, std::string(name()) + " keeps no arrays"); }
  // Several kept arrays, each as fetch_kept() brings it back (the CUDA backend: with one wait for all of them).
  virtual void fetch_kept_arrays(std::span<const KeptFetch> arrays) {
    for (const KeptFetch& a : arrays) fetch_kept(a.host, a.n);
  }
};

// body(begin, end) over [0, n) on `threads` (Backend::for_rows), or on the calling thread where threads is nullptr
// (the host-side helpers of a device backend take their threads as an optional argument).
inline void for_rows_on(Backend* threads, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (threads) {
    threads->for_rows(n, body);
  } else {
    body(0, n);
  }
}

std::unique_ptr<Backend> make_reference_backend();
// n_threads <= 0: one per hardware thread. The kernel families are the CPU's best (best_simd_level for
// generated tokens, best_prompt_simd_level for a prompt's linear ops) unless the environment variable
// DEEPINFER_SIMD names one for all tokens (scalar, avx2, avx512, avx512bf16, avx512bf16quant, amxbf16); nullptr
// with *error set when it names an unknown family or one this CPU lacks.
std::unique_ptr<Backend> make_fast_backend(int n_threads, std::string* error);
// The CUDA backend (src/backend/cuda, built with -DDEEPINFER_CUDA=ON) on the given device. nullptr with
// *error set when the build has no CUDA backend or the device is not usable. Weights are uploaded on first
// use and must outlive the backend unchanged (a model's checkpoint mapping does). n_threads: the host threads
// that run the model's per-row work (for_rows) between the device calls; <= 0: one per hardware thread.
std::unique_ptr<Backend> make_cuda_backend(int device, int n_threads, std::string* error);

}  // namespace deepinfer
