#include "model/linear_chain.h"

#include <algorithm>

#include "backend/host_copy.h"
#include "model/model_internal.h"
#include "model/ops.h"

namespace deepinfer {

void linear_chain_on_backend(Backend& backend, const LinearChainParams& p) {
  backend.linears(p.first);
  act_qdq_rows(backend, p.mid, p.n_tokens, p.mid_width, p.qdq_block, p.v41);
  backend.linear(p.second);
}

void projection_chain_on_backend(Backend& backend, const ProjectionChainParams& p) {
  backend.linears(p.first);
  backend.for_rows(p.n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = p.mid + t * p.mid_width;
      rmsnorm(row, p.mid_norm, p.mid_width, p.eps, row);
    }
  });
  copy_on_threads(&backend, p.mid_q, p.mid, size_t(p.n_tokens * p.mid_width) * sizeof(float));
  act_qdq_rows(backend, p.mid_q, p.n_tokens, p.mid_width, p.qdq_block, p.v41);
  if (!p.second.empty()) backend.linears(p.second);
}

}  // namespace deepinfer
