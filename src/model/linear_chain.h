// A linear chain (backend.h's LinearChainParams) as the model computes it through a backend's ops: first's ops,
// the activation QDQ of mid on the host, then second. Backend::linear_chain is the whole of it in one call, where a
// backend has that.
#pragma once

#include "backend/backend.h"

namespace deepinfer {

void linear_chain_on_backend(Backend& backend, const LinearChainParams& p);

// The chain where the backend runs it whole, else its steps through the backend's ops.
inline void run_linear_chain(Backend& backend, const LinearChainParams& p) {
  if (!backend.linear_chain(p)) linear_chain_on_backend(backend, p);
}

}  // namespace deepinfer
