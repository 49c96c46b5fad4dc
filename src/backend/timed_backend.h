// A Backend that forwards every op to another one and adds up, per op kind, the calls and the wall time
// they took, and the linear ops' time once more per weight storage type with the weight bytes they read.
// `deepinfer bench --op-times` wraps the model's backend in one to show how a step's time splits between the
// backend's ops and the model code around them, and at what rate each kind of weight streams. It changes no
// result: every call, linears() and for_rows() included, reaches the inner backend unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"

namespace deepinfer {

enum class OpKind { kLinear, kHcMix, kSparseAttention, kIndexScores, kMoe, kRowWork };
inline constexpr int kOpKinds = 6;
// "linear", "hc_mix", "sparse_attention", "index_scores", "moe" (a whole MoE the backend ran: Backend::moe, or
// Backend::moe_side with its mHC side, Backend::block_tail with the output projection before it),
// "row_work"
const char* op_kind_name(OpKind kind);

struct OpTime {
  int64_t calls = 0;  // ops: linears() / sparse_attentions() / index_scores_batch() count each of their ops, for_rows() one per call
  int64_t entries = 0;  // calls into the backend, a batch counting once (on a GPU: one wait for the device each)
  double seconds = 0;
  // index_scores: ops whose selection stayed on the backend (IndexSelectParams::keep_selected); sparse_attention:
  // tokens whose compressed slots the backend built from such a selection (SparseAttentionParams::kept_selection).
  int64_t kept_selections = 0;
  // linear: V4.1's Engram updates the backend made on the stream it keeps (Backend::engram_gate), one per layer and call.
  int64_t stream_updates = 0;
  // linear: heads run on the stream the backend keeps (Backend::head_on_kept_stream), one per call.
  int64_t heads_on_kept_stream = 0;
  // linear: draws whose row's logits came back from the backend after all (Backend::draws_with_logits_back).
  int64_t draws_with_logits_back = 0;
  OpTime& operator-=(const OpTime& o) {
    calls -= o.calls;
    entries -= o.entries;
    seconds -= o.seconds;
    kept_selections -= o.kept_selections;
    stream_updates -= o.stream_updates;
    heads_on_kept_stream -= o.heads_on_kept_stream;
    draws_with_logits_back -= o.draws_with_logits_back;
    return *this;
  }
};
using OpTimes = std::array<OpTime, kOpKinds>;  // indexed by OpKind

// The storage type of a linear op's weight. A linears() batch whose weights differ in type has its time
// split between the types in proportion to the weight bytes each type's ops read (the ops run together, so
// their own times are not seen apart).
enum class WeightType { kBf16, kFp8, kFp4, kOther };
inline constexpr int kWeightTypes = 4;
const char* weight_type_name(WeightType type);  // "bf16", "fp8", "fp4", "other"

struct LinearTime {
  int64_t calls = 0;
  double seconds = 0;
  double weight_bytes = 0;  // the rows the calls read (codes and their scale bytes), once per call
  LinearTime& operator-=(const LinearTime& o) {
    calls -= o.calls;
    seconds -= o.seconds;
    weight_bytes -= o.weight_bytes;
    return *this;
  }
};
using LinearTimes = std::array<LinearTime, kWeightTypes>;  // indexed by WeightType

// Bytes of weight rows [p.row_begin, p.row_begin + p.n_rows) and of their scale bytes (e8m0: FP8 one per
// block x block tile, FP4 one per 32 codes).
double linear_weight_bytes(const LinearParams& p);

class TimedBackend final : public Backend {
 public:
  // `times` (and `linear_times` when given) are owned by the caller and must outlive the backend; the backend
  // only adds to them.
  TimedBackend(std::unique_ptr<Backend> inner, OpTimes* times, LinearTimes* linear_times = nullptr);
  const char* name() const override { return inner_->name(); }
  void linear(const LinearParams& p) override;
  void hc_mix(const HcMixParams& p) override;
  void sparse_attention(const SparseAttentionParams& p) override;
  void index_scores(const IndexScoreParams& p) override;
  void linears(std::span<const LinearParams> ps) override;
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override;
  void index_scores_batch(std::span<const IndexScoreParams> ps) override;
  bool index_select_batch(std::span<const IndexSelectParams> ps) override;  // as index scores, when the inner ran it
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override;
  bool kernels_differ_by_token_kind() const override { return inner_->kernels_differ_by_token_kind(); }
  bool takes_packed_rows() const override { return inner_->takes_packed_rows(); }
  bool each_call_waits() const override { return inner_->each_call_waits(); }
  Status place_experts(int64_t other_weight_bytes, std::span<const LinearWeight* const> experts) override {
    return inner_->place_experts(other_weight_bytes, experts);
  }
  void set_token_kind(TokenKind kind) override { inner_->set_token_kind(kind); }
  bool moe(const MoeParams& p) override;  // timed only when the inner backend ran it
  bool moe_side(const MoeSideParams& p) override;  // as moe
  bool block_tail(const BlockTailParams& p) override;  // as moe
  // Timed as linear ops (its ops, one call) only when the inner backend ran it.
  bool linear_chain(const LinearChainParams& p) override;
  bool projection_chain(const ProjectionChainParams& p) override;  // as linear_chain
  bool mhc_projection_chain(const MhcProjectionParams& p) override;  // as its chain (its mixes are no hc_mix call)
  bool engram_gate(const EngramGateParams& p) override;  // as its linear op (its gate is no row work)
  int64_t draws_with_logits_back() const override { return inner_->draws_with_logits_back(); }
  bool linear_draws(const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> draws,
                    int32_t* drawn, TokenLogprob* logprobs) override;  // as linear
  // As its linear op; counted in OpTime::heads_on_kept_stream.
  bool head_on_kept_stream(const HeadRowsParams& rows, const LinearParams& head, std::span<const uint8_t> keep_out,
                           std::span<const TokenDraw> draws, int32_t* drawn, TokenLogprob* logprobs) override;
  bool keeps_arrays() const override { return inner_->keeps_arrays(); }
  bool keeps_selections() const override { return inner_->keeps_selections(); }
  int64_t kept_selection_extra_rows() const override { return inner_->kept_selection_extra_rows(); }
  bool stream_tap(const StreamTapParams& p) override { return inner_->stream_tap(p); }  // (not timed: one small launch)
  void fetch_kept(float* host, int64_t n) override { inner_->fetch_kept(host, n); }
  void fetch_kept_arrays(std::span<const KeptFetch> arrays) override { inner_->fetch_kept_arrays(arrays); }

 private:
  template <typename Call>
  double timed(OpKind kind, int64_t calls, Call&& call);  // returns the call's seconds
  void record(OpKind kind, int64_t calls, double seconds);  // one entry into the backend of `calls` ops
  void record_chain(std::span<const LinearParams> first, std::span<const LinearParams> second, double seconds);  // as linear ops
  void add_linear(std::span<const LinearParams> ps, double seconds);

  std::unique_ptr<Backend> inner_;
  OpTimes* times_;
  LinearTimes* linear_times_;
};

}  // namespace deepinfer
