#include "model/mhc_side.h"

#include <algorithm>

#include "backend/host_copy.h"
#include "core/status.h"
#include "model/linear_chain.h"
#include "model/model_internal.h"
#include "model/moe.h"

namespace deepinfer {

MhcFront::MhcFront(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, KeptStream* stream)
    : backend_(backend), p_(p), scratch_(scratch), stream_(stream) {
  const int64_t T = p.n_tokens, D = p.dim;
  scratch.mixes.resize(size_t(T * p.mhc.n_mix));
  scratch.u.resize(size_t(T * D));
  scratch.uq.resize(size_t(T * D));
  scratch.sub_out.resize(size_t(T * D));
  scratch.coeffs.resize(size_t(T));
}

void MhcFront::run() {
  DI_CHECK_MSG(!ran_, "an mHC side's first half ran twice");
  ran_ = true;
  const int64_t T = p_.n_tokens, D = p_.dim;
  if (stream_) {
    stream_->fetch(backend_, p_.h, T * 4 * D);
    if (p_.collapse_pre) stream_->pre.fetch(backend_);
  }
  const MhcWeights& m = p_.mhc;
  const MhcSideParams& p = p_;
  // Named through references: the lambdas run on the backend's threads (model_internal.h's BlockBuffers).
  std::vector<float>& mixes = scratch_.mixes;
  std::vector<float>& u = scratch_.u;
  std::vector<HcCoefficients>& coeffs = scratch_.coeffs;
  backend_.hc_mix({p.h, T, 4 * D, m.fn, m.n_mix, m.eps, mixes.data()});  // B1
  backend_.for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      coeffs[size_t(t)] = hc_split_sinkhorn(&mixes[size_t(t * m.n_mix)], m.scale, m.base, m.sinkhorn_iters, m.hc_eps);
      const float* pre = p.collapse_pre ? p.collapse_pre + t * 4 : coeffs[size_t(t)].pre;
      float* ut = &u[size_t(t * D)];
      hc_collapse(p.h + t * 4 * D, pre, D, ut);  // B7
      rmsnorm(ut, m.norm, D, m.eps, ut);         // B8
    }
  });
}

bool MhcFront::run_with(const ProjectionChainParams& chain) {
  DI_CHECK_MSG(!ran_, "an mHC side's first half ran twice");
  static_assert(sizeof(HcCoefficients) == 24 * sizeof(float));
  auto* coeffs = reinterpret_cast<float*>(scratch_.coeffs.data());
  // A copy of h for the block's tail where h is the pass's stream (MhcSide::finish_with's tail reads it there).
  const bool keep_h = stream_ && backend_.keeps_arrays(), h_on_backend = stream_ && stream_->on_backend;
  const bool pre_on_backend = stream_ && stream_->pre.on_backend();
  DI_CHECK_MSG(!pre_on_backend || p_.collapse_pre == stream_->pre.at,
               "an mHC side collapses with a pre other than the one kept");
  if (backend_.mhc_projection_chain({.side = p_, .u = scratch_.u.data(), .uq = scratch_.uq.data(), .coeffs = coeffs, .chain = chain,
                                     .keep_h = keep_h, .h_on_backend = h_on_backend, .pre_on_backend = pre_on_backend,
                                     .u_back = false})) {
    ran_ = true;
    h_kept_ = keep_h;
    return true;
  }
  run();
  copy_on_threads(&backend_, scratch_.uq.data(), scratch_.u.data(), scratch_.u.size() * sizeof(float));
  act_qdq_rows(backend_, scratch_.uq.data(), p_.n_tokens, p_.dim, chain.qdq_block, chain.v41);
  return run_projection_chain(backend_, chain);
}

void MhcBack::set_output_chain(const LinearChainParams& chain) {
  DI_CHECK_MSG(!has_chain_, "a sub-block handed over two output chains");
  DI_CHECK_MSG(chain.n_tokens == n_tokens_ && chain.second.out == out_.data() && chain.second.n_rows == dim_ &&
                   chain.second.out_stride == dim_ && chain.second.n_tokens == n_tokens_,
               "an output chain does not write the sub-block's whole output");
  first_.assign(chain.first.begin(), chain.first.end());
  chain_ = chain;
  chain_.first = first_;
  has_chain_ = true;
}

namespace {

// P1 / P2 of side p: h_out = the expansion of p.h and the sub-block's output by each token's coefficients.
void expand_side(Backend& backend, const MhcSideParams& p, const float* sub_out, const HcCoefficients* coeffs) {
  const int64_t D = p.dim;
  for_token_ranges(backend, p.n_tokens, D, kColumnRange, [&](int64_t t, int64_t i0, int64_t i1) {
    hc_expand_columns(p.h + t * 4 * D, sub_out + t * D, coeffs[t], D, i0, i1, p.h_out + t * 4 * D);
  });
}

}  // namespace

MhcSide::MhcSide(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub, KeptStream* stream)
    : backend_(backend), p_(p), scratch_(scratch), back_(scratch.sub_out, p.n_tokens, p.dim), stream_(stream) {
  MhcFront front(backend, p, scratch, stream);
  sub(front, back_);
  DI_CHECK_MSG(front.ran(), "an mHC side's sub-block did not run its first half");
  h_kept_ = front.h_kept();
  if (p.pre_out) {
    for (int64_t t = 0; t < p.n_tokens; ++t) std::copy_n(scratch.coeffs[size_t(t)].pre, 4, p.pre_out + t * 4);
  }
}

void MhcSide::finish() {
  DI_CHECK_MSG(!finished_, "an mHC side's second half ran twice");
  finished_ = true;
  if (stream_) stream_->fetch(backend_, p_.h, p_.n_tokens * 4 * p_.dim);  // the expansion reads it on the host
  if (const LinearChainParams* chain = back_.output_chain()) run_linear_chain(backend_, *chain);
  expand_side(backend_, p_, scratch_.sub_out.data(), scratch_.coeffs.data());
}

void MhcSide::finish_with(const MoeSideParams& ffn) {
  DI_CHECK_MSG(ffn.side.h == p_.h_out, "a block's FFN side does not read the attention side's output");
  const LinearChainParams* chain = back_.output_chain();
  if (!chain) {
    finish();
    run_moe_side(backend_, ffn, scratch_);
    pre_written_on_host(ffn.side.pre_out);
    return;
  }
  DI_CHECK_MSG(!finished_, "an mHC side's second half ran twice");
  finished_ = true;
  BlockTailParams tail{*chain, p_, reinterpret_cast<const float*>(scratch_.coeffs.data()), ffn};
  tail.attention.h_kept = h_kept_;
  tail.keep_h_out = stream_ && h_kept_;
  tail.keep_pre_out = tail.keep_h_out && ffn.side.pre_out;
  if (backend_.block_tail(tail)) {
    if (stream_) {
      stream_->on_backend = tail.keep_h_out;
      if (tail.keep_pre_out) {
        stream_->pre.keep(ffn.side.pre_out, ffn.side.n_tokens * 4);
      } else {
        pre_written_on_host(ffn.side.pre_out);
      }
    }
    return;
  }
  if (stream_) stream_->fetch(backend_, p_.h, p_.n_tokens * 4 * p_.dim);  // the steps read the host's h
  block_tail_on_backend(backend_, tail, scratch_);
  pre_written_on_host(ffn.side.pre_out);
}

void MhcSide::pre_written_on_host(const float* pre_out) {
  // A pre the backend kept (the one this block's front read) that the FFN side has now written on the host anew.
  if (stream_ && pre_out && stream_->pre.at == pre_out) stream_->pre = {};
}

void mhc_side_on_backend(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub) {
  MhcSide(backend, p, scratch, sub).finish();
}

void block_tail_on_backend(Backend& backend, const BlockTailParams& p, MhcScratch& ffn_scratch) {
  DI_CHECK_MSG(p.ffn.side.h == p.attention.h_out && p.output.second.out != nullptr,
               "a block's tail: the FFN side does not read the attention side's output");
  run_linear_chain(backend, p.output);
  expand_side(backend, p.attention, p.output.second.out, reinterpret_cast<const HcCoefficients*>(p.attention_coeffs));
  run_moe_side(backend, p.ffn, ffn_scratch);
}

void moe_side_on_backend(Backend& backend, const MoeSideParams& p, MhcScratch& scratch) {
  mhc_side_on_backend(backend, p.side, scratch, [&](MhcFront& front, MhcBack& back) {
    front.run();
    MoeParams moe = p.moe;
    moe.u = front.u().data();
    moe.out = back.out().data();
    if (!backend.moe(moe)) moe_on_backend(backend, moe);
  });
}

}  // namespace deepinfer
