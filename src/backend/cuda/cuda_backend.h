// The CUDA backend: the Backend ops on the GPU. Weights (and the mHC fn arrays) are uploaded once and stay
// on the device (WeightCache); activations still live on the host, because the model code does, so each
// call copies its inputs in, runs its kernels and copies its outputs back before returning, every copy
// through page-locked staging (an async copy from or to the model's pageable arrays is the driver's staged
// copy, and a device-to-host one blocks the host: one wait per output where a batch wants one). A linears()
// batch (an MoE group's experts) and a sparse_attentions() batch (a prefill block's query tokens) each wait
// for the device once, the attention batch in one launch over rows gathered once. Larger calls keep their
// intermediates on the device and replay their work as a CUDA graph: a block's whole FFN side or MoE
// (Backend::moe_side / moe, DEEPINFER_CUDA_MOE=device), the attention side's front and its output projection
// (Backend::mhc_projection_chain / linear_chain, DEEPINFER_CUDA_LINEAR_CHAIN=device), and with both options a
// block's tail (Backend::block_tail: the output projection, the attention side's expansion, the FFN side).
// Device-resident activations across calls, and graphs of a whole decode step, need the model code to hold its
// activations behind the backend (see README, GPU section).
//
// This header is the class, shared by the files that define its ops (cuda_backend.cpp: construction, the
// weights' placement, kept arrays and graphs; cuda_backend_linear.cpp, _chain, _moe, _index and _attention); no file
// outside src/backend/cuda includes it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <initializer_list>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_cache.h"
#include "backend/expert_placement.h"
#include "backend/host_copy.h"
#include "backend/index_key_arrays.h"
#include "backend/linear_batch_layout.h"
#include "backend/row_mirror.h"
#include "backend/slot_gather.h"
#include "core/flat_index.h"
#include "model/kv_format.h"
#include "model/ops.h"

namespace deepinfer {

using cuda::DeviceBuffer;

inline cuda::LinearEpilogue to_launch(Epilogue e) {
  switch (e) {
    case Epilogue::kBf16: return cuda::LinearEpilogue::kBf16;
    case Epilogue::kF32: return cuda::LinearEpilogue::kF32;
    case Epilogue::kF32AddBias: return cuda::LinearEpilogue::kF32AddBias;
    case Epilogue::kSqrtSoftplus: return cuda::LinearEpilogue::kSqrtSoftplus;
  }
  return cuda::LinearEpilogue::kBf16;
}

// A linear launch of the device weight d: its weight fields set, the op's (x, rows, tokens, out) left to the caller.
inline cuda::LinearLaunch launch_of(const cuda::DeviceWeight& d) {
  cuda::LinearLaunch l;
  l.kind = d.kind;
  l.w = d.data.get<uint8_t>();
  l.row_pitch = d.row_pitch;
  l.scale = d.scale.get<uint8_t>();
  l.scale_pitch = d.scale_pitch;
  l.block = d.block;
  l.k_pad = d.k_pad;
  return l;
}
// The launch of op p on its device weight d, reading x and writing out (device addresses; a bias is the caller's).
inline cuda::LinearLaunch launch_of(const cuda::DeviceWeight& d, const LinearParams& p, const float* x, float* out) {
  cuda::LinearLaunch l = launch_of(d);
  l.x = x;
  l.n_tokens = p.n_tokens;
  l.row_begin = p.row_begin;
  l.n_rows = p.n_rows;
  l.epilogue = to_launch(p.epilogue);
  l.out = out;
  return l;
}

// Launch grids allow at most 65535 blocks along y and z (token and op dimensions here).
inline constexpr size_t kMaxGridYZ = 65535;

// Calls run(subspan) for each maximal run of consecutive items, at most max_run long, whose items all satisfy
// same(first item of the run, item).
template <class T, class Same, class Run>
void for_each_run(std::span<const T> items, size_t max_run, Same same, Run run) {
  for (size_t i = 0; i < items.size();) {
    size_t n = 1;
    while (i + n < items.size() && n < max_run && same(items[i], items[i + n])) ++n;
    run(items.subspan(i, n));
    i += n;
  }
}

// The device decode of n_rows packed cache rows of `format` at `rows` (device) into out [n_rows, n_values].
inline cuda::UnpackRowsLaunch unpack_launch(const KvRowFormat& format, const uint8_t* rows, int64_t n_rows, float* out) {
  cuda::UnpackRowsLaunch u;
  switch (format.kind) {
    case KvRowKind::kV4Kv:
    case KvRowKind::kV41Kv: u.kind = cuda::PackedRowKind::kE4m3; break;
    case KvRowKind::kV41Fp4: u.kind = cuda::PackedRowKind::kE2m1E4m3Scales; break;
    case KvRowKind::kFp4Key: u.kind = cuda::PackedRowKind::kE2m1E8m0Scales; break;
  }
  u.n_values = format.n_values;
  u.n_rope = format.n_rope;
  u.block = format.block;
  u.row_bytes = format.row_bytes;
  u.rows = rows;
  u.n_rows = n_rows;
  u.out = out;
  return u;
}

// The kernel choices of the environment (make_cuda_backend reads them).
struct KernelPaths {
  bool tensor_core_linear = true;  // DEEPINFER_CUDA_LINEAR=mma (the default), mma_staged or mma_split, not fma
  cuda::MmaKernelChoice mma_choice = cuda::MmaKernelChoice::kFastest;  // mma_staged: kStaged, mma_split: kStagedSplit
  bool split_attention = false;    // DEEPINFER_CUDA_ATTENTION=split or fused (the default)
  bool packed_attention_rows = false;  // DEEPINFER_CUDA_ATTENTION_ROWS=packed or decoded (the default)
  bool mma_index_scores = false;   // DEEPINFER_CUDA_INDEX_SCORES=mma or fma (the default)
  bool packed_rows = false;        // DEEPINFER_CUDA_KV=packed or mirror, not floats (the default)
  bool mirror_rows = false;        // DEEPINFER_CUDA_KV=mirror: the attention's packed rows kept on the device
  double mirror_gb = 2;            // DEEPINFER_CUDA_KV_MIRROR_GB: the device memory the kept rows may take
  bool fp8_prompt_linear = false;  // DEEPINFER_CUDA_PROMPT_LINEAR=fp8, fp8_big, fp8_small or wgmma (not mma, the default)
  cuda::Fp8TileChoice fp8_tile = cuda::Fp8TileChoice::kFastest;  // fp8_big: kBig, fp8_small: kSmall
  bool fp8_wgmma = false;          // wgmma: the same ops on the wgmma kernel (sm_90a)
  bool device_moe = false;         // DEEPINFER_CUDA_MOE=device or host (the default)
  bool graphs = true;              // DEEPINFER_CUDA_GRAPHS=on (the default) or off
  bool device_chain = false;       // DEEPINFER_CUDA_LINEAR_CHAIN=device or host (the default)
  bool device_select = false;      // DEEPINFER_CUDA_INDEX_SELECT=device or kept, not host (the default)
  bool keep_selections = false;    // DEEPINFER_CUDA_INDEX_SELECT=kept
  bool wait_every_call = false;    // DEEPINFER_CUDA_WAIT=every-call or as-needed (the default)
  bool split_row_draws = false;    // DEEPINFER_CUDA_ROW_DRAWS=split or whole (the default)
};

// Pinned staging that work queued by a call which did not wait may still read (or write): the next call that
// rewrites it waits for that work first. An event recorded behind the work, not a wait for the whole stream, so that
// work queued since (the calls that read what the first one left on the device) keeps running.
class StagingInUse {
 public:
  // every_call (DEEPINFER_CUDA_WAIT=every-call): the call waits for its work after all, as every other call does.
  void create(bool every_call) {
    every_call_ = every_call;
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  void destroy() { cudaEventDestroy(event_); }
  // The call's work that reads the staging is queued on `stream`, and the call returns without waiting for it.
  void queued(cudaStream_t stream) {
    if (every_call_) {
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    DI_CUDA_CHECK(cudaEventRecord(event_, stream));
    in_use_ = true;
  }
  // Before the staging is written again.
  void wait() {
    if (!in_use_) return;
    DI_CUDA_CHECK(cudaEventSynchronize(event_));
    in_use_ = false;
  }

 private:
  cudaEvent_t event_ = nullptr;
  bool in_use_ = false;
  bool every_call_ = false;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, std::unique_ptr<Backend> host, double weight_budget_gb, const KernelPaths& paths);
  ~CudaBackend() override;  // the buffers that members free belong to device_ too

  const char* name() const override { return name_.c_str(); }
  bool takes_packed_rows() const override { return packed_rows_; }
  bool each_call_waits() const override { return true; }
  // The FP8-operand linear runs prompt tokens only (its sums differ from the tensor-core path's in the last
  // bits), and the host's CPU kernels run the experts kept off the device, whose sums may differ by token kind.
  bool kernels_differ_by_token_kind() const override {
    return fp8_prompt_linear_ || (!host_experts_.empty() && host_->kernels_differ_by_token_kind());
  }
  void set_token_kind(TokenKind kind) override {
    token_kind_ = kind;
    host_->set_token_kind(kind);
  }

  // Every weight but the routed experts goes on the device; then experts in the model's order while the
  // weight budget lasts (DEEPINFER_CUDA_WEIGHT_GB, else the free memory less a reserve for the activations,
  // cache rows and scratch of the calls); the rest stay in host memory and run on the host's CPU kernels. A
  // real V4-Flash checkpoint (149 GB) does not fit one H200 whole.
  Status place_experts(int64_t other_weight_bytes, std::span<const LinearWeight* const> experts) override;

  void linear(const LinearParams& p) override { linears({&p, 1}); }

  // The ops go to the stream together, each with its own device x, bias and output: an x that several ops
  // read (an expert's w1 and w3) is uploaded once, tensor-core ops of one weight kind and K run as one grouped
  // launch (launch_mma_groups), and the stream is synchronised once. A decode step's MoE group (w1 and w3 of
  // every routed expert) is then one launch and one wait instead of one of each per op. The batch's inputs
  // and outputs cross through pinned staging that mirrors the device layout (LinearBatchLayout), one copy each
  // way: a copy to or from the model's pageable arrays is the driver's own staged copy, and one to pageable
  // memory blocks the host, per op.
  void linears(std::span<const LinearParams> ps) override;

  // The op as linears() runs it, then each token's draw on the device (row_draw_kernel.cu; a top-k or nucleus draw's
  // candidates found there, row_top_k_kernel.cu, its draw from them on the host) and its log-probabilities where it asks: the ids and the kept
  // tokens' rows come back, in one wait. Declines (the model then runs linear() and draws itself) for a weight whose op
  // runs on the host's kernels, rows wider than the kernel takes, a top-k or log-probabilities' candidates past
  // kRowTopKMax, or more rows than 32-bit candidate offsets reach (draws_fit).
  bool linear_draws(const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> draws,
                    int32_t* drawn, TokenLogprob* logprobs) override;
  int64_t draws_with_logits_back() const override { return draws_with_logits_back_; }
  // How many of the draws' launches (launch_row_draws, launch_row_top_k) spread their rows over blocks
  // (DEEPINFER_CUDA_ROW_DRAWS=split): for the tests, whose answers are the same either way.
  int64_t split_row_draw_launches() const { return split_row_draw_launches_; }
  // DEEPINFER_CUDA_LINEAR_CHAIN=device, where the last block's tail kept the stream: the logit rows gathered from it, V4's
  // H1-H4 (hc_mix_kernel, then hc_pre_kernel with the head's pre) or V4.1's step 43 (hc_pre_kernel with the kept pre),
  // the head linear as linears() runs a lone op, and the outputs as linear_draws brings them back: one wait, where the
  // host's steps fetched the stream, sent it out again for hc_mix and waited three times.
  bool head_on_kept_stream(const HeadRowsParams& rows, const LinearParams& head, std::span<const uint8_t> keep_out,
                           std::span<const TokenDraw> draws, int32_t* drawn, TokenLogprob* logprobs) override;

  void hc_mix(const HcMixParams& p) override;

  void sparse_attention(const SparseAttentionParams& p) override { sparse_attentions({&p, 1}); }

  // The model's per-row host work between the device calls (norms, rotations, quantisation, the MoE's gathers
  // and sums) on the host's threads, as the fast CPU backend runs it: a 128-token prefill of the V4 bench
  // model has ~90 ms of it on two threads.
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override { host_->for_rows(n, body); }

  // The query tokens of a prefill block in one launch per run of tokens that share the layer's shapes, sink
  // and softmax (all of them, in the model's calls), at most kMaxAttentionTokens at a time.
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override;

  void index_scores(const IndexScoreParams& p) override { index_scores_batch({&p, 1}); }

  // Runs of ops of one n_heads and dim (every op of a model's call) in one launch and one wait each. Their
  // tokens may score against different key arrays (a batched decode step's sequences): each array is uploaded
  // once, up to the most keys any of its tokens reads.
  void index_scores_batch(std::span<const IndexScoreParams> ps) override;

  // DEEPINFER_CUDA_INDEX_SELECT=device: the scores as index_scores_batch computes them, then each token's top-k
  // selection on the device (index_select_kernel.cu: exact, as the model's partial_sort orders them), and only the
  // selections back: n_select indices a token where the scores are one float per key of its context (at 64k tokens,
  // 16k keys a ratio-4 layer), and no selection left on the host. Or, kept for the attention
  // (IndexSelectParams::keep_selected), nothing back and no wait. Declines where a token selects more
  // than kIndexSelectMax keys, and where the kept blocks' bits would not fit the device's shared memory beside the
  // kernel's ~19.5 KB of static shared memory.
  bool index_select_batch(std::span<const IndexSelectParams> ps) override;

  // DEEPINFER_CUDA_MOE=device: the whole MoE of a block on the device, one upload of u, one download of the
  // output and one wait, where the model's own code makes three calls with the routing, SwiGLU, QDQ and sums on
  // the host between them. The same kernels run every linear op (so the outputs are the model's own bits on
  // this backend), the router plans the routed rows on the device and writes the grouped launches'
  // descriptors there, and moe_kernels.cu does the host's exact arithmetic for the rest. It declines (the model
  // then runs its own code) where the model's path would take other kernels or the host: the FMA linear, the
  // FP8-operand prompt linear, experts kept in host memory, weights the tensor cores cannot take exactly, more
  // routed rows than the router's one block plans.
  bool moe(const MoeParams& p) override;

  // DEEPINFER_CUDA_MOE=device: a block's whole FFN side, the device MoE with the mHC side's halves around it
  // (mhc_kernels.cu, the host steps' exact code): h goes in and h_out comes back, one wait where the model's
  // steps make two (hc_mix, then moe) with the coefficients, the collapse, the norm and the expansion on the
  // host between and after them. It declines where moe() does, and for mHC sides the kernels do not take.
  bool moe_side(const MoeSideParams& p) override;

  // DEEPINFER_CUDA_LINEAR_CHAIN=device: the attention's output projection (wo_a's groups, z's QDQ, wo_b) in one
  // call: the first ops' inputs in, their outputs interleaved into mid on the device, the QDQ there
  // (moe_kernels.cu's, the host's exact code), the second op, its output back; one wait where the model's steps
  // make two, and no z crossing to the host and back. The ops run on the kernels linears() gives them, so the
  // output is the model's own bits on this backend. It declines where that takes other kernels (the FMA linear,
  // the FP8-operand prompt linear for prompt tokens), for weights in host memory, for first ops of different
  // weight kinds or k_pad, and for a second op with a bias.
  bool linear_chain(const LinearChainParams& p) override;

  // DEEPINFER_CUDA_MOE=device with DEEPINFER_CUDA_LINEAR_CHAIN=device: a block's tail in one call, the output chain
  // as linear_chain() runs it, the attention side's expansion (hc_post_kernel) of its output on the device, then the
  // FFN side as moe_side() runs it on that stream: the attention's output and the attention side's input and
  // coefficients in, the block's output stream back, one wait where the steps make two, and neither the attention's
  // output nor the stream between the sides crossing to the host. It declines where either part would.
  bool block_tail(const BlockTailParams& p) override;

  // DEEPINFER_CUDA_LINEAR_CHAIN=device: the attention's projections with its q path (A1 with A10 and the other
  // projections of u, A2, qr's QDQ, A3 with I1) in one wait where the steps make two. First's ops are queued as
  // linears() queues them, mid's norm and QDQ run where first wrote mid on the device (rmsnorm_qdq_kernel, the host's
  // exact code), and second's ops as linears() would launch them, so every output is the steps' bits. Declines
  // where second's ops would take other kernels than the tensor-core ones, and where linears() would split first
  // between the host and the device.
  bool projection_chain(const ProjectionChainParams& p) override;

  // The same with the mHC side's first half before it (the attention side's first call): h in, then on the device
  // the mixes, the coefficients, u and its norm (mhc_kernels.cu), uq (act_qdq_kernel), first's ops on u and uq
  // as linears() launches them, and the chain's second stage; u, uq, the coefficients and every output back, one
  // wait where the steps make three (hc_mix, then the chain's two). Where mid need not come back and second's
  // outputs stay on the device (ProjectionChainParams::mid_back), the wait is for the first stage's outputs alone.
  bool mhc_projection_chain(const MhcProjectionParams& p) override;

  // The chains' q_rope and the attention's kept q and outputs need the device chains (DEEPINFER_CUDA_LINEAR_CHAIN=device).
  bool keeps_arrays() const override { return device_chain_; }
  // V4.1's DSpark tap on the kept stream, into a kept array: queued behind the tail that wrote the stream and not
  // waited for (no host staging; the taps come back through fetch_kept).
  bool stream_tap(const StreamTapParams& p) override;
  // V4.1's Engram update on the kept stream: the host gathers each token's table rows as stored (e4m3 codes and e8m0
  // scales, ~1 byte a value: a quarter of the floats the host would decode them to) into pinned staging of its own
  // (the call does not wait); the device decodes them and applies the activation QDQ in one kernel, runs wkv as
  // linears() runs a lone op, then the gate kernel on the kept stream in place. Nothing comes back. Not on the
  // FP8-operand prompt path, whose prepass and groups use the linears() batch's buffers.
  bool engram_gate(const EngramGateParams& p) override;
  // Kept selections need the device's selection and packed rows (the attention gathers every row a selection may
  // name by its stamp, through the row mirror where it is on).
  bool keeps_selections() const override { return keep_selections_ && packed_rows_; }
  // The host's work per row handed over (kernel_bench's BM_KeptSelectionHostSide, one thread of the 2-core Ice Lake
  // machine this was written on): ~2 ns with the row mirror, which finds a page run whole (RowMirror::find_run); 8192
  // such rows cost ~17 us, about a wait, and the work runs while the device runs the layer's queued work. At V4-Flash's
  // 512 selected rows a batch-1 decode step keeps its selections up to ~35k tokens of context. Without the mirror
  // (DEEPINFER_CUDA_KV=packed) every row's bytes cross each call too, 584 B each for V4: 2048 rows (1.2 MB). (A mirror
  // whose arena the device had no memory for copies every row too, as packed does; it says so on stderr once.)
  int64_t kept_selection_extra_rows() const override { return mirror_rows_ ? 8192 : 2048; }
  void fetch_kept(float* host, int64_t n) override;
  // Every array's copy queued behind the work that wrote it, then one wait.
  void fetch_kept_arrays(std::span<const KeptFetch> arrays) override;

 private:
  // The arrays kept on the device between calls (backend.h: a chain's q, the attention's output), each named by its
  // host array: the model's buffers, reused step after step, so a few of them.
  struct KeptArray {
    const float* host = nullptr;
    int64_t n = 0;
    DeviceBuffer dev;
    uint64_t last_use = 0;  // kept_clock_ at its latest keep_array or kept_at
  };
  // At most this many; past it the least recently used goes (a pass's own stream vector, say, whose host array is
  // gone), never one a call has used since (a call uses at most five).
  static constexpr size_t kMaxKeptArrays = 16;
  // The device array kept for [host, host + n): the one kept at host already (grown where n is more), else a new
  // one; the other kept arrays it overlaps are dropped (the model has reused their host arrays).
  float* keep_array(const float* host, int64_t n);
  // The device address of host[0 .. n), which must lie in one kept array.
  const float* kept_at(const float* host, int64_t n);
  // Whether n tokens' rows, at host addresses at(0) .. at(n - 1), lie one after another, `width` floats apart (a
  // block's tokens in one array).
  template <class At>
  static bool one_run(int64_t n, int64_t width, At at) {
    for (int64_t t = 0; t < n; ++t) {
      if (at(t) != at(0) + t * width) return false;
    }
    return true;
  }
  // The device address of n tokens' kept rows of `width` floats (token t's at host address at(t)): where they are,
  // when they are one run of a kept array; else each copied into place at dst (queued on the stream).
  template <class At>
  const float* kept_rows(int64_t n, int64_t width, At at, float* dst) {
    if (one_run(n, width, at)) return kept_at(at(0), n * width);
    for (int64_t t = 0; t < n; ++t) {
      DI_CUDA_CHECK(cudaMemcpyAsync(dst + t * width, kept_at(at(t), width), size_t(width) * 4, cudaMemcpyDeviceToDevice, stream_));
    }
    return dst;
  }

  // The CUDA runtime's current device is per host thread, and the model may run on another thread than the
  // one that opened it (the engine's worker): every entry point makes this backend's device current first.
  void bind_device() const { DI_CUDA_CHECK(cudaSetDevice(device_)); }

  // Whether a projection chain can run whole here at all (the option, the kernels, no weight in host memory).
  bool chain_takes(const ProjectionChainParams& p) const;

  // Whether mhc_kernels.cu takes an FFN side's mHC (4 copies' 24 mixes, a dim it fits) around its MoE.
  static bool side_takes(const MoeSideParams& p);

  // An output chain (Backend::linear_chain) set up on the device by plan_output_chain: the first ops' x rows and
  // descriptors staged in chain_host_ (in_bytes, copied in by enqueue_output_chain), its scratch in chain_scratch_,
  // and its output y [T, n_out] there once the queued work has run.
  struct OutputChain {
    int64_t n_first = 0, k1 = 0, k2 = 0, max_rows = 0, n_out = 0;
    int64_t x_width = 0, x_stride = 0;  // the first ops' n_in and x_stride (x_kept)
    cuda::WeightKind kind = cuda::WeightKind::kFp8;
    size_t in_bytes = 0, desc_at = 0;
    std::vector<cuda::LinearLaunch> launches;  // the first ops'
    std::vector<const float*> kept_x;          // x_kept: each first op's x rows in their kept array
    std::vector<int64_t> mid_column;           // where each first op's output goes in mid
    cuda::LinearLaunch second;
    float* mid = nullptr;
    const float* y = nullptr;
    int64_t mid_width = 0, qdq_block = 0;
    bool v41 = false;
  };
  // Plans p on the device and stages its inputs; false (nothing staged) where the chain takes other kernels than
  // the tensor-core ones (the FMA linear, the FP8-operand prompt linear for prompt tokens), for weights in host
  // memory, for first ops of different weight kinds or k_pad, and for a second op with a bias.
  bool plan_output_chain(const LinearChainParams& p, OutputChain& c);
  // Queues a planned chain up to its output on the device: its staged inputs in, the first ops, their outputs into
  // mid's columns, mid's QDQ (moe_kernels.cu's, the host's exact code), the second op.
  void enqueue_output_chain(const OutputChain& c);
  // A projection chain's second stage (mid's norm and QDQ, second's ops) in chain_scratch_, mirrored in
  // second_host_: the normed mid, mid_q padded to k2, then each op's output.
  // With q_rope, second[0]'s output (q), and with index_q, second[1]'s (the indexer's query) go after the rest, each
  // with its angles, worked on (head_rope_kernel.cu) into its kept array and not copied back: the copy back is the
  // first back_bytes.
  struct ChainSecond {
    int64_t mid_op = -1, k2 = 0, partial_floats = 0;
    size_t normed_at = 0, mid_q_at = 0, back_bytes = 0, bytes = 0;
    std::vector<size_t> out_at;
    size_t cos_sin_at[2] = {};
    float* kept[2] = {};  // second[0]'s and second[1]'s kept arrays (nullptr: not kept)
  };
  static bool kept_output(const ProjectionChainParams& p, size_t i) { return (i == 0 && p.q_rope) || (i == 1 && p.index_q); }
  static bool all_second_outputs_kept(const ProjectionChainParams& p);
  // Finds the first op that writes mid, sizes the scratch, and sets up second's launches (chain_launches_); false
  // where second's ops would take other kernels than the tensor-core ones.
  bool plan_chain_second(const ProjectionChainParams& p, ChainSecond& c);
  // Queues the second stage on mid's device rows [T, mid_width] (mid_norm: the device copy of p.mid_norm's values),
  // and where copy_back, its copy back; its descriptors' upload (upload_mma_descriptors on chain_launches_) queued
  // before.
  void enqueue_chain_second(const ProjectionChainParams& p, const ChainSecond& c, const float* mid_dev, const float* mid_norm,
                            bool copy_back = true);
  // After the wait: the normed mid, mid_q and second's outputs to the caller's arrays.
  void finish_chain_second(const ProjectionChainParams& p, const ChainSecond& c) const;

  // A block's weights as the device MoE reads them: the experts' launch templates on the device ([w1 | w3 | w2],
  // n_experts each: every field but x, out and n_tokens) and the other weights' device copies.
  struct MoeBlock {
    DeviceBuffer templates;
    const cuda::DeviceWeight *gate = nullptr, *shared_w1 = nullptr, *shared_w3 = nullptr, *shared_w2 = nullptr;
    const float* gate_bias = nullptr;  // score routing's bias on the device (nullptr: hash routing)
    cuda::WeightKind expert_kind = cuda::WeightKind::kFp4;
    int64_t k_pad = 0;        // the k_pad of every weight that reads u (gate, w1, w3 and the shared ones)
    int64_t inter_k_pad = 0;  // w2's
  };

  // The block's MoeBlock where the device MoE runs p (the device bound), else nullptr.
  const MoeBlock* device_moe_block(const MoeParams& p);

  // A moe_side() call's mHC side with the device copies of its weights. Its coefficients come back in
  // HcCoefficients' layout (pre first).
  static_assert(sizeof(HcCoefficients) == cuda::kHcCoefficientFloats * sizeof(float));
  struct MhcSideDevice {
    const MhcSideParams* p = nullptr;
    const float *fn = nullptr, *scale = nullptr, *base = nullptr, *norm = nullptr;
  };

  // A block_tail() call's part before its FFN side: the call, and its output chain as planned (and staged).
  struct TailHead {
    const BlockTailParams* p = nullptr;
    const OutputChain* chain = nullptr;
  };

  // The device copies of a side's weights (each uploaded on its first use).
  MhcSideDevice mhc_side_device(const MhcSideParams& side);
  // The side's hc_pre launch on these device rows: h [T, 4 dim], mixes and coefficients [T, 24], the collapse's pre
  // [T, 4] or nullptr, u [T, u_stride].
  static cuda::HcPreLaunch hc_pre_launch(const MhcSideDevice& side, const float* h, float* mixes, const float* collapse_pre,
                                         float* coeffs, float* u, int64_t u_stride);

  // The block's MoeBlock, made on first use (every expert's weights uploaded then); nullptr when the device
  // MoE cannot run it exactly as the model's path would on this backend.
  const MoeBlock* moe_block(const BlockWeights& w);

  // A lone tensor-core launch, as launch_mma_groups runs one (split over K into partials_ where that pays; partials_
  // reserved for it before, outside any graph capture).
  void launch_lone_mma(cuda::LinearLaunch l);

  // moe()'s work: u (padded) and a hash-routed block's tid2eid rows staged, then on the stream u in, the QDQ, the
  // gate and shared expert, the router's plan, the routed rows' gather, w1 / w3 and w2 as one grouped launch
  // each, the M8 sum and the output back (as a CUDA graph, run_as_graph, unless DEEPINFER_CUDA_GRAPHS=off), one wait.
  // With an mHC side (moe_side()): h (and the collapse's pre) in instead of u, the mixes, coefficients, u and its
  // norm on the device before the MoE, the expansion after it, and h_out and the coefficients back. With a tail's
  // head too (block_tail()): the attention side's h and coefficients in instead of h, and before the mixes the
  // output chain (its own inputs staged by plan_output_chain) and the attention side's expansion into h.
  void run_moe(const MoeParams& p, const MoeBlock& block, const MhcSideDevice* side, const TailHead* head);

  // A call's stream work as a CUDA graph (the device MoE or FFN side, the attention's front, the output projection's
  // chain), one per key: captured at the first call and replayed after, one launch where the stream would take its
  // ~10-20 operations one by one.
  // The key holds everything the captured work depends on but the buffers' addresses (GraphKey's words: a kind,
  // then pointers, sizes and bit patterns); a graph also holds the addresses of the buffers it was captured with
  // (scratch, staging, partials, descriptors), and when one of those has grown since, it is captured anew. A device
  // whose runtime refuses to begin, end or instantiate the capture turns graphs off for this backend (said once) and
  // runs the work as it is; an operation refused inside the capture fails its own check, as it would outside one.
  using GraphKey = std::vector<int64_t>;
  static constexpr int64_t kMoeGraph = 1, kFrontGraph = 2, kChainGraph = 3, kTailGraph = 4;  // GraphKey's first word
  template <class T>
  static int64_t word(T v) {
    if constexpr (std::is_pointer_v<T>) {
      return int64_t(reinterpret_cast<uintptr_t>(v));
    } else if constexpr (std::is_floating_point_v<T>) {
      return std::bit_cast<int64_t>(double(v));
    } else {
      return int64_t(v);
    }
  }
  // An mHC side's part of a key.
  static void add_side_words(const MhcSideParams& side, GraphKey& key);
  // An output chain's part of a graph key: the token count, each op's weight, rows, epilogue and place, mid's QDQ.
  static void add_output_chain_words(const LinearChainParams& p, GraphKey& key);

  void run_as_graph(const GraphKey& key, std::vector<const void*> buffers, const std::function<void()>& enqueue);
  void drop_graphs();

  // The draws' logit edits (penalties) and masks (JSON answers), uploaded through pinned memory (a mask as bits) and
  // made on the device to their rows of out_dev [n_tokens, n_rows] in place (a drawing row is never kept), before the
  // draws read them. With originals, the logits the edits change are queued back too (logprob_.originals_host).
  void edit_and_mask_rows(const LinearParams& p, float* out_dev, std::span<const uint8_t> keep_out,
                          std::span<const TokenDraw> draws, bool originals);
  // The log-probabilities' pass over out_dev's rows before their edits (draws[t].logprobs >= 0): each such row's draw
  // at temperature 1 (its total, or the argmax where the best is not finite) and the order's first
  // logprob_candidates there, queued back to logprob_; false where no row asks.
  bool queue_logprob_pass(const LinearParams& p, const float* out_dev, std::span<const TokenDraw> draws);
  // launch_row_draws' and launch_row_top_k's split_scratch for n_rows rows of width: nullptr (one block a row) unless
  // DEEPINFER_CUDA_ROW_DRAWS=split and the rows are fewer than the device's SMs.
  void* row_draw_scratch(int64_t n_rows, int64_t width);
  void* row_top_k_scratch(int64_t n_rows, int64_t width);
  void* split_draw_scratch(DeviceBuffer& buffer, size_t bytes, int64_t n_rows);  // (their one rule; counts the launch)
  // After the draws' launches (device_draws: those with candidates, nullptr where no row has any; n_candidates: all
  // their candidates): the logits the asking rows' chosen ids may have (launch_drawn_logits), queued back to logprob_.
  void queue_drawn_logits(const LinearParams& p, const float* out_dev, const cuda::DeviceTokenDraw* device_draws,
                          int64_t n_candidates);
  // After the wait and the host's draws (drawn; came_back: the rows whose logits came back to out_host): each asking
  // row's log-probabilities into logprobs[t] (token_draw.h's logprobs_from_best), with no further wait.
  void finish_logprobs(const LinearParams& p, const uint8_t* out_host, std::span<const TokenDraw> draws, const int32_t* drawn,
                       bool has_candidates, std::span<const uint8_t> came_back, TokenLogprob* logprobs);
  // The head's outputs [p.n_tokens, p.n_rows] queued into out_dev: every token's draw (draws, their edits applied to
  // out_dev) into drawn (unless nullptr) with its log-probabilities where it asks, and the kept tokens' rows to p.out
  // through out_host (pinned, as large as the outputs), with one wait (two where a nucleus row's logits come back).
  void bring_back_head(const LinearParams& p, float* out_dev, uint8_t* out_host, std::span<const uint8_t> keep_out,
                       std::span<const TokenDraw> draws, int32_t* drawn, TokenLogprob* logprobs);
  // Queues a linears() batch on the stream up to its outputs' copy back to staging (without copy_outputs: up to its
  // last launch, the outputs left in batch_); false when it has no work.
  bool enqueue_linears(std::span<const LinearParams> ps, bool copy_outputs = true);

  static bool same_mma_shape(const cuda::LinearLaunch& a, const cuda::LinearLaunch& b) {
    return a.kind == b.kind && a.k_pad == b.k_pad;
  }
  // The order launch_mma_groups runs launches in: by weight kind, then k_pad, so each shape's run is contiguous
  // (stable: sorting again changes nothing).
  static void sort_by_mma_shape(std::vector<cuda::LinearLaunch>& launches);
  // The partials_ floats that launch_mma_groups needs for these launches (sorted by sort_by_mma_shape): the largest
  // lone op's split over K.
  int64_t mma_group_partial_floats(std::span<const cuda::LinearLaunch> launches) const;

  // The tensor-core launches of a linears() batch: those that share a weight kind and k_pad go as one grouped
  // launch over an uploaded array of their descriptors (through descriptors_host to descriptors, which nothing
  // queued may still read), a lone one as a plain launch.
  void launch_mma_groups(std::vector<cuda::LinearLaunch>& launches, cuda::PinnedBuffer& descriptors_host,
                         DeviceBuffer& descriptors);
  // launch_mma_groups in two steps: the launches sorted and their descriptors' upload queued, then the launches.
  // A CUDA graph captures the second alone: a captured upload would copy whatever the shared staging holds when
  // the graph replays (another graph's descriptors, captured since).
  void upload_mma_descriptors(std::vector<cuda::LinearLaunch>& launches, cuda::PinnedBuffer& descriptors_host,
                              DeviceBuffer& descriptors);
  void launch_uploaded_mma_groups(std::span<const cuda::LinearLaunch> all, const DeviceBuffer& descriptors);

  // DEEPINFER_CUDA_PROMPT_LINEAR=fp8: a prompt token's op whose x the caller quantised to e4m3 blocks
  // (x_e4m3_block) and whose FP8 or FP4 weights have tensor-core-exact scales runs on FP8 operands; every other
  // op goes where it goes without it.
  bool takes_fp8_path(const LinearParams& p, const cuda::DeviceWeight& w) const;

  // The FP8-operand launches of a linears() batch. Each distinct x (an expert's w1 and w3 share theirs) gets
  // its codes and scales in fp8_scratch_, from one grouped prepass; then ops of one weight kind and token class
  // (as its body sorts them) run as one grouped launch, a lone op as a plain launch. All of it follows the batch's
  // input copy on the one stream.
  void launch_fp8_groups();

  // Query tokens of one n_heads and dim: q and weights gathered into pinned staging, each token's key count,
  // output offset and first key row, then the keys of every distinct key array (IndexKeyArrays: float arrays
  // first, then the packed arrays' bytes, which a kernel decodes on the device behind the float rows); one
  // launch, the scores back in one copy.
  // With `selects` (index_select_batch: batch[i] is selects[i].score), each token's selection after its scores,
  // and the selections back instead of the scores.
  void score(std::span<const IndexScoreParams> batch, std::span<const IndexSelectParams> selects = {});

  // DEEPINFER_CUDA_KV=mirror for score(): every packed array's keys as one group (key_group_, in their device row
  // order: array after array behind the float keys, each page's run recorded) through the row mirror (plan_upload into
  // key_upload_), so that a decode step copies only the keys written since the last (one per 4 positions) instead of
  // every key of the context, and finds the pages' runs whole. False (nothing planned) where the mirror does not take
  // them: off, packed arrays of different formats, keys without stamps, more keys than the arena holds.
  bool plan_key_upload(const std::vector<IndexKeyArrays::Array>& arrays, int64_t n_float_rows);

  // DEEPINFER_CUDA_KV=mirror: the packed rows of one size that the device keeps.
  struct RowArena {
    RowMirror mirror;
    DeviceBuffer bytes;  // [mirror.capacity(), row_bytes]
  };
  // How a packed group of attend() goes over: the rows whose bytes are staged (all of them, or those its
  // arena lacks), and with an arena every row's slot there followed by the staged rows' slots.
  struct PackedUpload {
    RowArena* arena = nullptr;
    std::vector<int64_t> staged;  // indices into the group's rows
    std::vector<int64_t> slots;   // arena: [n rows] their slots, then [staged.size()] the staged rows' slots
    size_t byte_at = 0;           // the staged bytes' offset among all staged packed bytes
    int64_t slot_at = 0;          // arena: slots' offset among all slot words
  };
  // The arena of packed rows of row_bytes, made on first use with a third of the mirror's budget (a model has at
  // most three packed row sizes: V4 584 B attention rows and its index keys, V4.1 528 and 288 B attention rows and
  // its index keys; 68 B keys at index_head_dim 128); nullptr when the device had no room for it.
  RowArena* arena_for(int64_t row_bytes);

  // A packed group's upload: with the mirror (every row stamped, rows a multiple of 4 bytes for the scatter,
  // the group no larger than its arena) the rows its arena lacks, else all of them (mirror_group_slots: the group's
  // page runs, a kept selection's or the index keys', looked up whole, the other rows' lookups on the host's threads,
  // since a 256-sequence decode step reads ~160k rows a layer; the placing of the missing rows, few in a decode step,
  // on this one).
  void plan_upload(const SlotGather::PackedGroup& g, PackedUpload& u);

  // The bytes of the rows u stages from group g, one after another into dst, on the host's threads.
  void copy_staged_rows(const SlotGather::PackedGroup& g, const PackedUpload& u, uint8_t* dst);

  // DEEPINFER_CUDA_ATTENTION=split: whether a slot list of n_slots takes the split kernels, which fit fewer slots in
  // shared memory than the fused one (~5,900 on an H200); a longer one takes the fused kernel.
  bool takes_split(int64_t n_slots) const {
    return split_attention_ && cuda::sparse_attention_split_shared_bytes(n_slots) <= max_shared_bytes_;
  }

  // Tokens per attention launch: a prefill block (the model's 256) or a batched decode step's 256 sequences
  // in one launch and one wait, not four. The split path's scores scratch is then up to 256 x 64 heads x 1152
  // slots x 4 B = 75 MB.
  static constexpr size_t kMaxAttentionTokens = 256;

  // Tokens that share n_heads, head_dim, sink and softmax. The rows they read (KV cache rows in host memory)
  // are gathered once (SlotGather) into pinned staging. Float rows go over as they are; packed cache rows
  // (takes_packed_rows) go over as their bytes, a group per format, and are decoded on the device behind the
  // float rows, or (DEEPINFER_CUDA_ATTENTION_ROWS=packed) read as they are by the attention kernels, which then
  // never write and read a float copy of each row (4 bytes a value where the rows hold about one). Each token's
  // slots are indices into the rows, padded with empty slots to the longest list: an empty slot changes no
  // output (its weight is 0 and its 64-block's maximum is -inf).
  void attend(std::span<const SparseAttentionParams> batch);

  // The words launch_selected_slots reads for attend()'s tokens, then the tables (gather_'s) behind them, at dst:
  // each kept selection found by its host address among those the last keeping index_select_batch left.
  void keep_selection_slots(std::span<const SparseAttentionParams> batch, uint8_t* dst);

  // attend()'s outputs (in out_) rotated back (each token's out_rope) into their kept arrays, one launch where they
  // are a block's consecutive tokens. Not waited for: nothing comes back to the host, and the call that reads the
  // outputs (the block's tail, a fetch) is queued behind it on the stream, so the host prepares and queues that call
  // while the attention runs. Only attend()'s own pinned staging, which the queued copies still read, must outlive
  // them: the next attend() waits for this one's work first (attention_staging_).
  void keep_outputs(std::span<const SparseAttentionParams> batch);

  std::string name_;
  int device_ = 0;
  // The host's CPU kernels (the fast backend): the model's per-row work, the attention's row gathers, and
  // the linear ops of experts kept in host memory (place_experts).
  std::unique_ptr<Backend> host_;
  double weight_budget_gb_ = -1;  // DEEPINFER_CUDA_WEIGHT_GB; < 0: the free memory less a reserve
  std::unordered_set<const void*> host_experts_;  // data pointers of the expert weights left in host memory
  std::vector<LinearParams> device_ops_, host_ops_;  // a linears() batch split between them
  bool packed_rows_ = false;  // KernelPaths' choices
  bool tensor_core_linear_ = true;
  cuda::MmaKernelChoice mma_choice_ = cuda::MmaKernelChoice::kFastest;
  bool split_attention_ = false;
  bool packed_attention_rows_ = false;
  bool mma_index_scores_ = false;
  bool mirror_rows_ = false;
  double mirror_gb_ = 2;
  size_t max_shared_bytes_ = 0;     // per block, opted in
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cuda::WeightCache weights_;
  DeviceBuffer x_, out_, rows_, index_, scores_;  // per-op scratch, grown on demand
  // A linears() batch: its ops' weights and widths, where their operands sit in batch_ (and staging_, pinned).
  std::vector<const cuda::DeviceWeight*> weights_of_;
  std::vector<int64_t> k_, k_pad_;
  LinearBatchLayout layout_;
  DeviceBuffer batch_;
  cuda::PinnedBuffer staging_;  // batch_'s host mirror (and hc_mix's x, then its output)
  // linear_draws(), head_on_kept_stream(): the tokens' ids, their draws, the top-k and nucleus draws' candidates, the
  // nucleus draws' totals, the rows' logit edits (penalties) and where each row's begin, the rows' masks (bits) and
  // which mask each row takes (-1: none)
  DeviceBuffer drawn_dev_, draws_dev_, candidates_dev_, totals_dev_, edits_dev_, edits_at_dev_, masks_dev_, mask_of_dev_;
  cuda::PinnedBuffer drawn_host_, draws_host_, candidates_host_, totals_host_, edits_host_, edits_at_host_, masks_host_,
      mask_of_host_;
  // Their log-probabilities (queue_logprob_pass, queue_drawn_logits, finish_logprobs): the pass's draws at temperature
  // 1 (skip: the rows not asking), its answers, totals and candidates, the edits' original logits, and the logits at
  // the device's drawn ids and at the draws' candidates.
  struct LogprobStaging {
    DeviceBuffer draws, drawn, totals, candidates, originals, drawn_logits, candidate_logits;
    cuda::PinnedBuffer draws_host, drawn_host, totals_host, candidates_host, originals_host, drawn_logits_host,
        candidate_logits_host;
  } logprob_;
  DeviceBuffer row_draw_scratch_, row_top_k_scratch_;
  int64_t split_row_draw_launches_ = 0;
  int64_t draws_with_logits_back_ = 0;
  DeviceBuffer head_scratch_;    // head_on_kept_stream()'s rows, gathered streams and pre, mixes and y (outputs in batch_)
  cuda::PinnedBuffer head_rows_host_;
  std::vector<cuda::LinearLaunch> launches_;  // its tensor-core launches
  DeviceBuffer descriptors_;                  // and their descriptors, on the device
  // Its FP8-operand launches (launch_fp8_groups): per launch the byte offset of its x's codes in fp8_scratch_
  // and the earlier launch whose codes it shares; the prepass's launches; their descriptors.
  bool fp8_prompt_linear_ = false;
  cuda::Fp8TileChoice fp8_tile_ = cuda::Fp8TileChoice::kFastest;
  bool fp8_wgmma_ = false;
  TokenKind token_kind_ = TokenKind::kGenerated;
  std::vector<cuda::LinearLaunch> fp8_launches_, fp8_codes_;
  std::vector<size_t> fp8_code_at_, fp8_code_of_;
  DeviceBuffer fp8_scratch_, fp8_descriptors_;
  cuda::PinnedBuffer fp8_descriptors_host_;
  DeviceBuffer partials_;                     // a lone launch's K slices' sums (split over K)
  cuda::PinnedBuffer descriptors_host_;
  // attend(): the rows its tokens read, and pinned staging for the copies.
  SlotGather gather_;
  // DEEPINFER_CUDA_KV=mirror: per packed row size, the rows the device keeps (nullptr: no room was left).
  std::unordered_map<int64_t, std::unique_ptr<RowArena>> arenas_;
  std::vector<PackedUpload> uploads_;
  cuda::PinnedBuffer rows_host_, slot_host_, out_host_;
  cuda::PinnedBuffer rope_host_;  // keep_outputs(): the tokens' angles, and on the device
  DeviceBuffer rope_dev_;
  StagingInUse attention_staging_;  // keep_outputs() does not wait: the staging above is in use until its work ran
  // score(): its key arrays and each token's; q and weights, the per-token offsets and the keys (pinned), and
  // the offsets on the device.
  IndexKeyArrays key_arrays_;
  cuda::PinnedBuffer index_host_;
  SlotGather::PackedGroup key_group_;  // DEEPINFER_CUDA_KV=mirror: the packed keys (plan_key_upload)
  std::vector<IndexScoreParams> select_scores_;  // index_select_batch(): its runs' scores
  PackedUpload key_upload_;
  DeviceBuffer index_meta_;
  // Kept selections (IndexSelectParams::keep_selected): the last keeping index_select_batch's, each token's named by
  // its host address, at an offset in selections_dev_ (int32). score() does not wait then: index_host_ is in use
  // until its work ran.
  struct KeptSelection {
    int64_t n = 0;   // its n_select
    int64_t at = 0;  // its offset in selections_dev_
  };
  std::vector<KeptSelection> kept_selections_;
  FlatIndex kept_selection_index_{3};  // a kept selection's host address -> its entry in kept_selections_
  int64_t kept_selected_ = 0;
  DeviceBuffer selections_dev_;
  StagingInUse index_staging_;
  // engram_gate's: the gathered rows' stored bytes (staging and device copy), their floats after the QDQ (wkv's
  // x), and wkv's output (the gate's keys and value).
  cuda::PinnedBuffer engram_host_;
  DeviceBuffer engram_rows_, engram_x_, engram_kv_;
  StagingInUse engram_staging_;
  // moe(): DEEPINFER_CUDA_MOE=device, the blocks it has set up (nullptr: one it declines), its scratch on the
  // device and its pinned staging (u and the hash rows in, the output back).
  bool device_moe_ = false;
  std::unordered_map<const BlockWeights*, std::unique_ptr<MoeBlock>> moe_blocks_;
  DeviceBuffer moe_scratch_;
  cuda::PinnedBuffer moe_host_;
  // A block's tail with nothing to bring back (its stream kept, and V4.1's pre) does not wait: moe_host_ and
  // chain_host_ are in use until its work ran.
  StagingInUse tail_staging_;
  // DEEPINFER_CUDA_GRAPHS: the captured graphs (run_as_graph) of the device MoE and FFN side, the attention's front
  // and the output projection's chain, at most kMaxGraphs.
  bool graphs_ = true;
  struct CapturedGraph {
    cudaGraphExec_t exec = nullptr;
    std::vector<const void*> buffers;  // the buffers' addresses as captured
  };
  static constexpr size_t kMaxGraphs = 4096;
  std::map<GraphKey, CapturedGraph> graphs_by_key_;
  // linear_chain() and projection_chain(): DEEPINFER_CUDA_LINEAR_CHAIN=device, their device scratch and pinned staging.
  bool device_chain_ = false;
  bool device_select_ = false;  // index_select_batch(): DEEPINFER_CUDA_INDEX_SELECT=device or kept
  bool keep_selections_ = false;  // DEEPINFER_CUDA_INDEX_SELECT=kept
  bool split_row_draws_ = false;  // DEEPINFER_CUDA_ROW_DRAWS=split (row_draw_scratch, row_top_k_scratch)
  DeviceBuffer chain_scratch_;
  cuda::PinnedBuffer chain_host_;   // an output chain's staging (linear_chain(), block_tail())
  cuda::PinnedBuffer second_host_;  // a projection chain's second stage's (projection_chain(), mhc_projection_chain())
  // A front that does not wait for its second stage (mhc_projection_chain()): second_host_'s angles are in use until
  // that stage ran, and the front waits for front_back_, recorded behind the copy back of first's outputs.
  StagingInUse second_staging_;
  cudaEvent_t front_back_ = nullptr;
  // projection_chain(): its second stage's launches and their descriptors (the first stage's are linears()'s).
  std::vector<cuda::LinearLaunch> chain_launches_;
  cuda::PinnedBuffer chain_descriptors_host_;
  DeviceBuffer chain_descriptors_;
  // mhc_projection_chain(): its front's scratch and staging, and its first stage's launches and descriptors.
  DeviceBuffer front_scratch_;
  cuda::PinnedBuffer front_host_;
  std::vector<cuda::LinearLaunch> front_launches_;
  cuda::PinnedBuffer front_descriptors_host_;
  DeviceBuffer front_descriptors_;
  std::vector<KeptArray> kept_;  // keep_array()
  uint64_t kept_clock_ = 0;
};

}  // namespace deepinfer
