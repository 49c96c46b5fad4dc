// TimedBackend: wall time per op kind around the inner backend's calls (steady clock; a backend that
// returns before its device work ends would be under-counted, and neither the CPU nor the CUDA backend does).
#include "backend/timed_backend.h"

#include <chrono>
#include <utility>

namespace deepinfer {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kLinear: return "linear";
    case OpKind::kHcMix: return "hc_mix";
    case OpKind::kSparseAttention: return "sparse_attention";
    case OpKind::kIndexScores: return "index_scores";
    case OpKind::kRowWork: return "row_work";
  }
  return "?";
}

TimedBackend::TimedBackend(std::unique_ptr<Backend> inner, OpTimes* times) : inner_(std::move(inner)), times_(times) {}

template <typename Call>
void TimedBackend::timed(OpKind kind, int64_t calls, Call&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  OpTime& t = (*times_)[size_t(kind)];
  t.calls += calls;
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void TimedBackend::linear(const LinearParams& p) {
  timed(OpKind::kLinear, 1, [&] { inner_->linear(p); });
}
void TimedBackend::hc_mix(const HcMixParams& p) {
  timed(OpKind::kHcMix, 1, [&] { inner_->hc_mix(p); });
}
void TimedBackend::sparse_attention(const SparseAttentionParams& p) {
  timed(OpKind::kSparseAttention, 1, [&] { inner_->sparse_attention(p); });
}
void TimedBackend::index_scores(const IndexScoreParams& p) {
  timed(OpKind::kIndexScores, 1, [&] { inner_->index_scores(p); });
}
void TimedBackend::linears(std::span<const LinearParams> ps) {
  timed(OpKind::kLinear, int64_t(ps.size()), [&] { inner_->linears(ps); });
}
void TimedBackend::sparse_attentions(std::span<const SparseAttentionParams> ps) {
  timed(OpKind::kSparseAttention, int64_t(ps.size()), [&] { inner_->sparse_attentions(ps); });
}
void TimedBackend::for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  timed(OpKind::kRowWork, 1, [&] { inner_->for_rows(n, body); });
}

}  // namespace deepinfer
