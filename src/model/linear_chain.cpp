#include "model/linear_chain.h"

#include "model/model_internal.h"

namespace deepinfer {

void linear_chain_on_backend(Backend& backend, const LinearChainParams& p) {
  backend.linears(p.first);
  act_qdq_rows(backend, p.mid, p.n_tokens, p.mid_width, p.qdq_block, p.v41);
  backend.linear(p.second);
}

}  // namespace deepinfer
