// A linear chain (backend.h's LinearChainParams) as the model computes it through a backend's ops: first's ops,
// the activation QDQ of mid on the host, then second; and a projection chain (ProjectionChainParams): first's ops,
// mid's rmsnorm and QDQ on the host, then second. Backend::linear_chain and Backend::projection_chain are the
// whole of each in one call, where a backend has that.
#pragma once

#include <algorithm>

#include "backend/backend.h"

namespace deepinfer {

void linear_chain_on_backend(Backend& backend, const LinearChainParams& p);

// The chain where the backend runs it whole, else its steps through the backend's ops (first's x fetched from the
// backend first where the backend keeps it).
inline void run_linear_chain(Backend& backend, const LinearChainParams& p) {
  if (backend.linear_chain(p)) return;
  if (p.x_kept) {  // the rows the first ops read: n_tokens rows of x_stride from the lowest x
    const float* x = p.first[0].x;
    for (const LinearParams& op : p.first) x = std::min(x, op.x);
    backend.fetch_kept(const_cast<float*>(x), p.n_tokens * p.first[0].x_stride);
  }
  linear_chain_on_backend(backend, p);
}

// The steps; p.q_rope's work is the caller's.
void projection_chain_on_backend(Backend& backend, const ProjectionChainParams& p);

// True where the backend ran the chain whole (and kept q, with p.q_rope's work done, where q_rope is set).
inline bool run_projection_chain(Backend& backend, const ProjectionChainParams& p) {
  if (backend.projection_chain(p)) return true;
  projection_chain_on_backend(backend, p);
  return false;
}

}  // namespace deepinfer
