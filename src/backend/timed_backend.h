// A Backend that forwards every op to another one and adds up, per op kind, the calls and the wall time
// they took. `deepinfer bench --op-times` wraps the model's backend in one to show how a step's time splits
// between the backend's ops and the model code around them. It changes no result: every call, linears()
// and for_rows() included, reaches the inner backend unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace deepinfer {

enum class OpKind { kLinear, kHcMix, kSparseAttention, kIndexScores, kRowWork };
inline constexpr int kOpKinds = 5;
const char* op_kind_name(OpKind kind);  // "linear", "hc_mix", "sparse_attention", "index_scores", "row_work"

struct OpTime {
  int64_t calls = 0;  // ops: linears() / sparse_attentions() count each of their ops, for_rows() one per call
  double seconds = 0;
};
using OpTimes = std::array<OpTime, kOpKinds>;  // indexed by OpKind

class TimedBackend final : public Backend {
 public:
  // `times` is owned by the caller and must outlive the backend; the backend only adds to it.
  TimedBackend(std::unique_ptr<Backend> inner, OpTimes* times);
  const char* name() const override { return inner_->name(); }
  void linear(const LinearParams& p) override;
  void hc_mix(const HcMixParams& p) override;
  void sparse_attention(const SparseAttentionParams& p) override;
  void index_scores(const IndexScoreParams& p) override;
  void linears(std::span<const LinearParams> ps) override;
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override;
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override;

 private:
  template <typename Call>
  void timed(OpKind kind, int64_t calls, Call&& call);

  std::unique_ptr<Backend> inner_;
  OpTimes* times_;
};

}  // namespace deepinfer
