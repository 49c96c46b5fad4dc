#include "model/mhc_side.h"

#include <algorithm>

#include "model/model_internal.h"
#include "model/moe.h"

namespace deepinfer {

void mhc_side_on_backend(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub) {
  const int64_t T = p.n_tokens, D = p.dim;
  const MhcWeights& m = p.mhc;
  scratch.mixes.resize(size_t(T * m.n_mix));
  scratch.u.resize(size_t(T * D));
  scratch.sub_out.resize(size_t(T * D));
  scratch.coeffs.resize(size_t(T));
  // Named through references: the lambdas run on the backend's threads (model_internal.h's BlockBuffers).
  std::vector<float>& mixes = scratch.mixes;
  std::vector<float>& u = scratch.u;
  std::vector<HcCoefficients>& coeffs = scratch.coeffs;
  backend.hc_mix({p.h, T, 4 * D, m.fn, m.n_mix, m.eps, mixes.data()});  // B1
  backend.for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      coeffs[size_t(t)] = hc_split_sinkhorn(&mixes[size_t(t * m.n_mix)], m.scale, m.base, m.sinkhorn_iters, m.hc_eps);
      const float* pre = p.collapse_pre ? p.collapse_pre + t * 4 : coeffs[size_t(t)].pre;
      float* ut = &u[size_t(t * D)];
      hc_collapse(p.h + t * 4 * D, pre, D, ut);  // B7
      rmsnorm(ut, m.norm, D, m.eps, ut);         // B8
    }
  });
  sub(u, scratch.sub_out);
  const std::vector<float>& sub_out = scratch.sub_out;
  for_token_ranges(backend, T, D, kColumnRange, [&](int64_t t, int64_t i0, int64_t i1) {  // P1 / P2
    hc_expand_columns(p.h + t * 4 * D, &sub_out[size_t(t * D)], coeffs[size_t(t)], D, i0, i1, p.h_out + t * 4 * D);
  });
  if (p.pre_out) {
    for (int64_t t = 0; t < T; ++t) std::copy_n(coeffs[size_t(t)].pre, 4, p.pre_out + t * 4);
  }
}

void moe_side_on_backend(Backend& backend, const MoeSideParams& p, MhcScratch& scratch) {
  mhc_side_on_backend(backend, p.side, scratch, [&](const std::vector<float>& u, std::vector<float>& out) {
    MoeParams moe = p.moe;
    moe.u = u.data();
    moe.out = out.data();
    if (!backend.moe(moe)) moe_on_backend(backend, moe);
  });
}

}  // namespace deepinfer
