// One side of a block's mHC as the model computes it through a backend (spec B1-B8 around the sub-block, then
// P1 / P2; V4.1 collapses with another side's pre), a block's FFN side, the MoE in its middle, as the model runs
// it (Backend::moe_side, where a backend has that, is the whole of it in one call), and a block's tail, the
// attention's output projection through the FFN side (Backend::block_tail).
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/ops.h"

namespace deepinfer {

// An array an op left on a backend that keeps arrays, named by its host address (Backend::fetch_kept): its host copy
// is stale until fetched.
struct KeptArray {
  const float* at = nullptr;  // the host array while the backend holds its values, else nullptr
  int64_t n = 0;
  bool on_backend() const { return at != nullptr; }
  void keep(const float* host, int64_t floats) {
    at = host;
    n = floats;
  }
  // The values at their host array again.
  void fetch(Backend& backend) {
    std::vector<KeptFetch> arrays;
    fetch_with(arrays);
    if (!arrays.empty()) backend.fetch_kept_arrays(arrays);
  }
  // fetch() together with other arrays: the array appended to `arrays`, which the caller fetches
  // (Backend::fetch_kept_arrays) before anything reads it.
  void fetch_with(std::vector<KeptFetch>& arrays) {
    if (!at) return;
    arrays.push_back({const_cast<float*>(at), n});
    at = nullptr;
  }
};

// A forward pass's residual stream between blocks, where the backend keeps arrays: a block's tail may leave it on
// the backend (BlockTailParams::keep_h_out) for the next block's front to read there (MhcProjectionParams::
// h_on_backend); its host array is then stale until fetched, which every host step that reads or writes it does first.
// V4.1's pre from block to block (the FFN side's, which the next block's attention side collapses with) the same
// (BlockTailParams::keep_pre_out, MhcProjectionParams::pre_on_backend).
struct KeptStream {
  bool on_backend = false;
  // The stream's n floats at h on the host again.
  void fetch(Backend& backend, const float* h, int64_t n) {
    if (!on_backend) return;
    backend.fetch_kept(const_cast<float*>(h), n);
    on_backend = false;
  }
  void fetch(Backend& backend, std::vector<float>& h) { fetch(backend, h.data(), int64_t(h.size())); }
  // The stream and the pre, as KeptArray::fetch_with.
  void fetch_with(std::vector<KeptFetch>& arrays, std::vector<float>& h) {
    if (on_backend) arrays.push_back({h.data(), int64_t(h.size())});
    on_backend = false;
    pre.fetch_with(arrays);
  }

  KeptArray pre;
};

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
  // stream: where p.h is, for an attention side whose h is the pass's stream (nullptr: on the host).
  MhcFront(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, KeptStream* stream = nullptr);
  // The arrays u [n_tokens, dim] and u's activation QDQ land in: their values only once the first half has run, and
  // not after a run_with that the backend ran whole (which reads them only as the chain's x).
  std::vector<float>& u() { return scratch_.u; }
  std::vector<float>& uq() { return scratch_.uq; }
  // The first half alone; u() holds u after.
  void run();
  // The first half, uq = u's QDQ (chain.qdq_block, chain.v41), then the chain, whose first ops read u() or uq():
  // one call where the backend runs them together (Backend::mhc_projection_chain). True where the backend ran the
  // chain whole (and kept q, q_rope's work done, where chain.q_rope is set); false: the caller does q_rope's work.
  bool run_with(const ProjectionChainParams& chain);
  bool ran() const { return ran_; }
  // Whether the backend keeps a copy of the side's h (a backend that keeps arrays, after run_with ran whole).
  bool h_kept() const { return h_kept_; }

 private:
  Backend& backend_;
  const MhcSideParams& p_;
  MhcScratch& scratch_;
  KeptStream* stream_;
  bool ran_ = false;
  bool h_kept_ = false;
};

// The sub-block's output, and the last call that writes it: a sub-block whose last call is a linear chain writing
// its whole output (the attention's output projection) hands that chain over unrun (set_output_chain), so that the
// side runs it with its second half, or the block with the next side (MhcSide::finish_with, Backend::block_tail).
class MhcBack {
 public:
  MhcBack(std::vector<float>& out, int64_t n_tokens, int64_t dim) : out_(out), n_tokens_(n_tokens), dim_(dim) {}
  MhcBack(const MhcBack&) = delete;  // the kept chain's first points into first_
  MhcBack& operator=(const MhcBack&) = delete;
  // The sub-block's output [n_tokens, dim]: its values only once the output chain (if any) has run.
  std::vector<float>& out() { return out_; }
  // The chain whose second op writes out() whole, kept (its ops copied) for the side to run. Every array it reads
  // or writes must stay as it is until the side has finished; the sub-block makes no backend call after this.
  void set_output_chain(const LinearChainParams& chain);
  // The kept chain, or nullptr.
  const LinearChainParams* output_chain() const { return has_chain_ ? &chain_ : nullptr; }

 private:
  std::vector<float>& out_;
  int64_t n_tokens_, dim_;
  std::vector<LinearParams> first_;
  LinearChainParams chain_;
  bool has_chain_ = false;
};

// The sub-block between the two halves: runs the front (and so has u), writes back.out() [n_tokens, dim] or hands
// over the chain that writes it.
using MhcSubBlock = std::function<void(MhcFront& front, MhcBack& back)>;

// A side whose first half and sub-block have run and whose second half has not: the sub-block's output chain (if
// it handed one over), then P1 / P2 (hc_expand_columns) into p.h_out. The side's pre is in p.pre_out (where that is
// set) from construction on. p, scratch and what the chain reads must outlive it; p.h_out must not be p.h.
class MhcSide {
 public:
  // stream: as MhcFront's; with it, the block's tail may leave its output stream on the backend (finish_with).
  MhcSide(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub, KeptStream* stream = nullptr);
  // The second half alone.
  void finish();
  // The second half, then the block's FFN side on p.h_out (ffn.side.h == p.h_out): one call where the backend runs
  // the output chain, the expansion and the FFN side together (Backend::block_tail), else their steps, the FFN
  // side's on this side's scratch once the expansion is done with it.
  void finish_with(const MoeSideParams& ffn);

 private:
  Backend& backend_;
  const MhcSideParams& p_;
  MhcScratch& scratch_;
  MhcBack back_;
  KeptStream* stream_;
  bool finished_ = false;
  bool h_kept_ = false;  // the front's MhcFront::h_kept
  void pre_written_on_host(const float* pre_out);
};

// The side whole: MhcSide, then its second half.
void mhc_side_on_backend(Backend& backend, const MhcSideParams& p, MhcScratch& scratch, const MhcSubBlock& sub);

// A block's FFN side: mhc_side_on_backend with the MoE as the sub-block (Backend::moe where the backend runs the
// MoE whole, else moe_on_backend).
void moe_side_on_backend(Backend& backend, const MoeSideParams& p, MhcScratch& scratch);

// The FFN side where the backend runs it whole (Backend::moe_side), else its steps.
inline void run_moe_side(Backend& backend, const MoeSideParams& p, MhcScratch& scratch) {
  if (!backend.moe_side(p)) moe_side_on_backend(backend, p, scratch);
}

// A block's tail by its steps (backend.h's BlockTailParams): the output chain (run_linear_chain), the attention
// side's expansion, then run_moe_side with ffn_scratch (which may be the scratch whose arrays hold the chain's
// output and the coefficients: the expansion is done with them first).
void block_tail_on_backend(Backend& backend, const BlockTailParams& p, MhcScratch& ffn_scratch);

}  // namespace deepinfer
