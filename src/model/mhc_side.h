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
  std::vector<float> mixes, u, sub_out;
  std::vector<HcCoefficients> coeffs;
};

// The sub-block between the two halves: reads u [n_tokens, dim], writes out [n_tokens, dim].
using MhcSubBlock = std::function<void(const std::vector<float>& u, std::vector<float>& out)>;

// B1 by backend.hc_mix; per token on the backend's threads B2-B6 (hc_split_sinkhorn), B7 (hc_collapse with the
// side's pre, or p.collapse_pre's row) and B8 (rmsnorm); the sub-block; then P1 / P2 (hc_expand_columns) into
// p.h_out, and the side's pre into p.pre_out where that is set. p.h_out must not be p.h.
void mhc_side_on_backend(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub);

// A block's FFN side: mhc_side_on_backend with the MoE as the sub-block (Backend::moe where the backend runs the
// MoE whole, else moe_on_backend).
void moe_side_on_backend(Backend& backend, const MoeSideParams& p, MhcScratch& scratch);

}  // namespace deepinfer
