// A linear chain (backend.h's LinearChainParams) as the model computes it through a backend's ops: first's ops,
// the activation QDQ of mid on the host, then second; and a projection chain (ProjectionChainParams): first's ops,
// mid's rmsnorm and QDQ on the host, then second. Backend::linear_chain and Backend::projection_chain are the
// whole of each in one call, where a backend has that.
#pragma once

#include "backend/backend.h"

namespace deepinfer {

void linear_chain_on_backend(Backend& backend, const LinearChainParams& p);

// The chain where the backend runs it whole, else its steps through the backend's ops.
inline void run_linear_chain(Backend& backend, const LinearChainParams& p) {
  if (!backend.linear_chain(p)) linear_chain_on_backend(backend, p);
}

void projection_chain_on_backend(Backend& backend, const ProjectionChainParams& p);

inline void run_projection_chain(Backend& backend, const ProjectionChainParams& p) {
  if (!backend.projection_chain(p)) projection_chain_on_backend(backend, p);
}

}  // namespace deepinfer
