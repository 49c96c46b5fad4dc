// One side of a block's mHC as the model computes it through a backend (spec B1-B8 around the sub-block, then
// P1 / P2; V4.1 collapses with another side's pre), and a block's FFN side, the MoE in its middle, as the
// model runs it (Backend::moe_side, where a backend has that, is the whole of it in one call).
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/ops.h"

namespace deepinfer {

// The buffers of one side's steps; the caller keeps them from call to call (model_internal.h's BlockBuffers),
// and the steps size them.
struct MhcScratch {
  std::vector<float> mixes, u, uq, sub_out;
  std::vector<HcCoefficients> coeffs;
};

// An mHC side's first half (B1 by backend.hc_mix; per token on the backend's threads B2-B6, hc_split_sinkhorn, B7,
// hc_collapse with the side's pre or p.collapse_pre's row, and B8, rmsnorm), handed to the sub-block not yet run, so
// that the sub-block's first call can take it along where the backend fuses the two. The sub-block runs it once,
// by run() or run_with(), before it reads u.
class MhcFront {
 public:
  // p and scratch must outlive the front.
  MhcFront(Backend& backend, const MhcSideParams& p, MhcScratch& scratch);
  // The arrays u [n_tokens, dim] and u's activation QDQ land in: their values only once the first half has run.
  std::vector<float>& u() { return scratch_.u; }
  std::vector<float>& uq() { return scratch_.uq; }
  // The first half alone; u() holds u after.
  void run();
  // The first half, uq = u's QDQ (chain.qdq_block, chain.v41), then the chain, whose first ops read u() or uq():
  // one call where the backend runs them together (Backend::mhc_projection_chain).
  void run_with(const ProjectionChainParams& chain);
  bool ran() const { return ran_; }

 private:
  Backend& backend_;
  const MhcSideParams& p_;
  MhcScratch& scratch_;
  bool ran_ = false;
};

// The sub-block between the two halves: runs the front (and so has u), writes out [n_tokens, dim].
using MhcSubBlock = std::function<void(MhcFront& front, std::vector<float>& out)>;

// The side: its first half (MhcFront), the sub-block, then P1 / P2 (hc_expand_columns) into p.h_out, and the
// side's pre into p.pre_out where that is set. p.h_out must not be p.h.
void mhc_side_on_backend(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub);

// A block's FFN side: mhc_side_on_backend with the MoE as the sub-block (Backend::moe where the backend runs the
// MoE whole, else moe_on_backend).
void moe_side_on_backend(Backend& backend, const MoeSideParams& p, MhcScratch& scratch);

}  // namespace deepinfer
