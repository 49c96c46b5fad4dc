// TimedBackend: wall time per op kind around the inner backend's calls (steady clock; a backend that
// returns before its device work ends would be under-counted, and neither the CPU nor the CUDA backend does).
#include "backend/timed_backend.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace deepinfer {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kLinear: return "linear";
    case OpKind::kHcMix: return "hc_mix";
    case OpKind::kSparseAttention: return "sparse_attention";
    case OpKind::kIndexScores: return "index_scores";
    case OpKind::kMoe: return "moe";
    case OpKind::kRowWork: return "row_work";
  }
  return "?";
}

const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::kBf16: return "bf16";
    case WeightType::kFp8: return "fp8";
    case WeightType::kFp4: return "fp4";
    case WeightType::kOther: return "other";
  }
  return "?";
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

WeightType weight_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return WeightType::kBf16;
    case DType::kF8E4M3: return WeightType::kFp8;
    case DType::kI8: return WeightType::kFp4;  // packed e2m1
    default: return WeightType::kOther;
  }
}
}  // namespace

double linear_weight_bytes(const LinearParams& p) {
  const LinearWeight& w = *p.weight;
  double scale_bytes = 0;
  if (w.dtype == DType::kF8E4M3 && w.block > 0) {
    const int64_t first = p.row_begin / w.block, last = (p.row_begin + p.n_rows + w.block - 1) / w.block;
    scale_bytes = double(last - first) * double((w.n_in + w.block - 1) / w.block);
  } else if (w.dtype == DType::kI8) {
    scale_bytes = double(p.n_rows) * double(w.n_in / 32);
  }
  return double(p.n_rows) * double(w.row_bytes()) + scale_bytes;
}

TimedBackend::TimedBackend(std::unique_ptr<Backend> inner, OpTimes* times, LinearTimes* linear_times)
    : inner_(std::move(inner)), times_(times), linear_times_(linear_times) {}

template <typename Call>
double TimedBackend::timed(OpKind kind, int64_t calls, Call&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  const double seconds = seconds_since(t0);
  record(kind, calls, seconds);
  return seconds;
}

void TimedBackend::record(OpKind kind, int64_t calls, double seconds) {
  OpTime& t = (*times_)[size_t(kind)];
  t.calls += calls;
  t.entries += 1;
  t.seconds += seconds;
}

void TimedBackend::add_linear(std::span<const LinearParams> ps, double seconds) {
  if (!linear_times_ || ps.empty()) return;
  LinearTimes batch{};
  double total_bytes = 0;
  for (const LinearParams& p : ps) {
    LinearTime& t = batch[size_t(weight_type(p.weight->dtype))];
    const double bytes = linear_weight_bytes(p);
    t.calls += 1;
    t.weight_bytes += bytes;
    total_bytes += bytes;
  }
  for (size_t k = 0; k < batch.size(); ++k) {
    if (batch[k].calls == 0) continue;
    LinearTime& t = (*linear_times_)[k];
    t.calls += batch[k].calls;
    // By bytes; a batch that reads no weight bytes (empty ops) splits by op count.
    t.seconds += seconds * (total_bytes > 0 ? batch[k].weight_bytes / total_bytes : double(batch[k].calls) / double(ps.size()));
    t.weight_bytes += batch[k].weight_bytes;
  }
}

void TimedBackend::linear(const LinearParams& p) {
  add_linear(std::span<const LinearParams>(&p, 1), timed(OpKind::kLinear, 1, [&] { inner_->linear(p); }));
}
void TimedBackend::hc_mix(const HcMixParams& p) {
  timed(OpKind::kHcMix, 1, [&] { inner_->hc_mix(p); });
}
void TimedBackend::sparse_attention(const SparseAttentionParams& p) {
  timed(OpKind::kSparseAttention, 1, [&] { inner_->sparse_attention(p); });
  (*times_)[size_t(OpKind::kSparseAttention)].kept_selections += p.kept_selection != nullptr;
}
void TimedBackend::index_scores(const IndexScoreParams& p) {
  timed(OpKind::kIndexScores, 1, [&] { inner_->index_scores(p); });
}
void TimedBackend::linears(std::span<const LinearParams> ps) {
  add_linear(ps, timed(OpKind::kLinear, int64_t(ps.size()), [&] { inner_->linears(ps); }));
}
void TimedBackend::index_scores_batch(std::span<const IndexScoreParams> ps) {
  timed(OpKind::kIndexScores, int64_t(ps.size()), [&] { inner_->index_scores_batch(ps); });
}
bool TimedBackend::index_select_batch(std::span<const IndexSelectParams> ps) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->index_select_batch(ps)) return false;
  record(OpKind::kIndexScores, int64_t(ps.size()), seconds_since(t0));
  (*times_)[size_t(OpKind::kIndexScores)].kept_selections +=
      std::count_if(ps.begin(), ps.end(), [](const IndexSelectParams& p) { return p.keep_selected; });
  return true;
}
void TimedBackend::sparse_attentions(std::span<const SparseAttentionParams> ps) {
  timed(OpKind::kSparseAttention, int64_t(ps.size()), [&] { inner_->sparse_attentions(ps); });
  (*times_)[size_t(OpKind::kSparseAttention)].kept_selections +=
      std::count_if(ps.begin(), ps.end(), [](const SparseAttentionParams& p) { return p.kept_selection != nullptr; });
}
bool TimedBackend::moe(const MoeParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->moe(p)) return false;
  record(OpKind::kMoe, 1, seconds_since(t0));
  return true;
}
bool TimedBackend::moe_side(const MoeSideParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->moe_side(p)) return false;
  record(OpKind::kMoe, 1, seconds_since(t0));
  return true;
}
bool TimedBackend::block_tail(const BlockTailParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->block_tail(p)) return false;
  record(OpKind::kMoe, 1, seconds_since(t0));
  return true;
}
bool TimedBackend::linear_chain(const LinearChainParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->linear_chain(p)) return false;
  record_chain(p.first, {&p.second, 1}, seconds_since(t0));
  return true;
}
bool TimedBackend::projection_chain(const ProjectionChainParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->projection_chain(p)) return false;
  record_chain(p.first, p.second, seconds_since(t0));
  return true;
}
bool TimedBackend::mhc_projection_chain(const MhcProjectionParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->mhc_projection_chain(p)) return false;
  record_chain(p.chain.first, p.chain.second, seconds_since(t0));
  return true;
}
bool TimedBackend::engram_gate(const EngramGateParams& p) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!inner_->engram_gate(p)) return false;
  record_chain({&p.kv, 1}, {}, seconds_since(t0));
  ++(*times_)[size_t(OpKind::kLinear)].stream_updates;
  return true;
}
bool TimedBackend::linear_draws(const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> draws,
                                int32_t* drawn, TokenLogprob* logprobs) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t back = inner_->draws_with_logits_back();
  if (!inner_->linear_draws(p, keep_out, draws, drawn, logprobs)) return false;
  record_chain({&p, 1}, {}, seconds_since(t0));
  (*times_)[size_t(OpKind::kLinear)].draws_with_logits_back += inner_->draws_with_logits_back() - back;
  return true;
}
bool TimedBackend::head_on_kept_stream(const HeadRowsParams& rows, const LinearParams& head, std::span<const uint8_t> keep_out,
                                       std::span<const TokenDraw> draws, int32_t* drawn, TokenLogprob* logprobs) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t back = inner_->draws_with_logits_back();
  if (!inner_->head_on_kept_stream(rows, head, keep_out, draws, drawn, logprobs)) return false;
  record_chain({&head, 1}, {}, seconds_since(t0));
  ++(*times_)[size_t(OpKind::kLinear)].heads_on_kept_stream;
  (*times_)[size_t(OpKind::kLinear)].draws_with_logits_back += inner_->draws_with_logits_back() - back;
  return true;
}
void TimedBackend::record_chain(std::span<const LinearParams> first, std::span<const LinearParams> second, double seconds) {
  std::vector<LinearParams> ops(first.begin(), first.end());
  ops.insert(ops.end(), second.begin(), second.end());
  record(OpKind::kLinear, int64_t(ops.size()), seconds);
  add_linear(ops, seconds);
}
void TimedBackend::for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  timed(OpKind::kRowWork, 1, [&] { inner_->for_rows(n, body); });
}

}  // namespace deepinfer
