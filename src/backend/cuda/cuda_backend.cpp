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
#include "backend/index_key_arrays.h"
#include "backend/linear_batch_layout.h"
#include "backend/row_mirror.h"
#include "backend/slot_gather.h"
#include "core/flat_index.h"
#include "model/kv_format.h"
#include "model/ops.h"

namespace deepinfer {

namespace {

using cuda::DeviceBuffer;

cuda::LinearEpilogue to_launch(Epilogue e) {
  switch (e) {
    case Epilogue::kBf16: return cuda::LinearEpilogue::kBf16;
    case Epilogue::kF32: return cuda::LinearEpilogue::kF32;
    case Epilogue::kF32AddBias: return cuda::LinearEpilogue::kF32AddBias;
    case Epilogue::kSqrtSoftplus: return cuda::LinearEpilogue::kSqrtSoftplus;
  }
  return cuda::LinearEpilogue::kBf16;
}

// A linear launch of the device weight d: its weight fields set, the op's (x, rows, tokens, out) left to the caller.
cuda::LinearLaunch launch_of(const cuda::DeviceWeight& d) {
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
cuda::LinearLaunch launch_of(const cuda::DeviceWeight& d, const LinearParams& p, const float* x, float* out) {
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
constexpr size_t kMaxGridYZ = 65535;

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
cuda::UnpackRowsLaunch unpack_launch(const KvRowFormat& format, const uint8_t* rows, int64_t n_rows, float* out) {
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

// The value of environment variable `name`, the first of `allowed` when it is unset; nullopt with *error set when
// it is none of them.
std::optional<std::string> env_choice(const char* name, const std::vector<const char*>& allowed, std::string* error) {
  const char* set = std::getenv(name);
  const std::string value = set ? set : allowed.front();
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return value;
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  *error = std::string(name) + " must be one of " + list + ", not '" + value + "'";
  return std::nullopt;
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
  CudaBackend(int device, std::unique_ptr<Backend> host, double weight_budget_gb, const KernelPaths& paths)
      : device_(device), host_(std::move(host)), weight_budget_gb_(weight_budget_gb), packed_rows_(paths.packed_rows),
        tensor_core_linear_(paths.tensor_core_linear), mma_choice_(paths.mma_choice), split_attention_(paths.split_attention),
        packed_attention_rows_(paths.packed_attention_rows), mma_index_scores_(paths.mma_index_scores),
        mirror_rows_(paths.mirror_rows), mirror_gb_(paths.mirror_gb), fp8_prompt_linear_(paths.fp8_prompt_linear),
        fp8_tile_(paths.fp8_tile), fp8_wgmma_(paths.fp8_wgmma), device_moe_(paths.device_moe), graphs_(paths.graphs),
        device_chain_(paths.device_chain), device_select_(paths.device_select),
        keep_selections_(paths.keep_selections) {
    bind_device();
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = std::string("cuda-") + prop.name;
    max_shared_bytes_ = prop.sharedMemPerBlockOptin;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    attention_staging_.create(paths.wait_every_call);
    tail_staging_.create(paths.wait_every_call);
    index_staging_.create(paths.wait_every_call);
    engram_staging_.create(paths.wait_every_call);
    second_staging_.create(paths.wait_every_call);
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&front_back_, cudaEventDisableTiming));
  }
  ~CudaBackend() override {  // the buffers that members free belong to device_ too
    cudaSetDevice(device_);  // not bind_device(): a destructor must not abort
    cudaStreamSynchronize(stream_);  // work a call did not wait for reads the buffers freed below
    drop_graphs();
    attention_staging_.destroy();
    tail_staging_.destroy();
    index_staging_.destroy();
    engram_staging_.destroy();
    second_staging_.destroy();
    cudaEventDestroy(front_back_);
    cudaStreamDestroy(stream_);
  }

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
  Status place_experts(int64_t other_weight_bytes, std::span<const LinearWeight* const> experts) override {
    bind_device();
    size_t free_bytes = 0, total_bytes = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double reserve = std::max(4.0 * (1 << 30), 0.08 * double(total_bytes));
    // The row mirror's arenas (DEEPINFER_CUDA_KV=mirror) come out of the free memory too.
    const double mirror = mirror_rows_ ? mirror_gb_ * 1e9 : 0.0;
    const double budget = weight_budget_gb_ >= 0 ? weight_budget_gb_ * 1e9 : double(free_bytes) - reserve - mirror;
    const ExpertPlacement placement = place_experts_within(budget, other_weight_bytes, experts);
    if (!placement.other_weights_fit) {
      char message[256];
      std::snprintf(message, sizeof message, "%s: the weights other than the routed experts need %.1f GB of device memory; %.1f GB are free%s",
                    name_.c_str(), double(other_weight_bytes) / 1e9, budget / 1e9,
                    weight_budget_gb_ >= 0 ? " under DEEPINFER_CUDA_WEIGHT_GB" : " after a reserve for the activations");
      return Status::error(message);
    }
    for (const LinearWeight* w : placement.on_host) host_experts_.insert(w->data);
    if (!host_experts_.empty()) {
      std::fprintf(stderr, "cuda: %lld of %zu routed expert weights on the device, %zu on the host's CPU kernels (weights budget %.1f GB, other weights %.1f GB)\n",
                   (long long)placement.n_on_device, experts.size(), host_experts_.size(), budget / 1e9, double(other_weight_bytes) / 1e9);
    }
    return {};
  }

  void linear(const LinearParams& p) override { linears({&p, 1}); }

  // The ops go to the stream together, each with its own device x, bias and output: an x that several ops
  // read (an expert's w1 and w3) is uploaded once, tensor-core ops of one weight kind and K run as one grouped
  // launch (launch_mma_groups), and the stream is synchronised once. A decode step's MoE group (w1 and w3 of
  // every routed expert) is then one launch and one wait instead of one of each per op. The batch's inputs
  // and outputs cross through pinned staging that mirrors the device layout (LinearBatchLayout), one copy each
  // way: a copy to or from the model's pageable arrays is the driver's own staged copy, and one to pageable
  // memory blocks the host, per op.
  void linears(std::span<const LinearParams> ps) override {
    bind_device();
    // Ops on experts kept in host memory run on the host's kernels while the device runs the rest.
    std::span<const LinearParams> on_device = ps;
    host_ops_.clear();
    if (!host_experts_.empty()) {
      device_ops_.clear();
      for (const LinearParams& p : ps) (host_experts_.count(p.weight->data) ? host_ops_ : device_ops_).push_back(p);
      on_device = device_ops_;
    }
    const bool queued = enqueue_linears(on_device);
    if (!host_ops_.empty()) host_->linears(host_ops_);
    if (queued) {
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
      layout_.scatter_outputs(on_device, staging_.get<uint8_t>());
    }
  }

  void hc_mix(const HcMixParams& p) override {
    bind_device();
    if (p.n_tokens == 0 || p.n_mix == 0) return;
    const float* fn = weights_.constant(p.fn, p.n_mix * p.width, stream_);
    const size_t x_bytes = size_t(p.n_tokens * p.width) * 4, out_bytes = size_t(p.n_tokens * p.n_mix) * 4;
    x_.reserve(x_bytes);
    out_.reserve(out_bytes);
    staging_.reserve(std::max(x_bytes, out_bytes));
    std::memcpy(staging_.get(), p.x, x_bytes);
    DI_CUDA_CHECK(cudaMemcpyAsync(x_.get(), staging_.get(), x_bytes, cudaMemcpyHostToDevice, stream_));
    cuda::launch_hc_mix({x_.get<float>(), p.n_tokens, p.width, fn, p.n_mix, p.eps, out_.get<float>()}, stream_);
    DI_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), out_.get(), out_bytes, cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(p.out, staging_.get(), out_bytes);
  }

  void sparse_attention(const SparseAttentionParams& p) override { sparse_attentions({&p, 1}); }

  // The model's per-row host work between the device calls (norms, rotations, quantisation, the MoE's gathers
  // and sums) on the host's threads, as the fast CPU backend runs it: a 128-token prefill of the V4 bench
  // model has ~90 ms of it on two threads.
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override { host_->for_rows(n, body); }

  // The query tokens of a prefill block in one launch per run of tokens that share the layer's shapes, sink
  // and softmax (all of them, in the model's calls), at most kMaxAttentionTokens at a time.
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override {
    auto same_launch = [](const SparseAttentionParams& a, const SparseAttentionParams& b) {
      return a.n_heads == b.n_heads && a.head_dim == b.head_dim && a.sink == b.sink && a.softmax_scale == b.softmax_scale &&
             a.block_running_max == b.block_running_max;
    };
    bind_device();
    for_each_run(ps, kMaxAttentionTokens, same_launch, [&](auto run) { attend(run); });
  }

  void index_scores(const IndexScoreParams& p) override { index_scores_batch({&p, 1}); }

  // Runs of ops of one n_heads and dim (every op of a model's call) in one launch and one wait each. Their
  // tokens may score against different key arrays (a batched decode step's sequences): each array is uploaded
  // once, up to the most keys any of its tokens reads.
  void index_scores_batch(std::span<const IndexScoreParams> ps) override {
    auto same_shape = [](const IndexScoreParams& a, const IndexScoreParams& b) { return a.n_heads == b.n_heads && a.dim == b.dim; };
    bind_device();
    for_each_run(ps, kMaxGridYZ, same_shape, [&](auto run) { score(run); });
  }

  // DEEPINFER_CUDA_INDEX_SELECT=device: the scores as index_scores_batch computes them, then each token's top-k
  // selection on the device (index_select_kernel.cu: exact, as the model's partial_sort orders them), and only the
  // selections back: n_select indices a token where the scores are one float per key of its context (at 64k tokens,
  // 16k keys a ratio-4 layer), and no selection left on the host. Or, kept for the attention
  // (IndexSelectParams::keep_selected), nothing back and no wait. Declines where a token selects more
  // than kIndexSelectMax keys, and where the kept blocks' bits would not fit the device's shared memory beside the
  // kernel's ~19.5 KB of static shared memory.
  bool index_select_batch(std::span<const IndexSelectParams> ps) override {
    if (!device_select_ || ps.empty()) return false;
    int64_t max_keys = 0, block_size = 0, total_select = 0;
    for (const IndexSelectParams& p : ps) {
      DI_CHECK_MSG(p.keep_selected == ps[0].keep_selected && !(p.keep_selected && p.candidates) &&
                       !(p.keep_selected && !keeps_selections()),
                   "index select: kept selections for some tokens and not others, with candidates, or on a backend that keeps none");
      total_select += p.n_select;
      if (p.n_select > cuda::kIndexSelectMax || p.n_select > p.score.n_keys) return false;
      const bool blocks = p.masked || p.candidates;
      if (blocks && (p.block_size <= 0 || (block_size && p.block_size != block_size))) return false;
      if (p.candidates && (p.masked || p.n_candidates > cuda::kIndexSelectMax ||
                           p.n_candidates > (p.score.n_keys + p.block_size - 1) / p.block_size)) {
        return false;
      }
      if (blocks) block_size = p.block_size;
      max_keys = std::max(max_keys, p.score.n_keys);
    }
    if (block_size && cuda::index_select_shared_bytes(max_keys, block_size) + 20 * 1024 > max_shared_bytes_) return false;
    bind_device();
    if (ps[0].keep_selected) {  // the selections stay in selections_dev_, replacing those kept before
      kept_selections_.clear();
      kept_selection_index_.reset(int64_t(ps.size()));
      kept_selected_ = 0;
      selections_dev_.reserve(size_t(std::max<int64_t>(total_select, 1)) * 4);
    }
    auto same_shape = [](const IndexSelectParams& a, const IndexSelectParams& b) {
      return a.score.n_heads == b.score.n_heads && a.score.dim == b.score.dim;
    };
    for_each_run(ps, kMaxGridYZ, same_shape, [&](std::span<const IndexSelectParams> run) {
      select_scores_.clear();
      for (const IndexSelectParams& p : run) select_scores_.push_back(p.score);
      score(select_scores_, run);
    });
    return true;
  }

  // DEEPINFER_CUDA_MOE=device: the whole MoE of a block on the device, one upload of u, one download of the
  // output and one wait, where the model's own code makes three calls with the routing, SwiGLU, QDQ and sums on
  // the host between them. The same kernels run every linear op (so the outputs are the model's own bits on
  // this backend), the router plans the routed rows on the device and writes the grouped launches'
  // descriptors there, and moe_kernels.cu does the host's exact arithmetic for the rest. It declines (the model
  // then runs its own code) where the model's path would take other kernels or the host: the FMA linear, the
  // FP8-operand prompt linear, experts kept in host memory, weights the tensor cores cannot take exactly, more
  // routed rows than the router's one block plans.
  bool moe(const MoeParams& p) override {
    const MoeBlock* block = device_moe_block(p);
    if (!block) return false;
    run_moe(p, *block, nullptr, nullptr);
    return true;
  }

  // DEEPINFER_CUDA_MOE=device: a block's whole FFN side, the device MoE with the mHC side's halves around it
  // (mhc_kernels.cu, the host steps' exact code): h goes in and h_out comes back, one wait where the model's
  // steps make two (hc_mix, then moe) with the coefficients, the collapse, the norm and the expansion on the
  // host between and after them. It declines where moe() does, and for mHC sides the kernels do not take.
  bool moe_side(const MoeSideParams& p) override {
    if (!side_takes(p)) return false;
    const MoeBlock* block = device_moe_block(p.moe);
    if (!block) return false;
    const MhcSideDevice device = mhc_side_device(p.side);
    run_moe(p.moe, *block, &device, nullptr);
    return true;
  }

  // DEEPINFER_CUDA_LINEAR_CHAIN=device: the attention's output projection (wo_a's groups, z's QDQ, wo_b) in one
  // call: the first ops' inputs in, their outputs interleaved into mid on the device, the QDQ there
  // (moe_kernels.cu's, the host's exact code), the second op, its output back; one wait where the model's steps
  // make two, and no z crossing to the host and back. The ops run on the kernels linears() gives them, so the
  // output is the model's own bits on this backend. It declines where that takes other kernels (the FMA linear,
  // the FP8-operand prompt linear for prompt tokens), for weights in host memory, for first ops of different
  // weight kinds or k_pad, and for a second op with a bias.
  bool linear_chain(const LinearChainParams& p) override {
    OutputChain chain;
    if (!plan_output_chain(p, chain)) return false;
    const int64_t T = p.n_tokens, n_out = chain.n_out;
    uint8_t* host = chain_host_.get<uint8_t>();
    // The stream work, replayed as a CUDA graph where graphs are on (the inputs and descriptors are staged in
    // plan_output_chain, per call, and the graph's first copy takes them).
    auto enqueue = [&] {
      enqueue_output_chain(chain);
      DI_CUDA_CHECK(cudaMemcpyAsync(host, chain.y, size_t(T * n_out) * 4, cudaMemcpyDeviceToHost, stream_));
    };
    if (graphs_) {
      GraphKey key = {kChainGraph};
      add_output_chain_words(p, key);
      std::vector<const void*> buffers = {chain_scratch_.get(), chain_host_.get(), partials_.get()};
      buffers.insert(buffers.end(), chain.kept_x.begin(), chain.kept_x.end());
      run_as_graph(key, std::move(buffers), enqueue);
    } else {
      enqueue();
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    copy_rows(reinterpret_cast<const float*>(host), n_out, T, n_out, p.second.out, p.second.out_stride, n_out);
    return true;
  }

  // DEEPINFER_CUDA_MOE=device with DEEPINFER_CUDA_LINEAR_CHAIN=device: a block's tail in one call, the output chain
  // as linear_chain() runs it, the attention side's expansion (hc_post_kernel) of its output on the device, then the
  // FFN side as moe_side() runs it on that stream: the attention's output and the attention side's input and
  // coefficients in, the block's output stream back, one wait where the steps make two, and neither the attention's
  // output nor the stream between the sides crossing to the host. It declines where either part would.
  bool block_tail(const BlockTailParams& p) override {
    const MhcSideParams& attention = p.attention;
    const MoeSideParams& ffn = p.ffn;
    if (!side_takes(ffn) || attention.n_tokens != ffn.side.n_tokens || attention.dim != ffn.side.dim ||
        p.output.n_tokens != ffn.side.n_tokens || p.output.second.n_rows != ffn.side.dim) {
      return false;
    }
    DI_CHECK_MSG(ffn.side.h == attention.h_out && p.output.second.out_stride == attention.dim,
                 "block tail: the FFN side does not read the attention side's output");
    const MoeBlock* block = device_moe_block(ffn.moe);
    if (!block) return false;
    OutputChain chain;
    if (!plan_output_chain(p.output, chain)) return false;
    const MhcSideDevice device = mhc_side_device(ffn.side);
    const TailHead head{&p, &chain};
    run_moe(ffn.moe, *block, &device, &head);
    return true;
  }

  // DEEPINFER_CUDA_LINEAR_CHAIN=device: the attention's projections with its q path (A1 with A10 and the other
  // projections of u, A2, qr's QDQ, A3 with I1) in one wait where the steps make two. First's ops are queued as
  // linears() queues them, mid's norm and QDQ run where first wrote mid on the device (rmsnorm_qdq_kernel, the host's
  // exact code), and second's ops as linears() would launch them, so every output is the steps' bits. Declines
  // where second's ops would take other kernels than the tensor-core ones, and where linears() would split first
  // between the host and the device.
  bool projection_chain(const ProjectionChainParams& p) override {
    if (!chain_takes(p)) return false;
    bind_device();
    ChainSecond second;
    if (!plan_chain_second(p, second)) return false;
    const float* mid_norm = p.mid_norm ? weights_.bf16_constant(p.mid_norm, p.mid_width, stream_) : nullptr;
    upload_mma_descriptors(chain_launches_, chain_descriptors_host_, chain_descriptors_);
    const bool queued = enqueue_linears(p.first);
    DI_CHECK_MSG(queued, "projection chain: first has no work");
    enqueue_chain_second(p, second, reinterpret_cast<const float*>(batch_.get<uint8_t>() + layout_.places()[size_t(second.mid_op)].out),
                         mid_norm);
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    layout_.scatter_outputs(p.first, staging_.get<uint8_t>());
    finish_chain_second(p, second);
    return true;
  }

  // The same with the mHC side's first half before it (the attention side's first call): h in, then on the device
  // the mixes, the coefficients, u and its norm (mhc_kernels.cu), uq (act_qdq_kernel), first's ops on u and uq
  // as linears() launches them, and the chain's second stage; u, uq, the coefficients and every output back, one
  // wait where the steps make three (hc_mix, then the chain's two). Where mid need not come back and second's
  // outputs stay on the device (ProjectionChainParams::mid_back), the wait is for the first stage's outputs alone.
  bool mhc_projection_chain(const MhcProjectionParams& p) override {
    const MhcSideParams& side = p.side;
    const ProjectionChainParams& chain = p.chain;
    const int64_t T = side.n_tokens, D = side.dim, HW = 4 * D, NC = cuda::kHcCoefficientFloats;
    if (!chain_takes(chain) || side.mhc.n_mix != NC || D > cuda::kHcPreMaxDim || chain.n_tokens != T) return false;
    bind_device();
    // First's ops each read u or uq, all at one padded width kx (the u rows the kernels write).
    int64_t kx = 0;
    std::vector<const cuda::DeviceWeight*> first_weights;
    for (const LinearParams& op : chain.first) {
      DI_CHECK_MSG((op.x == p.u || op.x == p.uq) && op.x_stride == D && op.n_tokens == T && op.weight->n_in == D,
                   "mHC projection chain: a first op does not read u or uq");
      const cuda::DeviceWeight& d = weights_.get(*op.weight, stream_);
      if (kx == 0) kx = d.k_pad;
      if (d.k_pad != kx) return false;
      first_weights.push_back(&d);
    }
    ChainSecond second;
    if (!plan_chain_second(chain, second)) return false;
    // Device scratch, mirrored in pinned memory: the inputs (h, the collapse's pre, the biases), then what comes
    // back (the coefficients, u, uq, first's outputs), then the mixes.
    ScratchLayout layout;
    const bool side_pre = side.collapse_pre != nullptr;
    const size_t pre_at = side_pre ? layout.take(size_t(T * 4) * 4) : 0;
    std::vector<size_t> bias_at, out_at;
    for (const LinearParams& op : chain.first) {
      bias_at.push_back(op.epilogue == Epilogue::kF32AddBias ? layout.take(size_t(T * op.n_rows) * 4) : 0);
    }
    const size_t h_at = layout.take(size_t(T * HW) * 4);
    const size_t in_bytes = p.h_on_backend ? h_at : layout.bytes;  // h last: from its kept array where it is there
    const size_t coeffs_at = layout.take(size_t(T * NC) * 4);
    for (const LinearParams& op : chain.first) out_at.push_back(layout.take(size_t(T * op.n_rows) * 4));
    const size_t u_at = layout.take(size_t(T * kx) * 4), uq_at = layout.take(size_t(T * kx) * 4);  // back where u_back
    const size_t back_end = p.u_back ? layout.bytes : u_at, mixes_at = layout.take(size_t(T * NC) * 4);
    front_scratch_.reserve(layout.bytes);
    front_host_.reserve(layout.bytes);
    uint8_t* dev = front_scratch_.get<uint8_t>();
    uint8_t* host = front_host_.get<uint8_t>();
    auto f32 = [&](size_t offset) { return reinterpret_cast<float*>(dev + offset); };
    DI_CHECK_MSG(side_pre || !p.pre_on_backend, "mHC projection chain: a pre on the device, but no collapse_pre");
    if (!p.h_on_backend) std::memcpy(host + h_at, side.h, size_t(T * HW) * 4);
    // (a pre on the device is copied over its stale bytes after the upload)
    if (side_pre && !p.pre_on_backend) std::memcpy(host + pre_at, side.collapse_pre, size_t(T * 4) * 4);
    front_launches_.clear();
    std::vector<cuda::LinearLaunch> other;  // first's ops off the tensor cores, as enqueue_linears runs them
    for (size_t i = 0; i < chain.first.size(); ++i) {
      const LinearParams& op = chain.first[i];
      cuda::LinearLaunch l = launch_of(*first_weights[i], op, f32(op.x == p.u ? u_at : uq_at), f32(out_at[i]));
      if (op.epilogue == Epilogue::kF32AddBias) {
        copy_rows(op.bias, op.n_rows, T, op.n_rows, reinterpret_cast<float*>(host + bias_at[i]), op.n_rows, op.n_rows);
        l.bias = f32(bias_at[i]);
      }
      (first_weights[i]->mma_exact ? front_launches_ : other).push_back(l);
    }
    sort_by_mma_shape(front_launches_);
    const int64_t partial_floats = std::max(mma_group_partial_floats(front_launches_), second.partial_floats);
    if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * 4);  // before anything is queued

    const MhcSideDevice device = mhc_side_device(side);
    const cuda::HcPreLaunch pre = hc_pre_launch(device, f32(h_at), f32(mixes_at), side_pre ? f32(pre_at) : nullptr,
                                                f32(coeffs_at), f32(u_at), kx);
    // A copy of h for the block's tail; where h is on the device already, that array itself.
    const float* h_in = p.h_on_backend ? kept_at(side.h, T * HW) : nullptr;
    float* kept_h = p.keep_h && !h_in ? keep_array(side.h, T * HW) : nullptr;
    const float* pre_in = p.pre_on_backend ? kept_at(side.collapse_pre, T * 4) : nullptr;
    const cuda::ActQdqRule rule = chain.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4;
    // Nothing below allocates, uploads a constant or waits, so that it can be captured.
    const float* mid_norm = chain.mid_norm ? weights_.bf16_constant(chain.mid_norm, chain.mid_width, stream_) : nullptr;
    upload_mma_descriptors(front_launches_, front_descriptors_host_, front_descriptors_);
    upload_mma_descriptors(chain_launches_, chain_descriptors_host_, chain_descriptors_);
    // Where the second stage brings nothing back (mid not wanted, its outputs kept), the call waits only for first's
    // outputs, and the second stage (the front's largest weights: wq_b, the indexer's wq_b) runs while the host works
    // with them.
    const bool second_stays = !chain.mid_back && all_second_outputs_kept(chain);
    auto enqueue_first = [&] {
      DI_CUDA_CHECK(cudaMemcpyAsync(dev, host, in_bytes, cudaMemcpyHostToDevice, stream_));
      if (h_in) DI_CUDA_CHECK(cudaMemcpyAsync(f32(h_at), h_in, size_t(T * HW) * 4, cudaMemcpyDeviceToDevice, stream_));
      if (pre_in) DI_CUDA_CHECK(cudaMemcpyAsync(f32(pre_at), pre_in, size_t(T * 4) * 4, cudaMemcpyDeviceToDevice, stream_));
      if (kept_h) DI_CUDA_CHECK(cudaMemcpyAsync(kept_h, f32(h_at), size_t(T * HW) * 4, cudaMemcpyDeviceToDevice, stream_));
      cuda::launch_hc_mix({f32(h_at), T, HW, device.fn, side.mhc.n_mix, side.mhc.eps, f32(mixes_at)}, stream_);
      cuda::launch_hc_pre(pre, stream_);
      cuda::launch_act_qdq({f32(u_at), kx, T, D, chain.qdq_block, rule, f32(uq_at), kx, kx}, stream_);
      launch_uploaded_mma_groups(front_launches_, front_descriptors_);
      for (const cuda::LinearLaunch& l : other) cuda::launch_linear(l, stream_);
      DI_CUDA_CHECK(cudaMemcpyAsync(host + coeffs_at, dev + coeffs_at, back_end - coeffs_at, cudaMemcpyDeviceToHost, stream_));
    };
    auto enqueue_second = [&] { enqueue_chain_second(chain, second, f32(out_at[size_t(second.mid_op)]), mid_norm, !second_stays); };
    // One part (one graph), or where the call waits for the first stage alone, two with front_back_ between them.
    auto run_parts = [&](const std::function<void(int64_t, const std::function<void()>&)>& run_part) {
      if (!second_stays) {
        run_part(0, [&] {
          enqueue_first();
          enqueue_second();
        });
        return;
      }
      run_part(1, enqueue_first);
      DI_CUDA_CHECK(cudaEventRecord(front_back_, stream_));
      run_part(2, enqueue_second);
    };
    if (graphs_) {
      // The key: the side, the token count, and each op's weight, rows and epilogue and what it reads.
      GraphKey key = {kFrontGraph, T, kx, word(p.keep_h), word(p.u_back), word(p.h_on_backend), word(p.pre_on_backend)};
      add_side_words(side, key);
      for (const LinearParams& op : chain.first) {
        for (int64_t w : {word(op.weight), op.row_begin, op.n_rows, int64_t(op.epilogue), word(op.x == p.u), word(op.bias != nullptr)}) {
          key.push_back(w);
        }
      }
      for (const LinearParams& op : chain.second) {
        for (int64_t w : {word(op.weight), op.row_begin, op.n_rows, int64_t(op.epilogue)}) key.push_back(w);
      }
      for (int64_t w : {second.mid_op, chain.mid_width, word(chain.mid_norm), word(chain.eps), chain.qdq_block, word(chain.v41)}) {
        key.push_back(w);
      }
      if (const HeadRope* rope = chain.q_rope) {
        for (int64_t w : {rope->n_heads, rope->head_dim, rope->rope_dim, word(rope->inverse), word(rope->normalize), word(rope->eps)}) {
          key.push_back(w);
        }
      }
      if (const IndexQueryWork* index = chain.index_q) {
        for (int64_t w : {int64_t(-1), index->n_heads, index->head_dim, index->rope_dim, word(index->v41)}) key.push_back(w);
      }
      const std::vector<const void*> buffers = {front_scratch_.get(), front_host_.get(), chain_scratch_.get(), second_host_.get(),
                                                partials_.get(), front_descriptors_.get(), chain_descriptors_.get(), second.kept[0],
                                                second.kept[1], kept_h, h_in, pre_in};
      run_parts([&](int64_t part, const std::function<void()>& enqueue) {
        if (!graphs_) return enqueue();  // the first part's capture failed
        GraphKey part_key = key;
        part_key.push_back(part);
        run_as_graph(part_key, buffers, enqueue);
      });
    } else {
      run_parts([](int64_t, const std::function<void()>& enqueue) { enqueue(); });
    }
    if (second_stays) {
      second_staging_.queued(stream_);  // the second stage reads its angles from second_host_
      DI_CUDA_CHECK(cudaEventSynchronize(front_back_));
    } else {
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    std::memcpy(p.coeffs, host + coeffs_at, size_t(T * NC) * 4);
    if (p.u_back) {
      copy_rows(reinterpret_cast<const float*>(host + u_at), kx, T, D, p.u, D, D);
      copy_rows(reinterpret_cast<const float*>(host + uq_at), kx, T, D, p.uq, D, D);
    }
    for (size_t i = 0; i < chain.first.size(); ++i) {
      const LinearParams& op = chain.first[i];
      copy_rows(reinterpret_cast<const float*>(host + out_at[i]), op.n_rows, T, op.n_rows, op.out, op.out_stride, op.n_rows);
    }
    if (!second_stays) finish_chain_second(chain, second);
    return true;
  }

  // The chains' q_rope and the attention's kept q and outputs need the device chains (DEEPINFER_CUDA_LINEAR_CHAIN=device).
  bool keeps_arrays() const override { return device_chain_; }
  // V4.1's DSpark tap on the kept stream, into a kept array: queued behind the tail that wrote the stream and not
  // waited for (no host staging; the taps come back through fetch_kept).
  bool stream_tap(const StreamTapParams& p) override {
    if (!device_chain_ || p.n_tokens == 0 || p.n_tokens > 65535) return false;
    DI_CHECK_MSG(p.out >= p.out_array && p.out + (p.n_tokens - 1) * p.out_stride + p.dim <= p.out_array + p.out_floats,
                 "stream tap: the taps lie outside their kept array");
    bind_device();
    const float* h = kept_at(p.h, p.n_tokens * 4 * p.dim);
    if (p.out_array_kept) kept_at(p.out_array, p.out_floats);  // an error where it is gone, not a fresh array's garbage
    float* taps = keep_array(p.out_array, p.out_floats);
    cuda::launch_stream_tap({h, p.n_tokens, p.dim, taps + (p.out - p.out_array), p.out_stride}, stream_);
    return true;
  }
  // V4.1's Engram update on the kept stream: the host gathers each token's table rows as stored (e4m3 codes and e8m0
  // scales, ~1 byte a value: a quarter of the floats the host would decode them to) into pinned staging of its own
  // (the call does not wait); the device decodes them, applies the activation QDQ, runs wkv as linears() runs a lone
  // op, then the gate kernel on the kept stream in place. Nothing comes back. Not on the FP8-operand prompt path,
  // whose prepass and groups use the linears() batch's buffers.
  bool engram_gate(const EngramGateParams& p) override {
    const LinearParams& op = p.kv;
    // (The decode's grid puts tokens on y: a larger batch takes the host's route.)
    if (!device_chain_ || p.n_tokens == 0 || p.n_tokens > 65535 || host_experts_.count(op.weight->data)) return false;
    const EngramTable& table = *p.table;
    const int64_t T = p.n_tokens, D = p.dim, width = p.rows_per_token * table.dim;
    DI_CHECK_MSG(op.n_tokens == T && op.row_begin == 0 && op.n_rows == 5 * D && op.epilogue == Epilogue::kBf16,
                 "engram gate: kv is not 5 x dim bf16 rows of each token");
    DI_CHECK_MSG(table.dim % 32 == 0 && p.qdq_block > 0, "engram gate: table rows of whole scale groups and a QDQ block");
    bind_device();
    const cuda::DeviceWeight& w = weights_.get(*op.weight, stream_);
    if (takes_fp8_path(op, w)) return false;
    DI_CHECK_MSG(width == w.n_in, "engram gate: the tokens' table rows are not wkv's input width");
    float* h = const_cast<float*>(kept_at(p.h, T * 4 * D));  // a kept array is the backend's own: updated in place
    const float* q = weights_.bf16_constant(p.q_weight, 4 * D, stream_);
    const float* k = weights_.bf16_constant(p.k_weight, 4 * D, stream_);
    const int64_t row_scales = table.dim / 32, code_bytes = T * width, bytes = code_bytes + code_bytes / 32;
    engram_staging_.wait();  // engram_host_ below
    engram_host_.reserve(size_t(bytes));
    engram_rows_.reserve(size_t(bytes));
    engram_x_.reserve(size_t(T * w.k_pad) * 4);
    engram_kv_.reserve(size_t(T * 5 * D) * 4);
    uint8_t* codes = engram_host_.get<uint8_t>();
    uint8_t* scales = codes + code_bytes;
    host_->for_rows(T * p.rows_per_token, [&](int64_t r0, int64_t r1) {  // row r: token r / rows_per_token's
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t row = p.rows[r];
        DI_CHECK_MSG(row >= 0 && row < table.rows, "engram gate: a table row out of range");
        std::memcpy(codes + r * table.dim, table.codes + row * table.dim, size_t(table.dim));
        std::memcpy(scales + r * row_scales, table.scales + row * row_scales, size_t(row_scales));
      }
    });
    DI_CUDA_CHECK(cudaMemcpyAsync(engram_rows_.get(), codes, size_t(bytes), cudaMemcpyHostToDevice, stream_));
    engram_staging_.queued(stream_);  // the staging is free once its copy ran
    float* x = engram_x_.get<float>();
    const uint8_t* device_codes = engram_rows_.get<uint8_t>();
    cuda::launch_engram_rows({device_codes, device_codes + code_bytes, T, width, x, w.k_pad}, stream_);
    cuda::launch_act_qdq({x, w.k_pad, T, width, p.qdq_block, cuda::ActQdqRule::kV41, x, w.k_pad, w.k_pad}, stream_);
    cuda::LinearLaunch l = launch_of(w, op, x, engram_kv_.get<float>());
    if (tensor_core_linear_ && w.mma_exact) {
      partials_.reserve(size_t(cuda::linear_mma_partial_floats(l, mma_choice_)) * 4);
      launch_lone_mma(l);
    } else {
      cuda::launch_linear(l, stream_);
    }
    cuda::launch_engram_gate({h, engram_kv_.get<float>(), T, D, q, k, p.eps}, stream_);
    return true;
  }
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
  void fetch_kept(float* host, int64_t n) override {
    const KeptFetch array{host, n};
    fetch_kept_arrays({&array, 1});
  }
  // Every array's copy queued behind the work that wrote it, then one wait.
  void fetch_kept_arrays(std::span<const KeptFetch> arrays) override {
    bind_device();
    size_t bytes = 0;
    for (const KeptFetch& a : arrays) bytes += size_t(a.n) * 4;
    staging_.reserve(bytes);
    size_t at = 0;
    for (const KeptFetch& a : arrays) {
      DI_CUDA_CHECK(cudaMemcpyAsync(staging_.get<uint8_t>() + at, kept_at(a.host, a.n), size_t(a.n) * 4,
                                    cudaMemcpyDeviceToHost, stream_));
      at += size_t(a.n) * 4;
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    at = 0;
    for (const KeptFetch& a : arrays) {
      std::memcpy(a.host, staging_.get<uint8_t>() + at, size_t(a.n) * 4);
      at += size_t(a.n) * 4;
    }
  }

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
  float* keep_array(const float* host, int64_t n) {
    DI_CHECK_MSG(n > 0, "a kept array of no values");
    std::erase_if(kept_, [&](const KeptArray& k) { return k.host != host && k.host < host + n && host < k.host + k.n; });
    auto it = std::find_if(kept_.begin(), kept_.end(), [&](const KeptArray& k) { return k.host == host; });
    if (it == kept_.end()) {
      if (kept_.size() >= kMaxKeptArrays) {
        kept_.erase(std::min_element(kept_.begin(), kept_.end(),
                                     [](const KeptArray& a, const KeptArray& b) { return a.last_use < b.last_use; }));
      }
      it = kept_.insert(kept_.end(), KeptArray{host, 0, DeviceBuffer()});
    }
    it->dev.reserve(size_t(n) * 4);
    it->n = n;
    it->last_use = ++kept_clock_;
    return it->dev.get<float>();
  }
  // The device address of host[0 .. n), which must lie in one kept array.
  const float* kept_at(const float* host, int64_t n) {
    for (KeptArray& k : kept_) {
      if (host >= k.host && host + n <= k.host + k.n) {
        k.last_use = ++kept_clock_;
        return k.dev.get<float>() + (host - k.host);
      }
    }
    DI_CHECK_MSG(false, name_ + ": " + std::to_string(n) + " values said to be kept on the device are not");
    return nullptr;
  }
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
  bool chain_takes(const ProjectionChainParams& p) const {
    if (!device_chain_ || !tensor_core_linear_ || p.n_tokens == 0 || p.second.empty()) return false;
    if (fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt) return false;
    for (std::span<const LinearParams> ops : {p.first, p.second}) {
      for (const LinearParams& op : ops) {
        if (host_experts_.count(op.weight->data)) return false;
      }
    }
    return true;
  }

  // Whether mhc_kernels.cu takes an FFN side's mHC (4 copies' 24 mixes, a dim it fits) around its MoE.
  static bool side_takes(const MoeSideParams& p) {
    const MhcSideParams& side = p.side;
    return side.mhc.n_mix == cuda::kHcCoefficientFloats && side.dim == p.moe.dim && side.n_tokens == p.moe.n_tokens &&
           side.dim <= cuda::kHcPreMaxDim;
  }

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
  bool plan_output_chain(const LinearChainParams& p, OutputChain& c) {
    const int64_t T = p.n_tokens, n_first = int64_t(p.first.size());
    if (!device_chain_ || !tensor_core_linear_ || T == 0 || n_first == 0) return false;
    if (fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt) return false;
    if (p.second.epilogue == Epilogue::kF32AddBias) return false;
    bind_device();
    tail_staging_.wait();  // chain_host_ below
    std::vector<const LinearParams*> ops;
    for (const LinearParams& op : p.first) ops.push_back(&op);
    ops.push_back(&p.second);
    std::vector<const cuda::DeviceWeight*> weights;
    for (const LinearParams* op : ops) {
      if (host_experts_.count(op->weight->data)) return false;
      const cuda::DeviceWeight& d = weights_.get(*op->weight, stream_);
      if (!d.mma_exact) return false;
      weights.push_back(&d);
    }
    const cuda::DeviceWeight& w0 = *weights[0];
    int64_t covered = 0;
    for (int64_t i = 0; i < n_first; ++i) {
      const LinearParams& op = p.first[size_t(i)];
      if (weights[size_t(i)]->kind != w0.kind || weights[size_t(i)]->k_pad != w0.k_pad) return false;
      const int64_t column = op.out - p.mid;
      DI_CHECK_MSG(op.n_tokens == T && op.out_stride == p.mid_width && column >= 0 && column + op.n_rows <= p.mid_width,
                   "linear chain: a first op does not write columns of mid");
      covered += op.n_rows;
      c.max_rows = std::max(c.max_rows, op.n_rows);
      c.mid_column.push_back(column);
    }
    DI_CHECK_MSG(covered == p.mid_width, "linear chain: the first ops do not cover mid's columns");
    DI_CHECK_MSG(p.second.x == p.mid && p.second.x_stride == p.mid_width && p.second.n_tokens == T &&
                     p.second.weight->n_in == p.mid_width,
                 "linear chain: the second op does not read mid");
    const cuda::DeviceWeight& w2 = *weights.back();
    const int64_t k1 = w0.k_pad, k2 = w2.k_pad, n_out = p.second.n_rows;
    c.n_first = n_first;
    c.k1 = k1;
    c.k2 = k2;
    c.n_out = n_out;
    c.kind = w0.kind;
    c.mid_width = p.mid_width;
    c.qdq_block = p.qdq_block;
    c.v41 = p.v41;
    c.x_width = p.first[0].weight->n_in;
    c.x_stride = p.first[0].x_stride;
    for (const LinearParams& op : p.first) {
      DI_CHECK_MSG(!p.x_kept || (op.weight->n_in == c.x_width && op.x_stride == c.x_stride),
                   "linear chain: kept first ops' x of different widths or strides");
    }
    // Device: the first ops' descriptors, their x [T, k1] each, their outputs [T, n_rows] each, mid [T, k2], the
    // output [T, n_out]; host (pinned): the descriptors and the x rows (one copy in; x_kept: the descriptors, the x
    // rows copied on the device from their kept array), then the output.
    ScratchLayout layout;
    c.desc_at = layout.take(size_t(n_first) * sizeof(cuda::LinearLaunch));
    const size_t x_at = layout.take(size_t(n_first * T * k1) * 4);
    c.in_bytes = p.x_kept ? x_at : layout.bytes;
    std::vector<size_t> out_at;
    for (int64_t i = 0; i < n_first; ++i) out_at.push_back(layout.take(size_t(T * p.first[size_t(i)].n_rows) * 4));
    const size_t mid_at = layout.take(size_t(T * k2) * 4), y_at = layout.take(size_t(T * n_out) * 4);
    chain_scratch_.reserve(layout.bytes);
    chain_host_.reserve(std::max(c.in_bytes, size_t(T * n_out) * 4));
    uint8_t* dev = chain_scratch_.get<uint8_t>();
    uint8_t* host = chain_host_.get<uint8_t>();
    c.launches.resize(size_t(n_first));
    c.kept_x.clear();
    for (int64_t i = 0; i < n_first; ++i) {
      const LinearParams& op = p.first[size_t(i)];
      if (p.x_kept) {
        c.kept_x.push_back(kept_at(op.x, (T - 1) * op.x_stride + op.weight->n_in));
      } else {
        copy_rows(op.x, op.x_stride, T, op.weight->n_in, reinterpret_cast<float*>(host + x_at) + i * T * k1, k1, k1);
      }
      c.launches[size_t(i)] = launch_of(*weights[size_t(i)], op, reinterpret_cast<const float*>(dev + x_at) + i * T * k1,
                                        reinterpret_cast<float*>(dev + out_at[size_t(i)]));
    }
    std::memcpy(host + c.desc_at, c.launches.data(), c.launches.size() * sizeof(cuda::LinearLaunch));
    c.mid = reinterpret_cast<float*>(dev + mid_at);
    c.y = reinterpret_cast<const float*>(dev + y_at);
    c.second = launch_of(w2, p.second, c.mid, reinterpret_cast<float*>(dev + y_at));
    int64_t partial_floats = cuda::linear_mma_partial_floats(c.second, mma_choice_);
    if (n_first == 1) partial_floats = std::max(partial_floats, cuda::linear_mma_partial_floats(c.launches[0], mma_choice_));
    if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * 4);  // before anything is queued
    return true;
  }
  // Queues a planned chain up to its output on the device: its staged inputs in, the first ops, their outputs into
  // mid's columns, mid's QDQ (moe_kernels.cu's, the host's exact code), the second op.
  void enqueue_output_chain(const OutputChain& c) {
    const int64_t T = c.second.n_tokens;
    uint8_t* dev = chain_scratch_.get<uint8_t>();
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, chain_host_.get(), c.in_bytes, cudaMemcpyHostToDevice, stream_));
    for (size_t i = 0; i < c.kept_x.size(); ++i) {  // x_kept: each op's rows from the kept array, zero-padded to k1
      const cuda::LinearLaunch& l = c.launches[i];
      auto* x = const_cast<float*>(l.x);
      if (c.k1 > c.x_width) DI_CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(T * c.k1) * 4, stream_));
      DI_CUDA_CHECK(cudaMemcpy2DAsync(x, size_t(c.k1) * 4, c.kept_x[i], size_t(c.x_stride) * 4, size_t(c.x_width) * 4, size_t(T),
                                      cudaMemcpyDeviceToDevice, stream_));
    }
    if (c.n_first == 1) {
      launch_lone_mma(c.launches[0]);
    } else {
      cuda::launch_linear_mma_grouped(reinterpret_cast<const cuda::LinearLaunch*>(dev + c.desc_at), int(c.n_first), c.kind, c.k1,
                                      c.max_rows, T, stream_, mma_choice_);
    }
    for (int64_t i = 0; i < c.n_first; ++i) {  // each op's [T, n_rows] into its columns of mid
      const cuda::LinearLaunch& l = c.launches[size_t(i)];
      DI_CUDA_CHECK(cudaMemcpy2DAsync(c.mid + c.mid_column[size_t(i)], size_t(c.k2) * 4, l.out, size_t(l.n_rows) * 4,
                                      size_t(l.n_rows) * 4, size_t(T), cudaMemcpyDeviceToDevice, stream_));
    }
    const cuda::ActQdqRule rule = c.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4;
    cuda::launch_act_qdq({c.mid, c.k2, T, c.mid_width, c.qdq_block, rule, c.mid, c.k2, c.k2}, stream_);
    launch_lone_mma(c.second);
  }
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
  static bool all_second_outputs_kept(const ProjectionChainParams& p) {
    for (size_t i = 0; i < p.second.size(); ++i) {
      if (!kept_output(p, i)) return false;
    }
    return true;
  }
  // Finds the first op that writes mid, sizes the scratch, and sets up second's launches (chain_launches_); false
  // where second's ops would take other kernels than the tensor-core ones.
  bool plan_chain_second(const ProjectionChainParams& p, ChainSecond& c) {
    const int64_t T = p.n_tokens, W = p.mid_width;
    second_staging_.wait();  // second_host_ below
    for (size_t i = 0; i < p.first.size(); ++i) {
      if (p.first[i].out == p.mid) c.mid_op = int64_t(i);
    }
    DI_CHECK_MSG(c.mid_op >= 0 && p.first[size_t(c.mid_op)].n_rows == W && p.first[size_t(c.mid_op)].out_stride == W &&
                     p.first[size_t(c.mid_op)].n_tokens == T,
                 "projection chain: no first op writes mid whole");
    std::vector<const cuda::DeviceWeight*> weights;
    for (const LinearParams& op : p.second) {
      const cuda::DeviceWeight& d = weights_.get(*op.weight, stream_);
      if (!d.mma_exact || op.epilogue == Epilogue::kF32AddBias) return false;
      DI_CHECK_MSG(op.x == p.mid_q && op.x_stride == W && op.n_tokens == T && op.weight->n_in == W,
                   "projection chain: a second op does not read mid_q");
      if (!weights.empty() && d.k_pad != weights[0]->k_pad) return false;
      weights.push_back(&d);
    }
    c.k2 = weights[0]->k_pad;
    if (const HeadRope* rope = p.q_rope) {
      const LinearParams& q = p.second[0];
      DI_CHECK_MSG(q.n_rows == rope->n_heads * rope->head_dim && q.out_stride == q.n_rows && rope->rope_dim % 2 == 0 &&
                       rope->rope_dim <= rope->head_dim && T <= 65535,
                   "projection chain: q_rope does not fit second[0]'s output");
    }
    if (const IndexQueryWork* index = p.index_q) {
      DI_CHECK_MSG(p.second.size() >= 2 && p.second[1].n_rows == index->n_heads * index->head_dim &&
                       p.second[1].out_stride == p.second[1].n_rows && index->head_dim == 128 && index->rope_dim % 4 == 0 &&
                       index->rope_dim <= index->head_dim && T <= 65535,
                   "projection chain: index_q does not fit second[1]'s output");
    }
    const int64_t rope_dims[2] = {p.q_rope ? p.q_rope->rope_dim : 0, p.index_q ? p.index_q->rope_dim : 0};
    const float* angles[2] = {p.q_rope ? p.q_rope->cos_sin : nullptr, p.index_q ? p.index_q->cos_sin : nullptr};
    ScratchLayout layout;
    c.normed_at = layout.take(size_t(T * W) * 4);
    c.mid_q_at = layout.take(size_t(T * c.k2) * 4);
    c.out_at.assign(p.second.size(), 0);
    for (size_t i = 0; i < p.second.size(); ++i) {
      if (!kept_output(p, i)) c.out_at[i] = layout.take(size_t(T * p.second[i].n_rows) * 4);
    }
    c.back_bytes = layout.bytes;
    for (size_t i = 0; i < 2; ++i) {
      if (!kept_output(p, i)) continue;
      c.out_at[i] = layout.take(size_t(T * p.second[i].n_rows) * 4);
      c.cos_sin_at[i] = layout.take(size_t(T * rope_dims[i]) * 4);
    }
    c.bytes = layout.bytes;
    chain_scratch_.reserve(c.bytes);
    second_host_.reserve(c.bytes);
    for (size_t i = 0; i < 2; ++i) {
      if (!kept_output(p, i)) continue;
      std::memcpy(second_host_.get<uint8_t>() + c.cos_sin_at[i], angles[i], size_t(T * rope_dims[i]) * 4);
      c.kept[i] = keep_array(p.second[i].out, T * p.second[i].out_stride);
    }
    uint8_t* dev = chain_scratch_.get<uint8_t>();
    chain_launches_.clear();
    for (size_t i = 0; i < p.second.size(); ++i) {
      chain_launches_.push_back(launch_of(*weights[i], p.second[i], reinterpret_cast<const float*>(dev + c.mid_q_at),
                                          reinterpret_cast<float*>(dev + c.out_at[i])));
    }
    sort_by_mma_shape(chain_launches_);
    c.partial_floats = mma_group_partial_floats(chain_launches_);
    // partials_ sized before anything is queued: growing it later would free what queued work reads.
    if (c.partial_floats > 0) partials_.reserve(size_t(c.partial_floats) * 4);
    return true;
  }
  // Queues the second stage on mid's device rows [T, mid_width] (mid_norm: the device copy of p.mid_norm's values),
  // and where copy_back, its copy back; its descriptors' upload (upload_mma_descriptors on chain_launches_) queued
  // before.
  void enqueue_chain_second(const ProjectionChainParams& p, const ChainSecond& c, const float* mid_dev, const float* mid_norm,
                            bool copy_back = true) {
    const int64_t T = p.n_tokens, W = p.mid_width;
    DI_CHECK(partials_.bytes() >= size_t(c.partial_floats) * 4);
    uint8_t* dev = chain_scratch_.get<uint8_t>();
    cuda::ActQdqLaunch norm_qdq{mid_dev, W, T, W, p.qdq_block, p.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4,
                                reinterpret_cast<float*>(dev + c.mid_q_at), c.k2, c.k2};
    norm_qdq.rmsnorm = true;
    norm_qdq.norm = mid_norm;
    norm_qdq.eps = p.eps;
    norm_qdq.normed = reinterpret_cast<float*>(dev + c.normed_at);
    norm_qdq.normed_stride = W;
    cuda::launch_act_qdq(norm_qdq, stream_);
    launch_uploaded_mma_groups(chain_launches_, chain_descriptors_);
    auto angles = [&](size_t i, int64_t rope_dim) {  // second[i]'s angles, copied in
      DI_CUDA_CHECK(cudaMemcpyAsync(dev + c.cos_sin_at[i], second_host_.get<uint8_t>() + c.cos_sin_at[i], size_t(T * rope_dim) * 4,
                                    cudaMemcpyHostToDevice, stream_));
      return reinterpret_cast<const float*>(dev + c.cos_sin_at[i]);
    };
    if (const HeadRope* rope = p.q_rope) {
      const LinearParams& q = p.second[0];
      cuda::launch_head_rope({{reinterpret_cast<const float*>(dev + c.out_at[0]), q.n_rows, c.kept[0], q.out_stride, T, rope->n_heads,
                               rope->head_dim, rope->rope_dim, angles(0, rope->rope_dim)},
                              rope->inverse, rope->normalize, rope->eps},
                             stream_);
    }
    if (const IndexQueryWork* index = p.index_q) {
      const LinearParams& iq = p.second[1];
      cuda::launch_index_query({{reinterpret_cast<const float*>(dev + c.out_at[1]), iq.n_rows, c.kept[1], iq.out_stride, T,
                                 index->n_heads, index->head_dim, index->rope_dim, angles(1, index->rope_dim)},
                                index->v41, double(float(1.0 / std::sqrt(128.0)))},
                               stream_);
    }
    if (copy_back) DI_CUDA_CHECK(cudaMemcpyAsync(second_host_.get(), dev, c.back_bytes, cudaMemcpyDeviceToHost, stream_));
  }
  // After the wait: the normed mid, mid_q and second's outputs to the caller's arrays.
  void finish_chain_second(const ProjectionChainParams& p, const ChainSecond& c) const {
    const int64_t T = p.n_tokens, W = p.mid_width;
    const uint8_t* host = second_host_.get<uint8_t>();
    std::memcpy(p.mid, host + c.normed_at, size_t(T * W) * 4);
    copy_rows(reinterpret_cast<const float*>(host + c.mid_q_at), c.k2, T, W, p.mid_q, W, W);
    for (size_t i = 0; i < p.second.size(); ++i) {
      if (kept_output(p, i)) continue;  // it stays on the device
      const LinearParams& op = p.second[i];
      copy_rows(reinterpret_cast<const float*>(host + c.out_at[i]), op.n_rows, T, op.n_rows, op.out, op.out_stride, op.n_rows);
    }
  }

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
  const MoeBlock* device_moe_block(const MoeParams& p) {
    const int64_t T = p.n_tokens, K = p.weights->n_activated_experts;
    if (!device_moe_ || T == 0 || T * K > cuda::kMoeMaxRows) return nullptr;
    if (fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt) return nullptr;
    bind_device();
    return moe_block(*p.weights);
  }

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
  MhcSideDevice mhc_side_device(const MhcSideParams& side) {
    const MhcWeights& m = side.mhc;
    return {&side, weights_.constant(m.fn, m.n_mix * 4 * side.dim, stream_), weights_.constant(m.scale, 3, stream_),
            weights_.constant(m.base, m.n_mix, stream_), m.norm ? weights_.bf16_constant(m.norm, side.dim, stream_) : nullptr};
  }
  // The side's hc_pre launch on these device rows: h [T, 4 dim], mixes and coefficients [T, 24], the collapse's pre
  // [T, 4] or nullptr, u [T, u_stride].
  static cuda::HcPreLaunch hc_pre_launch(const MhcSideDevice& side, const float* h, float* mixes, const float* collapse_pre,
                                         float* coeffs, float* u, int64_t u_stride) {
    const MhcWeights& m = side.p->mhc;
    cuda::HcPreLaunch pre;
    pre.h = h;
    pre.mixes = mixes;
    pre.n_tokens = side.p->n_tokens;
    pre.dim = side.p->dim;
    pre.scale = side.scale;
    pre.base = side.base;
    pre.norm = side.norm;
    pre.collapse_pre = collapse_pre;
    pre.sinkhorn_iters = m.sinkhorn_iters;
    pre.eps = m.eps;
    pre.hc_eps = m.hc_eps;
    pre.coeffs = coeffs;
    pre.u = u;
    pre.u_stride = u_stride;
    return pre;
  }

  // The block's MoeBlock, made on first use (every expert's weights uploaded then); nullptr when the device
  // MoE cannot run it exactly as the model's path would on this backend.
  const MoeBlock* moe_block(const BlockWeights& w) {
    auto [it, fresh] = moe_blocks_.try_emplace(&w);
    if (!fresh) return it->second.get();
    const int64_t E = int64_t(w.experts.size());
    if (!tensor_core_linear_ || E == 0 || E > 1024 || w.n_activated_experts <= 0 || w.n_activated_experts > E) return nullptr;
    for (const ExpertWeights& e : w.experts) {
      for (const LinearWeight* lw : {&e.w1, &e.w3, &e.w2}) {
        if (host_experts_.count(lw->data)) return nullptr;
      }
    }
    auto block = std::make_unique<MoeBlock>();
    block->gate = &weights_.get(w.gate, stream_);
    block->shared_w1 = &weights_.get(w.shared.w1, stream_);
    block->shared_w3 = &weights_.get(w.shared.w3, stream_);
    block->shared_w2 = &weights_.get(w.shared.w2, stream_);
    if (!w.hash_routed) block->gate_bias = weights_.constant(w.gate_bias, E, stream_);
    const cuda::DeviceWeight& first_w1 = weights_.get(w.experts[0].w1, stream_);
    const cuda::DeviceWeight& first_w2 = weights_.get(w.experts[0].w2, stream_);
    block->expert_kind = first_w1.kind;
    block->k_pad = first_w1.k_pad;
    block->inter_k_pad = first_w2.k_pad;
    bool exact = block->gate->k_pad == block->k_pad && block->shared_w1->k_pad == block->k_pad &&
                 block->shared_w3->k_pad == block->k_pad && first_w2.kind == first_w1.kind;
    for (const cuda::DeviceWeight* d : {block->gate, block->shared_w1, block->shared_w3, block->shared_w2}) exact = exact && d->mma_exact;
    std::vector<cuda::LinearLaunch> templates(size_t(3 * E));
    for (int64_t e = 0; e < E && exact; ++e) {
      const ExpertWeights& ew = w.experts[size_t(e)];
      const LinearWeight* parts[3] = {&ew.w1, &ew.w3, &ew.w2};
      for (int k = 0; k < 3; ++k) {
        const cuda::DeviceWeight& d = weights_.get(*parts[k], stream_);
        const int64_t want_k_pad = k < 2 ? block->k_pad : block->inter_k_pad;
        exact = exact && d.mma_exact && d.kind == block->expert_kind && d.k_pad == want_k_pad;
        cuda::LinearLaunch& l = templates[size_t(k * E + e)];
        l = launch_of(d);
        l.n_rows = d.n_out;
        l.epilogue = cuda::LinearEpilogue::kBf16;
      }
    }
    if (!exact) return nullptr;
    block->templates = DeviceBuffer(templates.size() * sizeof(cuda::LinearLaunch));
    DI_CUDA_CHECK(cudaMemcpyAsync(block->templates.get(), templates.data(), templates.size() * sizeof(cuda::LinearLaunch),
                                  cudaMemcpyHostToDevice, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // once per block: `templates` is pageable and goes out of scope
    it->second = std::move(block);
    return it->second.get();
  }

  // A lone tensor-core launch, as launch_mma_groups runs one (split over K into partials_ where that pays; partials_
  // reserved for it before, outside any graph capture).
  void launch_lone_mma(cuda::LinearLaunch l) {
    if (cuda::linear_mma_partial_floats(l, mma_choice_) > 0) l.partials = partials_.get<float>();
    cuda::launch_linear_mma(l, stream_, mma_choice_);
  }

  // moe()'s work: u (padded) and a hash-routed block's tid2eid rows staged, then on the stream u in, the QDQ, the
  // gate and shared expert, the router's plan, the routed rows' gather, w1 / w3 and w2 as one grouped launch
  // each, the M8 sum and the output back (as a CUDA graph, run_as_graph, unless DEEPINFER_CUDA_GRAPHS=off), one wait.
  // With an mHC side (moe_side()): h (and the collapse's pre) in instead of u, the mixes, coefficients, u and its
  // norm on the device before the MoE, the expansion after it, and h_out and the coefficients back. With a tail's
  // head too (block_tail()): the attention side's h and coefficients in instead of h, and before the mixes the
  // output chain (its own inputs staged by plan_output_chain) and the attention side's expansion into h.
  void run_moe(const MoeParams& p, const MoeBlock& block, const MhcSideDevice* side, const TailHead* head) {
    const BlockWeights& w = *p.weights;
    const int64_t T = p.n_tokens, D = p.dim, E = int64_t(w.experts.size()), K = w.n_activated_experts, R = T * K;
    const int64_t kx = block.k_pad, k2 = block.inter_k_pad, I = w.experts[0].w1.n_out, IS = block.shared_w1->n_out;
    const int64_t k2s = block.shared_w2->k_pad, n_slots = std::min(E, R);
    DI_CHECK_MSG(D == w.gate.n_in && D <= kx, "device MoE: u's width is not the gate's");
    const cuda::ActQdqRule rule = p.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4;
    tail_staging_.wait();  // moe_host_ below
    // Device scratch, each part 256-byte aligned.
    ScratchLayout layout;
    auto take = [&](size_t n) { return layout.take(n); };
    const size_t u_at = take(size_t(T * kx) * 4), hash_at = take(size_t(R) * 4), uq_at = take(size_t(T * kx) * 4),
                 scores_at = take(size_t(T * E) * 4), sa_at = take(size_t(T * IS) * 4), sb_at = take(size_t(T * IS) * 4),
                 sh_at = take(size_t(T * k2s) * 4), sy_at = take(size_t(T * D) * 4), row_token_at = take(size_t(R) * 4),
                 row_weight_at = take(size_t(R) * 4), token_rows_at = take(size_t(R) * 4),
                 w13_at = take(size_t(2 * n_slots) * sizeof(cuda::LinearLaunch)),
                 w2_at = take(size_t(n_slots) * sizeof(cuda::LinearLaunch)), x_at = take(size_t(R * kx) * 4),
                 a_at = take(size_t(R * I) * 4), b_at = take(size_t(R * I) * 4), h_at = take(size_t(R * k2) * 4),
                 y_at = take(size_t(R * D) * 4), out_at = take(size_t(T * D) * 4);
    const int64_t HW = 4 * D, NC = cuda::kHcCoefficientFloats;  // the side's stream row and coefficients
    const bool has_side = side != nullptr, side_pre = has_side && side->p->collapse_pre, has_head = head != nullptr;
    DI_CHECK(has_side || !has_head);
    const size_t stream_at = has_side ? take(size_t(T * HW) * 4) : 0, mixes_at = has_side ? take(size_t(T * NC) * 4) : 0,
                 coeffs_at = has_side ? take(size_t(T * NC) * 4) : 0, pre_at = side_pre ? take(size_t(T * 4) * 4) : 0,
                 stream_out_at = has_side ? take(size_t(T * HW) * 4) : 0,
                 head_h_at = has_head ? take(size_t(T * HW) * 4) : 0, head_coeffs_at = has_head ? take(size_t(T * NC) * 4) : 0;
    moe_scratch_.reserve(layout.bytes);
    // Host staging: u padded (or h, the head's coefficients where it has a head, and the collapse's pre), then the
    // hash rows; after the wait, the output (or h_out and the coefficients).
    const int64_t head_coeffs_in = T * HW, pre_in = head_coeffs_in + (has_head ? T * NC : 0);
    const int64_t in_floats = has_side ? pre_in + (side_pre ? T * 4 : 0) : T * kx;
    const int64_t out_floats = has_side ? T * (HW + NC) : T * D;
    moe_host_.reserve(size_t(std::max(in_floats + R, out_floats)) * 4);
    uint8_t* dev = moe_scratch_.get<uint8_t>();
    auto f32 = [&](size_t offset) { return reinterpret_cast<float*>(dev + offset); };
    auto i32 = [&](size_t offset) { return reinterpret_cast<int32_t*>(dev + offset); };
    auto ops = [&](size_t offset) { return reinterpret_cast<cuda::LinearLaunch*>(dev + offset); };

    float* in_host = moe_host_.get<float>();
    // A tail's output stream left on the device (BlockTailParams::keep_h_out); its attention-side stream where the
    // front kept it (MhcSideParams::h_kept): read there, not copied in (the same array where the block's stream
    // buffers take turns: the expansion reads it before the output lands there, in stream order).
    float* kept_out = has_head && head->p->keep_h_out ? keep_array(side->p->h_out, T * HW) : nullptr;
    // V4.1's pre (the coefficients' floats 0-3): kept on the device (BlockTailParams::keep_pre_out), or back.
    DI_CHECK_MSG(!(has_head && head->p->keep_pre_out) || side->p->pre_out, "block tail: keep_pre_out without a pre_out");
    float* kept_pre = has_head && head->p->keep_pre_out ? keep_array(side->p->pre_out, T * 4) : nullptr;
    const bool pre_back = has_side && side->p->pre_out && !kept_pre;
    const float* kept_head_h = has_head && head->p->attention.h_kept ? kept_at(head->p->attention.h, T * HW) : nullptr;
    if (has_side) {
      if (!kept_head_h) std::memcpy(in_host, has_head ? head->p->attention.h : side->p->h, size_t(T * HW) * 4);
      if (has_head) std::memcpy(in_host + head_coeffs_in, head->p->attention_coeffs, size_t(T * NC) * 4);
      if (side_pre) std::memcpy(in_host + pre_in, side->p->collapse_pre, size_t(T * 4) * 4);
    } else {
      copy_rows(p.u, D, T, D, in_host, kx, kx);
    }
    auto* hash_host = reinterpret_cast<int32_t*>(in_host + in_floats);
    if (w.hash_routed) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < K; ++i) hash_host[t * K + i] = int32_t(w.tid2eid[int64_t(p.token_ids[t]) * K + i]);
      }
    }

    // The launches, all set up here: nothing below allocates or uploads, so that it can be captured.
    int64_t partial_floats = 0;
    auto lone = [&](const cuda::DeviceWeight& d, const float* x, int64_t n_rows, cuda::LinearEpilogue epilogue, float* out) {
      cuda::LinearLaunch l = launch_of(d);
      l.x = x;
      l.n_tokens = T;
      l.n_rows = n_rows;
      l.epilogue = epilogue;
      l.out = out;
      partial_floats = std::max(partial_floats, cuda::linear_mma_partial_floats(l, mma_choice_));
      return l;
    };
    // M1 (on u itself) and M7's w1 / w3 (on the QDQ'd u), then M7's w2.
    const cuda::LinearLaunch gate = lone(*block.gate, f32(u_at), E, cuda::LinearEpilogue::kSqrtSoftplus, f32(scores_at));
    const cuda::LinearLaunch shared_w1 = lone(*block.shared_w1, f32(uq_at), IS, cuda::LinearEpilogue::kBf16, f32(sa_at));
    const cuda::LinearLaunch shared_w3 = lone(*block.shared_w3, f32(uq_at), IS, cuda::LinearEpilogue::kBf16, f32(sb_at));
    const cuda::LinearLaunch shared_w2 = lone(*block.shared_w2, f32(sh_at), D, cuda::LinearEpilogue::kBf16, f32(sy_at));
    if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * 4);
    const cuda::ActQdqLaunch u_qdq{f32(u_at), kx, T, D, p.act_block, rule, f32(uq_at), kx, kx};
    const double shared_limit = p.v41 ? p.swiglu_limit : INFINITY;  // moe.cpp: V4 does not clamp the shared expert
    const cuda::SwigluQdqLaunch shared_swiglu{f32(sa_at), f32(sb_at), IS, T, IS, shared_limit, nullptr, p.act_block, rule,
                                              f32(sh_at), k2s, k2s};
    const cuda::SwigluQdqLaunch routed_swiglu{f32(a_at), f32(b_at), I, R, I, p.swiglu_limit, f32(row_weight_at), p.act_block,
                                              rule, f32(h_at), k2, k2};
    const cuda::MoeCombineLaunch combine{f32(y_at), i32(token_rows_at), f32(sy_at), T, K, D, f32(out_at)};
    // M2 / M3 and the plan of the routed rows.
    cuda::MoeRouteLaunch route;
    route.scores = f32(scores_at);
    route.bias = block.gate_bias;
    route.hash_chosen = i32(hash_at);
    route.n_tokens = T;
    route.n_experts = E;
    route.top_k = K;
    route.v41 = p.v41;
    route.route_scale = p.route_scale;
    route.row_token = i32(row_token_at);
    route.row_weight = f32(row_weight_at);
    route.token_rows = i32(token_rows_at);
    const auto* templates = block.templates.get<cuda::LinearLaunch>();
    route.w1 = templates;
    route.w3 = templates + E;
    route.w2 = templates + 2 * E;
    route.n_slots = n_slots;
    route.w13_ops = ops(w13_at);
    route.w2_ops = ops(w2_at);
    route.x_rows = f32(x_at);
    route.x_stride = kx;
    route.a = f32(a_at);
    route.b = f32(b_at);
    route.inter = I;
    route.h_rows = f32(h_at);
    route.h_stride = k2;
    route.y = f32(y_at);
    route.dim = D;

    cuda::HcPreLaunch pre;
    cuda::HcPostLaunch post;
    if (has_side) {
      pre = hc_pre_launch(*side, f32(stream_at), f32(mixes_at), side_pre ? f32(pre_at) : nullptr, f32(coeffs_at), f32(u_at), kx);
      post = {f32(stream_at), f32(out_at), D, f32(coeffs_at), T, D, f32(stream_out_at)};
    }

    auto enqueue = [&] {
      if (has_head) {  // the output chain, then the attention side's P1 / P2 into the FFN side's h
        if (!kept_head_h) DI_CUDA_CHECK(cudaMemcpyAsync(f32(head_h_at), in_host, size_t(T * HW) * 4, cudaMemcpyHostToDevice, stream_));
        DI_CUDA_CHECK(cudaMemcpyAsync(f32(head_coeffs_at), in_host + head_coeffs_in, size_t(T * NC) * 4, cudaMemcpyHostToDevice,
                                      stream_));
        enqueue_output_chain(*head->chain);
        cuda::launch_hc_post({kept_head_h ? kept_head_h : f32(head_h_at), head->chain->y, head->chain->n_out, f32(head_coeffs_at), T,
                              D, f32(stream_at)},
                             stream_);
      }
      if (has_side) {  // B1-B8 into u
        const MhcWeights& m = side->p->mhc;
        if (!has_head) DI_CUDA_CHECK(cudaMemcpyAsync(f32(stream_at), in_host, size_t(T * HW) * 4, cudaMemcpyHostToDevice, stream_));
        if (side_pre) DI_CUDA_CHECK(cudaMemcpyAsync(f32(pre_at), in_host + pre_in, size_t(T * 4) * 4, cudaMemcpyHostToDevice, stream_));
        cuda::launch_hc_mix({f32(stream_at), T, HW, side->fn, m.n_mix, m.eps, f32(mixes_at)}, stream_);
        cuda::launch_hc_pre(pre, stream_);
      } else {
        DI_CUDA_CHECK(cudaMemcpyAsync(f32(u_at), in_host, size_t(T * kx) * 4, cudaMemcpyHostToDevice, stream_));
      }
      if (w.hash_routed) DI_CUDA_CHECK(cudaMemcpyAsync(i32(hash_at), hash_host, size_t(R) * 4, cudaMemcpyHostToDevice, stream_));
      cuda::launch_act_qdq(u_qdq, stream_);
      launch_lone_mma(gate);
      launch_lone_mma(shared_w1);
      launch_lone_mma(shared_w3);
      cuda::launch_swiglu_qdq(shared_swiglu, stream_);
      launch_lone_mma(shared_w2);
      cuda::launch_moe_route(route, stream_);
      cuda::launch_gather_rows(f32(uq_at), kx, i32(row_token_at), R, kx, f32(x_at), kx, stream_);
      cuda::launch_linear_mma_grouped(ops(w13_at), int(2 * n_slots), block.expert_kind, kx, I, T, stream_, mma_choice_);
      cuda::launch_swiglu_qdq(routed_swiglu, stream_);
      cuda::launch_linear_mma_grouped(ops(w2_at), int(n_slots), block.expert_kind, k2, D, T, stream_, mma_choice_);
      cuda::launch_moe_combine(combine, stream_);
      if (has_side) {  // P2, then h_out and the coefficients back
        cuda::launch_hc_post(post, stream_);
        if (kept_out) {
          DI_CUDA_CHECK(cudaMemcpyAsync(kept_out, f32(stream_out_at), size_t(T * HW) * 4, cudaMemcpyDeviceToDevice, stream_));
        } else {
          DI_CUDA_CHECK(cudaMemcpyAsync(in_host, f32(stream_out_at), size_t(T * HW) * 4, cudaMemcpyDeviceToHost, stream_));
        }
        if (pre_back) DI_CUDA_CHECK(cudaMemcpyAsync(in_host + T * HW, f32(coeffs_at), size_t(T * NC) * 4, cudaMemcpyDeviceToHost, stream_));
        if (kept_pre) {
          DI_CUDA_CHECK(cudaMemcpy2DAsync(kept_pre, 4 * 4, f32(coeffs_at), size_t(NC) * 4, 4 * 4, size_t(T), cudaMemcpyDeviceToDevice,
                                          stream_));
        }
      } else {
        DI_CUDA_CHECK(cudaMemcpyAsync(in_host, f32(out_at), size_t(T * D) * 4, cudaMemcpyDeviceToHost, stream_));
      }
    };
    // Keyed by what the captured work depends on besides the buffers: the block, the token count, the side, and
    // the head's output chain (whose scratch and staging are the chain's).
    GraphKey key = {has_head ? kTailGraph : kMoeGraph, word(&w), T, word(kept_head_h != nullptr), word(kept_out != nullptr),
                    word(pre_back), word(kept_pre != nullptr)};
    if (has_side) add_side_words(*side->p, key);
    if (has_head) add_output_chain_words(head->p->output, key);
    if (graphs_) {
      std::vector<const void*> buffers = {moe_scratch_.get(), moe_host_.get(), partials_.get()};
      if (has_head) {
        buffers.insert(buffers.end(), {chain_scratch_.get(), chain_host_.get(), kept_head_h, kept_out, kept_pre});
        buffers.insert(buffers.end(), head->chain->kept_x.begin(), head->chain->kept_x.end());
      }
      run_as_graph(key, std::move(buffers), enqueue);
    } else {
      enqueue();
    }
    if (kept_out && !pre_back) {  // nothing comes back: the next block's front queues behind this without a wait
      tail_staging_.queued(stream_);
      return;
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!has_side) {
      std::memcpy(p.out, in_host, size_t(T * D) * 4);
      return;
    }
    if (!kept_out) std::memcpy(side->p->h_out, in_host, size_t(T * HW) * 4);
    if (pre_back) {
      for (int64_t t = 0; t < T; ++t) std::memcpy(side->p->pre_out + t * 4, in_host + T * HW + t * NC, 4 * 4);  // pre: floats 0-3
    }
  }

  // A call's stream work as a CUDA graph (the device MoE or FFN side, the attention's front, the output projection's
  // chain), one per key: captured at the first call and replayed after, one launch where the stream would take its
  // ~10-20 operations one by one.
  // The key holds everything the captured work depends on but the buffers' addresses (GraphKey's words: a kind,
  // then pointers, sizes and bit patterns); a graph also holds the addresses of the buffers it was captured with
  // (scratch, staging, partials, descriptors), and when one of those has grown since, it is captured anew. A device
  // whose runtime refuses the capture turns graphs off for this backend (said once) and runs the work as it is.
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
  static void add_side_words(const MhcSideParams& side, GraphKey& key) {
    const MhcWeights& m = side.mhc;
    for (int64_t w : {word(m.fn), word(m.scale), word(m.base), word(m.norm), m.n_mix, int64_t(m.sinkhorn_iters), word(m.eps),
                      word(m.hc_eps), word(side.collapse_pre != nullptr), side.dim}) {
      key.push_back(w);
    }
  }
  // An output chain's part of a graph key: the token count, each op's weight, rows, epilogue and place, mid's QDQ.
  static void add_output_chain_words(const LinearChainParams& p, GraphKey& key) {
    for (int64_t w : {p.n_tokens, p.mid_width, p.qdq_block, word(p.v41), word(p.x_kept)}) key.push_back(w);
    for (const LinearParams& op : p.first) {
      for (int64_t w : {word(op.weight), op.row_begin, op.n_rows, int64_t(op.epilogue), int64_t(op.out - p.mid)}) key.push_back(w);
    }
    for (int64_t w : {word(p.second.weight), p.second.row_begin, p.second.n_rows, int64_t(p.second.epilogue)}) key.push_back(w);
  }

  void run_as_graph(const GraphKey& key, std::vector<const void*> buffers, const std::function<void()>& enqueue) {
    auto it = graphs_by_key_.find(key);
    if (it != graphs_by_key_.end() && it->second.buffers == buffers) {
      DI_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
      return;
    }
    if (it != graphs_by_key_.end()) {
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a launch a call did not wait for may still run it
      cudaGraphExecDestroy(it->second.exec);
      graphs_by_key_.erase(it);
    }
    if (graphs_by_key_.size() >= kMaxGraphs) drop_graphs();  // serving's batch sizes come and go
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
    if (err == cudaSuccess) {
      enqueue();
      err = cudaStreamEndCapture(stream_, &graph);
    }
    if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "%s: CUDA graph capture failed (%s); running without graphs\n", name_.c_str(), cudaGetErrorString(err));
      graphs_ = false;
      enqueue();
      return;
    }
    graphs_by_key_.emplace(key, CapturedGraph{exec, std::move(buffers)});
    DI_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  }
  void drop_graphs() {
    cudaStreamSynchronize(stream_);  // a launch a call did not wait for may still run one (unchecked: the destructor calls this)
    for (auto& [key, g] : graphs_by_key_) cudaGraphExecDestroy(g.exec);
    graphs_by_key_.clear();
  }

  // Queues a linears() batch on the stream up to its outputs' copy back to staging; false when it has no work.
  bool enqueue_linears(std::span<const LinearParams> ps) {
    weights_of_.assign(ps.size(), nullptr);
    k_.assign(ps.size(), 0);
    k_pad_.assign(ps.size(), 0);
    for (size_t i = 0; i < ps.size(); ++i) {
      const LinearParams& p = ps[i];
      if (p.n_tokens == 0 || p.n_rows == 0) continue;
      const cuda::DeviceWeight& w = weights_.get(*p.weight, stream_);
      DI_CHECK(p.row_begin >= 0 && p.row_begin + p.n_rows <= w.n_out);
      weights_of_[i] = &w;
      k_[i] = w.n_in;
      k_pad_[i] = w.k_pad;
    }
    layout_.plan(ps, k_, k_pad_);
    const size_t in_bytes = layout_.input_bytes(), bytes = layout_.bytes();
    if (bytes == 0) return false;
    batch_.reserve(bytes);
    staging_.reserve(bytes);
    uint8_t* base = batch_.get<uint8_t>();
    uint8_t* host = staging_.get<uint8_t>();
    layout_.stage_inputs(ps, host);
    if (in_bytes) DI_CUDA_CHECK(cudaMemcpyAsync(base, host, in_bytes, cudaMemcpyHostToDevice, stream_));
    launches_.clear();
    fp8_launches_.clear();
    for (size_t i = 0; i < ps.size(); ++i) {
      const LinearBatchLayout::Place& at = layout_.places()[i];
      if (at.empty) continue;
      const LinearParams& p = ps[i];
      const cuda::DeviceWeight& w = *weights_of_[i];
      cuda::LinearLaunch l = launch_of(w, p, reinterpret_cast<const float*>(base + at.x), reinterpret_cast<float*>(base + at.out));
      if (p.epilogue == Epilogue::kF32AddBias) l.bias = reinterpret_cast<const float*>(base + at.bias);
      if (takes_fp8_path(p, w)) {
        l.x_e4m3_block = p.x_e4m3_block;
        fp8_launches_.push_back(l);
      } else if (tensor_core_linear_ && w.mma_exact) {
        launches_.push_back(l);
      } else {
        cuda::launch_linear(l, stream_);
      }
    }
    launch_mma_groups(launches_, descriptors_host_, descriptors_);
    launch_fp8_groups();
    DI_CUDA_CHECK(cudaMemcpyAsync(host + in_bytes, base + in_bytes, bytes - in_bytes, cudaMemcpyDeviceToHost, stream_));
    return true;
  }

  static bool same_mma_shape(const cuda::LinearLaunch& a, const cuda::LinearLaunch& b) {
    return a.kind == b.kind && a.k_pad == b.k_pad;
  }
  // The order launch_mma_groups runs launches in: by weight kind, then k_pad, so each shape's run is contiguous
  // (stable: sorting again changes nothing).
  static void sort_by_mma_shape(std::vector<cuda::LinearLaunch>& launches) {
    std::stable_sort(launches.begin(), launches.end(), [](const cuda::LinearLaunch& a, const cuda::LinearLaunch& b) {
      return a.kind != b.kind ? int(a.kind) < int(b.kind) : a.k_pad < b.k_pad;
    });
  }
  // The partials_ floats that launch_mma_groups needs for these launches (sorted by sort_by_mma_shape): the largest
  // lone op's split over K.
  int64_t mma_group_partial_floats(std::span<const cuda::LinearLaunch> launches) const {
    int64_t floats = 0;
    for_each_run(launches, kMaxGridYZ, same_mma_shape, [&](std::span<const cuda::LinearLaunch> run) {
      if (run.size() == 1) floats = std::max(floats, cuda::linear_mma_partial_floats(run[0], mma_choice_));
    });
    return floats;
  }

  // The tensor-core launches of a linears() batch: those that share a weight kind and k_pad go as one grouped
  // launch over an uploaded array of their descriptors (through descriptors_host to descriptors, which nothing
  // queued may still read), a lone one as a plain launch.
  void launch_mma_groups(std::vector<cuda::LinearLaunch>& launches, cuda::PinnedBuffer& descriptors_host,
                         DeviceBuffer& descriptors) {
    upload_mma_descriptors(launches, descriptors_host, descriptors);
    launch_uploaded_mma_groups(launches, descriptors);
  }
  // launch_mma_groups in two steps: the launches sorted and their descriptors' upload queued, then the launches.
  // A CUDA graph captures the second alone: a captured upload would copy whatever the shared staging holds when
  // the graph replays (another graph's descriptors, captured since).
  void upload_mma_descriptors(std::vector<cuda::LinearLaunch>& launches, cuda::PinnedBuffer& descriptors_host,
                              DeviceBuffer& descriptors) {
    if (launches.empty()) return;
    sort_by_mma_shape(launches);
    const size_t n = launches.size();
    descriptors_host.reserve(n * sizeof(cuda::LinearLaunch));
    descriptors.reserve(n * sizeof(cuda::LinearLaunch));
    std::memcpy(descriptors_host.get(), launches.data(), n * sizeof(cuda::LinearLaunch));
    DI_CUDA_CHECK(cudaMemcpyAsync(descriptors.get(), descriptors_host.get(), n * sizeof(cuda::LinearLaunch),
                                  cudaMemcpyHostToDevice, stream_));
    // A lone op split over K sums its slices in partials_: sized for the largest first (the launches of the
    // batch use it one after another, in stream order).
    const int64_t partial_floats = mma_group_partial_floats(launches);
    if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * sizeof(float));
  }
  void launch_uploaded_mma_groups(std::span<const cuda::LinearLaunch> all, const DeviceBuffer& descriptors) {
    for_each_run(all, kMaxGridYZ, same_mma_shape, [&](std::span<const cuda::LinearLaunch> run) {
      if (run.size() == 1) {
        launch_lone_mma(run[0]);
        return;
      }
      int64_t max_rows = 0, max_tokens = 0;
      for (const cuda::LinearLaunch& l : run) {
        max_rows = std::max(max_rows, l.n_rows);
        max_tokens = std::max(max_tokens, l.n_tokens);
      }
      const cuda::LinearLaunch* run_descriptors = descriptors.get<cuda::LinearLaunch>() + (run.data() - all.data());
      cuda::launch_linear_mma_grouped(run_descriptors, int(run.size()), run[0].kind, run[0].k_pad, max_rows, max_tokens, stream_,
                                      mma_choice_);
    });
  }

  // DEEPINFER_CUDA_PROMPT_LINEAR=fp8: a prompt token's op whose x the caller quantised to e4m3 blocks
  // (x_e4m3_block) and whose FP8 or FP4 weights have tensor-core-exact scales runs on FP8 operands; every other
  // op goes where it goes without it.
  bool takes_fp8_path(const LinearParams& p, const cuda::DeviceWeight& w) const {
    return fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt && p.x_e4m3_block > 0 && w.mma_exact &&
           cuda::linear_fp8_supports(w.kind, w.block, p.x_e4m3_block);
  }

  // The FP8-operand launches of a linears() batch. Each distinct x (an expert's w1 and w3 share theirs) gets
  // its codes and scales in fp8_scratch_, from one grouped prepass; then ops of one weight kind and token class
  // (below) run as one grouped launch, a lone op as a plain launch. All of it follows the batch's input copy on
  // the one stream.
  void launch_fp8_groups() {
    if (fp8_launches_.empty()) return;
    // Grouped by weight kind and by whether the big tile's 128 tokens could be half full: a grouped launch picks
    // its tile by its longest op, so a prefill's short experts would otherwise ride in mostly empty big tiles
    // beside one long one (the tile never changes a bit).
    auto group_of = [](const cuda::LinearLaunch& l) { return 2 * int(l.kind) + (l.n_tokens > 64 ? 1 : 0); };
    std::stable_sort(fp8_launches_.begin(), fp8_launches_.end(),
                     [&](const cuda::LinearLaunch& a, const cuda::LinearLaunch& b) { return group_of(a) < group_of(b); });
    const size_t n = fp8_launches_.size();
    fp8_code_at_.assign(n, 0);
    fp8_code_of_.assign(n, n);  // n: this op's x is the first of its kind
    size_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      const cuda::LinearLaunch& l = fp8_launches_[i];
      for (size_t j = 0; j < i; ++j) {
        const cuda::LinearLaunch& o = fp8_launches_[j];
        if (o.x == l.x && o.x_e4m3_block == l.x_e4m3_block && o.n_tokens == l.n_tokens && o.k_pad == l.k_pad) {
          fp8_code_of_[i] = j;
          break;
        }
      }
      if (fp8_code_of_[i] != n) {
        fp8_code_at_[i] = fp8_code_at_[fp8_code_of_[i]];
        continue;
      }
      fp8_code_at_[i] = bytes;
      bytes += size_t(cuda::linear_fp8_scratch_bytes(l.n_tokens, l.k_pad, l.x_e4m3_block));
    }
    fp8_scratch_.reserve(bytes);
    fp8_codes_.clear();
    int64_t max_items = 0;
    for (size_t i = 0; i < n; ++i) {
      cuda::set_linear_fp8_scratch(fp8_launches_[i], fp8_scratch_.get<uint8_t>() + fp8_code_at_[i]);
      if (fp8_code_of_[i] == n) {
        fp8_codes_.push_back(fp8_launches_[i]);
        max_items = std::max(max_items, cuda::linear_fp8_code_items(fp8_launches_[i]));
      }
    }
    // Descriptors: the main launches, then the prepass's (one per distinct x), in one copy.
    const size_t n_codes = fp8_codes_.size(), desc_bytes = (n + n_codes) * sizeof(cuda::LinearLaunch);
    fp8_descriptors_host_.reserve(desc_bytes);
    fp8_descriptors_.reserve(desc_bytes);
    auto* host = fp8_descriptors_host_.get<cuda::LinearLaunch>();
    std::memcpy(host, fp8_launches_.data(), n * sizeof(cuda::LinearLaunch));
    std::memcpy(host + n, fp8_codes_.data(), n_codes * sizeof(cuda::LinearLaunch));
    DI_CUDA_CHECK(cudaMemcpyAsync(fp8_descriptors_.get(), host, desc_bytes, cudaMemcpyHostToDevice, stream_));
    const cuda::LinearLaunch* device = fp8_descriptors_.get<cuda::LinearLaunch>();
    for (size_t i = 0; i < n_codes; i += kMaxGridYZ) {
      cuda::launch_linear_fp8_codes_grouped(device + n + i, int(std::min(kMaxGridYZ, n_codes - i)), max_items, stream_);
    }
    auto same_group = [&](const cuda::LinearLaunch& a, const cuda::LinearLaunch& b) { return group_of(a) == group_of(b); };
    const std::span<const cuda::LinearLaunch> all(fp8_launches_);
    for_each_run(all, kMaxGridYZ, same_group, [&](std::span<const cuda::LinearLaunch> run) {
      if (run.size() == 1) {
        if (fp8_wgmma_) cuda::launch_linear_fp8_wgmma(run[0], stream_);
        else cuda::launch_linear_fp8(run[0], stream_, fp8_tile_);
        return;
      }
      int64_t max_rows = 0, max_tokens = 0;
      for (const cuda::LinearLaunch& l : run) {
        max_rows = std::max(max_rows, l.n_rows);
        max_tokens = std::max(max_tokens, l.n_tokens);
      }
      const cuda::LinearLaunch* ops = device + (run.data() - all.data());
      if (fp8_wgmma_) cuda::launch_linear_fp8_wgmma_grouped(ops, int(run.size()), run[0].kind, max_rows, max_tokens, stream_);
      else cuda::launch_linear_fp8_grouped(ops, int(run.size()), run[0].kind, max_rows, max_tokens, stream_, fp8_tile_);
    });
  }

  // Query tokens of one n_heads and dim: q and weights gathered into pinned staging, each token's key count,
  // output offset and first key row, then the keys of every distinct key array (IndexKeyArrays: float arrays
  // first, then the packed arrays' bytes, which a kernel decodes on the device behind the float rows); one
  // launch, the scores back in one copy.
  // With `selects` (index_select_batch: batch[i] is selects[i].score), each token's selection after its scores,
  // and the selections back instead of the scores.
  void score(std::span<const IndexScoreParams> batch, std::span<const IndexSelectParams> selects = {}) {
    const IndexScoreParams& p0 = batch[0];
    index_staging_.wait();  // index_host_ below
    const int64_t T = int64_t(batch.size()), H = p0.n_heads, dim = p0.dim;
    key_arrays_.plan(batch);
    const int64_t max_keys = key_arrays_.max_keys(), total = key_arrays_.total_keys(), n_rows = key_arrays_.n_rows();
    if (max_keys == 0) return;
    const std::vector<IndexKeyArrays::Array>& arrays = key_arrays_.arrays();
    const int64_t n_float_rows = key_arrays_.n_float_rows();
    // The packed keys' bytes: with the mirror only the rows the device lacks, followed by every packed row's slot
    // in the arena and the staged rows' slots; without it every packed array's rows, array after array.
    const bool mirrored = plan_key_upload(arrays, n_float_rows);
    const int64_t row_bytes = mirrored ? key_group_.format.row_bytes : 0;
    const size_t staged_bytes = mirrored ? (key_upload_.staged.size() * size_t(row_bytes) + 15) / 16 * 16 : 0;
    const size_t packed_bytes = mirrored ? staged_bytes + key_upload_.slots.size() * 8 : size_t(key_arrays_.packed_bytes());
    const int64_t qw = T * H * dim + T * H;  // q, then weights
    const int64_t qw_even = qw + (qw & 1);
    const size_t float_key_bytes = size_t(n_float_rows * dim) * 4;
    // The words per token: key count, output offset, first key row; selecting, also the selection's size and
    // offset, the kept blocks' count (-1: no mask) and offset among the kept blocks behind the words, and the
    // candidate blocks' count, their block scores' offset, the candidates' count and their offset (behind the
    // selections).
    const bool selecting = !selects.empty();
    const int64_t n_meta = (selecting ? 11 : 3) * T;
    int64_t n_keep_words = 0, total_select = 0, block_size = 0, total_blocks = 0, total_candidates = 0, max_blocks = 0;
    for (const IndexSelectParams& sp : selects) {
      if (sp.masked) n_keep_words += int64_t(sp.keep_blocks.size());
      if (sp.masked || sp.candidates) block_size = sp.block_size;
      total_select += sp.n_select;
      if (sp.candidates) {
        const int64_t n_blocks = (sp.score.n_keys + sp.block_size - 1) / sp.block_size;
        total_blocks += n_blocks;
        max_blocks = std::max(max_blocks, n_blocks);
        total_candidates += sp.n_candidates;
      }
    }
    // Host staging: q and weights, the words, the kept blocks, the float keys, then the packed section at a 16-byte
    // aligned offset (the device's is too: the scatter reads 4-byte words, the slots are 8 bytes).
    const size_t meta_bytes = size_t(n_meta + n_keep_words) * 8;
    const size_t packed_at = (size_t(qw_even) * 4 + meta_bytes + float_key_bytes + 15) / 16 * 16;
    index_host_.reserve(packed_at + packed_bytes);
    float* q_host = index_host_.get<float>();
    auto* meta_host = reinterpret_cast<int64_t*>(q_host + qw_even);
    auto* float_keys_host = reinterpret_cast<float*>(meta_host + n_meta + n_keep_words);
    uint8_t* packed_host = index_host_.get<uint8_t>() + packed_at;
    // The arrays' copies on the host's threads (a 256-sequence decode step stages 256 of them per layer).
    host_->for_rows(int64_t(arrays.size()), [&](int64_t a0, int64_t a1) {
      for (int64_t i = a0; i < a1; ++i) {
        const IndexKeyArrays::Array& a = arrays[size_t(i)];
        if (a.n_keys == 0) continue;
        if (!a.format) {
          std::memcpy(float_keys_host + a.first_row * dim, a.keys, size_t(a.n_keys * dim) * 4);
          continue;
        }
        if (mirrored) continue;
        const size_t end = size_t(a.first_byte + a.n_keys * a.format->row_bytes);
        size_t at = size_t(a.first_byte);
        for (const PackedRowRun& run : a.runs) {
          const size_t n = std::min(size_t(run.n_rows) * size_t(a.format->row_bytes), end - at);
          std::memcpy(packed_host + at, run.rows, n);
          at += n;
          if (at == end) break;
        }
        DI_CHECK_MSG(at == end, "packed index keys: the runs hold fewer rows than n_keys");
      }
    });
    if (mirrored) {
      copy_staged_rows(key_group_, key_upload_, packed_host);
      std::memcpy(packed_host + staged_bytes, key_upload_.slots.data(), key_upload_.slots.size() * 8);
    }
    // q kept on the device (IndexScoreParams::q_kept): every token's, as the model's.
    for (int64_t t = 0; t < T; ++t) {
      DI_CHECK_MSG(batch[size_t(t)].q_kept == p0.q_kept, "index scores: some tokens' q kept on the device, some not");
    }
    int64_t at = 0;
    for (int64_t t = 0; t < T; ++t) {
      const IndexScoreParams& p = batch[size_t(t)];
      if (!p0.q_kept) std::memcpy(q_host + t * H * dim, p.q, size_t(H * dim) * 4);
      std::memcpy(q_host + T * H * dim + t * H, p.weights, size_t(H) * 4);
      meta_host[t] = p.n_keys;
      meta_host[T + t] = at;
      meta_host[2 * T + t] = arrays[size_t(key_arrays_.array_of(t))].first_row;
      at += p.n_keys;
    }
    if (selecting) {
      int64_t selected_at = 0, keep_at = 0, blocks_at = 0, candidates_at = total_select;
      for (int64_t t = 0; t < T; ++t) {
        const IndexSelectParams& sp = selects[size_t(t)];
        meta_host[3 * T + t] = sp.n_select;
        meta_host[4 * T + t] = selected_at;
        meta_host[5 * T + t] = sp.masked ? int64_t(sp.keep_blocks.size()) : -1;
        meta_host[6 * T + t] = keep_at;
        if (sp.masked) std::copy(sp.keep_blocks.begin(), sp.keep_blocks.end(), meta_host + n_meta + keep_at);
        const int64_t n_blocks = sp.candidates ? (sp.score.n_keys + sp.block_size - 1) / sp.block_size : 0;
        meta_host[7 * T + t] = n_blocks;
        meta_host[8 * T + t] = blocks_at;
        meta_host[9 * T + t] = sp.candidates ? sp.n_candidates : 0;
        meta_host[10 * T + t] = candidates_at;
        selected_at += sp.n_select;
        keep_at += sp.masked ? int64_t(sp.keep_blocks.size()) : 0;
        blocks_at += n_blocks;
        candidates_at += sp.candidates ? sp.n_candidates : 0;
      }
    }
    // Mirrored keys of the index-key format, and no float keys: the kernel reads them packed from the arena, with
    // no float copy of every key each call. Device: rows_ holds the keys as floats [n_rows, dim] (none where the
    // kernel reads them packed), then the packed section as staged.
    const bool read_packed = mirrored && n_float_rows == 0 && key_group_.format.kind == KvRowKind::kFp4Key &&
                             key_group_.format.n_values == dim &&
                             cuda::index_scores_shared_bytes(H, dim, true) <= max_shared_bytes_;
    const size_t packed_dev_at = read_packed ? 0 : (size_t(n_rows * dim) * 4 + 15) / 16 * 16;
    x_.reserve(size_t(qw) * 4);
    index_meta_.reserve(meta_bytes);
    rows_.reserve(packed_dev_at + packed_bytes);
    out_.reserve(size_t(total + total_select + total_candidates + total_blocks) * 4);  // the scores, the selections and
                                                                                      // candidates, the block scores
    const float* q_dev = x_.get<float>();
    if (p0.q_kept) {  // the weights in; q from its kept array
      DI_CUDA_CHECK(cudaMemcpyAsync(x_.get<float>() + T * H * dim, q_host + T * H * dim, size_t(T * H) * 4, cudaMemcpyHostToDevice, stream_));
      q_dev = kept_rows(T, H * dim, [&](int64_t t) { return batch[size_t(t)].q; }, x_.get<float>());
    } else {
      DI_CUDA_CHECK(cudaMemcpyAsync(x_.get(), q_host, size_t(qw) * 4, cudaMemcpyHostToDevice, stream_));
    }
    DI_CUDA_CHECK(cudaMemcpyAsync(index_meta_.get(), meta_host, meta_bytes, cudaMemcpyHostToDevice, stream_));
    if (float_key_bytes) DI_CUDA_CHECK(cudaMemcpyAsync(rows_.get(), float_keys_host, float_key_bytes, cudaMemcpyHostToDevice, stream_));
    uint8_t* packed_dev = rows_.get<uint8_t>() + packed_dev_at;
    if (packed_bytes) DI_CUDA_CHECK(cudaMemcpyAsync(packed_dev, packed_host, packed_bytes, cudaMemcpyHostToDevice, stream_));
    cuda::IndexScoreLaunch l{q_dev, x_.get<float>() + T * H * dim, H, dim, rows_.get<float>(), max_keys, out_.get<float>()};
    if (mirrored) {
      // The rows the arena lacked into their slots; then the kernel reads every key from its slot, or every key is
      // decoded from its slot behind the floats.
      const int64_t n = int64_t(key_group_.rows.size());
      const auto* slots_dev = reinterpret_cast<const int64_t*>(packed_dev + staged_bytes);
      uint8_t* arena = key_upload_.arena->bytes.get<uint8_t>();
      cuda::launch_scatter_rows(packed_dev, int64_t(key_upload_.staged.size()), row_bytes, slots_dev + n, arena, stream_);
      if (read_packed) {
        l.keys = nullptr;
        l.packed_keys = arena;
        l.key_slots = slots_dev;
        l.key_row_bytes = row_bytes;
        l.key_block = key_group_.format.block;
      } else {
        cuda::UnpackRowsLaunch u = unpack_launch(key_group_.format, arena, n, rows_.get<float>() + n_float_rows * dim);
        u.row_slots = slots_dev;
        cuda::launch_unpack_rows(u, stream_);
      }
    } else {
      for (const IndexKeyArrays::Array& a : arrays) {
        if (a.format && a.n_keys) {
          cuda::launch_unpack_rows(unpack_launch(*a.format, packed_dev + a.first_byte, a.n_keys, rows_.get<float>() + a.first_row * dim),
                                   stream_);
        }
      }
    }
    l.n_tokens = T;
    l.token_keys = index_meta_.get<int64_t>();
    l.token_scores_at = index_meta_.get<int64_t>() + T;
    l.token_keys_at = index_meta_.get<int64_t>() + 2 * T;
    if (mma_index_scores_ && H <= cuda::kIndexScoresMmaMaxHeads && cuda::index_scores_mma_shared_bytes(H, dim) <= max_shared_bytes_) {
      cuda::launch_index_scores_mma(l, stream_);
    } else {
      cuda::launch_index_scores(l, stream_);
    }
    if (selecting) {
      const int64_t* meta = index_meta_.get<int64_t>();
      const bool keep = selects[0].keep_selected;
      auto* selected_dev = keep ? selections_dev_.get<int32_t>() + kept_selected_
                                : reinterpret_cast<int32_t*>(out_.get<float>() + total);
      cuda::IndexSelectLaunch sl;
      sl.scores = out_.get<float>();
      sl.token_keys = meta;
      sl.token_scores_at = meta + T;
      sl.token_select = meta + 3 * T;
      sl.token_selected_at = meta + 4 * T;
      sl.keep_blocks = block_size ? meta + n_meta : nullptr;
      sl.token_keep = meta + 5 * T;
      sl.token_keep_at = meta + 6 * T;
      sl.block_size = block_size;
      sl.max_keys = max_keys;
      sl.selected = selected_dev;
      sl.n_tokens = T;
      cuda::launch_index_select(sl, stream_);
      if (total_candidates) {  // V4.1's candidate blocks: their scores, then the same selection over them
        float* block_scores = out_.get<float>() + total + total_select + total_candidates;
        cuda::CandidateBlocksLaunch cl{out_.get<float>(), meta, meta + T, block_size, block_scores, meta + 8 * T, max_blocks, T};
        cuda::launch_candidate_blocks(cl, stream_);
        cuda::IndexSelectLaunch bl;
        bl.scores = block_scores;
        bl.token_keys = meta + 7 * T;
        bl.token_scores_at = meta + 8 * T;
        bl.token_select = meta + 9 * T;
        bl.token_selected_at = meta + 10 * T;
        bl.token_keep = meta + 5 * T;  // unread: no mask
        bl.token_keep_at = meta + 6 * T;
        bl.max_keys = max_blocks;
        bl.selected = selected_dev;
        bl.n_tokens = T;
        cuda::launch_index_select(bl, stream_);
      }
      if (keep) {  // nothing comes back: the attention reads them there (keep_selection_slots)
        for (const IndexSelectParams& sp : selects) {
          if (sp.n_select > 0) {  // (a selection of none is never looked up: SparseAttentionParams::kept_selection)
            kept_selection_index_.try_emplace(reinterpret_cast<uintptr_t>(sp.selected), int32_t(kept_selections_.size()));
            kept_selections_.push_back({sp.n_select, kept_selected_});
          }
          kept_selected_ += sp.n_select;
        }
        index_staging_.queued(stream_);
        return;
      }
      const int64_t n_back = total_select + total_candidates;
      out_host_.reserve(size_t(std::max<int64_t>(n_back, 1)) * 4);
      if (n_back) {
        DI_CUDA_CHECK(cudaMemcpyAsync(out_host_.get(), selected_dev, size_t(n_back) * 4, cudaMemcpyDeviceToHost, stream_));
      }
      DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const auto* selected_host = out_host_.get<int32_t>();
      const int32_t* candidates_host = selected_host + total_select;
      for (const IndexSelectParams& sp : selects) {
        std::copy(selected_host, selected_host + sp.n_select, sp.selected);
        selected_host += sp.n_select;
        if (sp.candidates) {
          std::copy(candidates_host, candidates_host + sp.n_candidates, sp.candidates);
          candidates_host += sp.n_candidates;
        }
      }
      return;
    }
    out_host_.reserve(size_t(total) * 4);
    DI_CUDA_CHECK(cudaMemcpyAsync(out_host_.get(), out_.get(), size_t(total) * 4, cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int64_t t = 0; t < T; ++t) {
      const IndexScoreParams& p = batch[size_t(t)];
      if (p.n_keys > 0) std::memcpy(p.scores, out_host_.get<float>() + meta_host[T + t], size_t(p.n_keys) * 4);
    }
  }

  // DEEPINFER_CUDA_KV=mirror for score(): every packed array's keys as one group (key_group_, in their device row
  // order: array after array behind the float keys, each page's run recorded) through the row mirror (plan_upload into
  // key_upload_), so that a decode step copies only the keys written since the last (one per 4 positions) instead of
  // every key of the context, and finds the pages' runs whole. False (nothing planned) where the mirror does not take
  // them: off, packed arrays of different formats, keys without stamps, more keys than the arena holds.
  bool plan_key_upload(const std::vector<IndexKeyArrays::Array>& arrays, int64_t n_float_rows) {
    if (!mirror_rows_) return false;
    SlotGather::PackedGroup& g = key_group_;
    g.rows.clear();
    g.stamps.clear();
    g.runs.clear();
    const KvRowFormat* format = nullptr;
    for (const IndexKeyArrays::Array& a : arrays) {
      if (!a.format || a.n_keys == 0) continue;
      if (format && !(*a.format == *format)) return false;
      format = a.format;
      g.format = *format;
      DI_CHECK_MSG(a.first_row == n_float_rows + int64_t(g.rows.size()), "packed index keys: the arrays' rows are not in order");
      int64_t left = a.n_keys;
      for (const PackedRowRun& run : a.runs) {
        if (!run.stamps) return false;
        const int64_t n = std::min(run.n_rows, left);
        if (n <= 0) continue;
        g.append_run(run, n);  // a page's run of keys, which the mirror finds whole from the next call on
        left -= n;
        if (left == 0) break;
      }
      DI_CHECK_MSG(left == 0, "packed index keys: the runs hold fewer rows than n_keys");
    }
    if (!format) return false;
    g.first_row = n_float_rows;
    plan_upload(g, key_upload_);
    return key_upload_.arena != nullptr;
  }

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
  RowArena* arena_for(int64_t row_bytes) {
    auto [it, fresh] = arenas_.try_emplace(row_bytes);
    if (fresh) {
      const int64_t capacity = int64_t(mirror_gb_ * 1e9 / 3) / row_bytes;
      DeviceBuffer bytes = capacity > 0 ? DeviceBuffer::try_allocate(size_t(capacity * row_bytes)) : DeviceBuffer();
      if (bytes.get()) it->second = std::make_unique<RowArena>(RowArena{RowMirror(capacity), std::move(bytes)});
      else std::fprintf(stderr, "%s: no device memory for the row mirror (%lld B rows); they are copied each call\n",
                        name_.c_str(), (long long)row_bytes);
    }
    return it->second.get();
  }

  // A packed group's upload: with the mirror (every row stamped, rows a multiple of 4 bytes for the scatter,
  // the group no larger than its arena) the rows its arena lacks, else all of them (mirror_group_slots: the group's
  // page runs, a kept selection's or the index keys', looked up whole, the other rows' lookups on the host's threads,
  // since a 256-sequence decode step reads ~160k rows a layer; the placing of the missing rows, few in a decode step,
  // on this one).
  void plan_upload(const SlotGather::PackedGroup& g, PackedUpload& u) {
    const int64_t n = int64_t(g.rows.size());
    u.arena = mirror_rows_ && g.format.row_bytes % 4 == 0 ? arena_for(g.format.row_bytes) : nullptr;
    const bool stamped = std::find(g.stamps.begin(), g.stamps.end(), uint64_t(0)) == g.stamps.end();
    if (!u.arena || !stamped || n > u.arena->mirror.capacity()) {
      u.arena = nullptr;
      u.staged.resize(size_t(n));
      std::iota(u.staged.begin(), u.staged.end(), int64_t(0));
      u.slots.clear();
      return;
    }
    mirror_group_slots(u.arena->mirror, g, host_.get(), u.slots, u.staged);
    for (int64_t k : u.staged) u.slots.push_back(u.slots[size_t(k)]);  // the copied rows' slots, for the scatter
  }

  // The bytes of the rows u stages from group g, one after another into dst, on the host's threads.
  void copy_staged_rows(const SlotGather::PackedGroup& g, const PackedUpload& u, uint8_t* dst) {
    const size_t row_bytes = size_t(g.format.row_bytes);
    host_->for_rows(int64_t(u.staged.size()), [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) std::memcpy(dst + size_t(s) * row_bytes, g.rows[size_t(u.staged[size_t(s)])], row_bytes);
    });
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
  void attend(std::span<const SparseAttentionParams> batch) {
    const SparseAttentionParams& p0 = batch[0];
    const int64_t T = int64_t(batch.size()), H = p0.n_heads, D = p0.head_dim;
    // Kept q and outputs (backend.h): every token of a call the same, as the model's are.
    for (const SparseAttentionParams& p : batch) {
      DI_CHECK_MSG(p.q_kept == p0.q_kept && (p.out_rope != nullptr) == (p0.out_rope != nullptr),
                   "sparse attention: some tokens' q or outputs kept on the device, some not");
    }
    attention_staging_.wait();
    gather_.gather(batch);
    const int64_t n_slots = gather_.n_slots(), n_float = int64_t(gather_.float_rows().size());
    const int64_t n_rows = gather_.n_rows();
    const std::vector<SlotGather::PackedGroup>& groups = gather_.packed_groups();
    uploads_.resize(groups.size());
    size_t packed_bytes = 0;
    int64_t n_slot_words = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      PackedUpload& u = uploads_[i];
      plan_upload(groups[i], u);
      u.byte_at = packed_bytes;  // 16-byte aligned for the scatter's 4-byte words, whatever the rows before
      packed_bytes += (u.staged.size() * size_t(groups[i].format.row_bytes) + 15) / 16 * 16;
      u.slot_at = n_slot_words;
      n_slot_words += int64_t(u.slots.size());
    }
    // The attention reads the packed rows as they are when it can: its kernels take a few groups; their shared
    // memory then holds each slot's row address too (the kernel the decoded rows would get must still fit); and
    // no two groups share an arena (one row size), since a later group's placing may reuse an earlier group's
    // slots, which the decoded path has read by then and the attention would read after.
    const bool split = split_attention_ && cuda::sparse_attention_split_shared_bytes(n_slots) <= max_shared_bytes_;
    const size_t packed_shared =
        split ? cuda::sparse_attention_split_shared_bytes(n_slots, true) : cuda::sparse_attention_shared_bytes(n_slots, true);
    bool read_packed = packed_attention_rows_ && !groups.empty() && groups.size() <= size_t(cuda::kMaxAttentionPackedGroups) &&
                       packed_shared <= max_shared_bytes_;
    for (size_t i = 0; read_packed && i < groups.size(); ++i) {
      for (size_t k = 0; k < i; ++k) read_packed = read_packed && !(uploads_[i].arena && uploads_[i].arena == uploads_[k].arena);
    }
    const int64_t n_decoded = read_packed ? n_float : n_rows;  // the float rows on the device
    // The slots after the packed bytes, at an 8-byte aligned device address (the packed bytes start 4-byte aligned,
    // behind the rows, q and sink, from the 256-byte aligned rows_).
    const size_t misalign = size_t(n_decoded * D + T * H * D + H) * 4 % 8;
    const size_t slot_words_at = (packed_bytes + misalign + 7) / 8 * 8 - misalign;
    const size_t packed_and_slots = slot_words_at + size_t(n_slot_words) * 8;
    rows_host_.reserve(size_t(n_float * D + T * H * D + H) * 4 + packed_and_slots);
    float* rows = rows_host_.get<float>();
    // The rows' copies into staging on the host's threads: a 256-sequence decode step gathers ~160k rows
    // (335 MB as floats) per layer, more than one thread copies in a few milliseconds.
    host_->for_rows(n_float, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::memcpy(rows + r * D, gather_.float_rows()[size_t(r)], size_t(D) * 4);
    });
    float* q_host = rows + n_float * D;  // [T, H, D] after the float rows
    if (!p0.q_kept) {
      for (int64_t t = 0; t < T; ++t) std::memcpy(q_host + t * H * D, batch[size_t(t)].q, size_t(H * D) * 4);
    }
    std::memcpy(q_host + T * H * D, p0.sink, size_t(H) * 4);  // then the sink
    auto* packed_host = reinterpret_cast<uint8_t*>(q_host + T * H * D + H);  // then the staged rows' bytes
    for (size_t i = 0; i < groups.size(); ++i) copy_staged_rows(groups[i], uploads_[i], packed_host + uploads_[i].byte_at);
    for (const PackedUpload& u : uploads_) {  // then the arenas' slots (host side possibly unaligned: memcpy)
      if (!u.slots.empty()) {
        std::memcpy(packed_host + slot_words_at + size_t(u.slot_at) * 8, u.slots.data(), u.slots.size() * 8);
      }
    }
    // The slot rows, then for kept selections each token's words and the tables (keep_selection_slots).
    const std::vector<int32_t>& tables = gather_.selection_tables();
    const bool kept_selections = !tables.empty();
    const size_t words_at = (size_t(T * n_slots) * 4 + 7) / 8 * 8;
    const size_t index_bytes = kept_selections ? words_at + size_t(T * cuda::kSelectedSlotsWords) * 8 + tables.size() * 4
                                               : size_t(T * n_slots) * 4;
    slot_host_.reserve(std::max<size_t>(index_bytes, 4));
    int32_t* slot_row = slot_host_.get<int32_t>();
    std::memcpy(slot_row, gather_.slot_rows().data(), size_t(T * n_slots) * 4);
    if (kept_selections) keep_selection_slots(batch, slot_host_.get<uint8_t>() + words_at);

    // Device: the float rows and the decoded packed rows, then q, then sink, then the staged packed bytes and the
    // arenas' slots; slot indices; outputs. The host's [float rows][q, sink, packed bytes, slots] go over in two
    // copies.
    const size_t staged = size_t(T * H * D + H) * 4 + packed_and_slots;
    rows_.reserve(size_t(n_decoded * D) * 4 + staged);
    index_.reserve(std::max<size_t>(index_bytes, 4));
    out_.reserve(size_t(T * H * D) * 4);
    float* rows_dev = rows_.get<float>();
    float* q_dev = rows_dev + n_decoded * D;
    float* sink_dev = q_dev + T * H * D;
    const auto* packed_dev = reinterpret_cast<const uint8_t*>(sink_dev + H);
    const auto* slots_dev = reinterpret_cast<const int64_t*>(packed_dev + slot_words_at);
    if (n_float) DI_CUDA_CHECK(cudaMemcpyAsync(rows_dev, rows, size_t(n_float * D) * 4, cudaMemcpyHostToDevice, stream_));
    const float* q_in = q_dev;
    if (p0.q_kept) {  // the staged part from the sink on; q from its kept array
      DI_CUDA_CHECK(cudaMemcpyAsync(sink_dev, q_host + T * H * D, staged - size_t(T * H * D) * 4, cudaMemcpyHostToDevice, stream_));
      q_in = kept_rows(T, H * D, [&](int64_t t) { return batch[size_t(t)].q; }, q_dev);
    } else {
      DI_CUDA_CHECK(cudaMemcpyAsync(q_dev, q_host, staged, cudaMemcpyHostToDevice, stream_));
    }
    cuda::AttentionLaunch a{q_in, H, D, rows_dev, nullptr, n_slots, sink_dev, p0.softmax_scale, p0.block_running_max,
                            out_.get<float>()};
    a.n_tokens = T;
    for (size_t i = 0; i < groups.size(); ++i) {
      const SlotGather::PackedGroup& g = groups[i];
      const PackedUpload& u = uploads_[i];
      const int64_t n = int64_t(g.rows.size());
      // Where the group's rows are on the device: staged one after another, or in the arena's slots (the rows it
      // lacked scattered there first; stream order keeps an earlier group's reads of a slot before a later
      // group's write to it).
      cuda::UnpackRowsLaunch l = unpack_launch(g.format, packed_dev + u.byte_at, n, rows_dev + g.first_row * D);
      if (u.arena) {
        l.rows = u.arena->bytes.get<uint8_t>();
        l.row_slots = slots_dev + u.slot_at;
        cuda::launch_scatter_rows(packed_dev + u.byte_at, int64_t(u.staged.size()), g.format.row_bytes, slots_dev + u.slot_at + n,
                                  u.arena->bytes.get<uint8_t>(), stream_);
      }
      if (read_packed) {
        a.packed[a.n_packed++] = {g.first_row, n, l.rows, l.row_slots, l.row_bytes, l.kind, int32_t(l.n_rope), int32_t(l.block)};
      } else {
        cuda::launch_unpack_rows(l, stream_);
      }
    }
    if (n_slots) DI_CUDA_CHECK(cudaMemcpyAsync(index_.get(), slot_row, index_bytes, cudaMemcpyHostToDevice, stream_));
    a.slot_row = index_.get<int32_t>();
    if (kept_selections) {
      const auto* words = reinterpret_cast<const int64_t*>(index_.get<uint8_t>() + words_at);
      cuda::launch_selected_slots({index_.get<int32_t>(), n_slots, selections_dev_.get<int32_t>(),
                                   reinterpret_cast<const int32_t*>(words + T * cuda::kSelectedSlotsWords), words, T},
                                  stream_);
    }
    if (split) {
      scores_.reserve(size_t(std::max<int64_t>(T * H * n_slots, 1)) * 4);
      cuda::launch_sparse_attention_split(a, scores_.get<float>(), stream_);
    } else {
      DI_CHECK_MSG(cuda::sparse_attention_shared_bytes(n_slots, read_packed) <= max_shared_bytes_,
                   "sparse attention: " + std::to_string(n_slots) + " slots need more shared memory than the device has per block");
      cuda::launch_sparse_attention(a, stream_);
    }
    if (p0.out_rope) {
      keep_outputs(batch);
      return;
    }
    out_host_.reserve(size_t(T * H * D) * 4);
    DI_CUDA_CHECK(cudaMemcpyAsync(out_host_.get(), out_.get(), size_t(T * H * D) * 4, cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int64_t t = 0; t < T; ++t) std::memcpy(batch[size_t(t)].out, out_host_.get<float>() + t * H * D, size_t(H * D) * 4);
  }

  // The words launch_selected_slots reads for attend()'s tokens, then the tables (gather_'s) behind them, at dst:
  // each kept selection found by its host address among those the last keeping index_select_batch left.
  void keep_selection_slots(std::span<const SparseAttentionParams> batch, uint8_t* dst) {
    const int64_t T = int64_t(batch.size());
    std::vector<int64_t> words(size_t(T * cuda::kSelectedSlotsWords), 0);
    for (int64_t t = 0; t < T; ++t) {
      const KeptSelectionSlots* k = batch[size_t(t)].kept_selection;
      if (!k || k->n == 0) continue;
      const int64_t i = kept_selection_index_.find(reinterpret_cast<uintptr_t>(k->selected));
      DI_CHECK_MSG(i >= 0 && kept_selections_[size_t(i)].n == k->n, name_ + ": a selection said to be kept on the device is not");
      int64_t* w = &words[size_t(t * cuda::kSelectedSlotsWords)];
      w[0] = k->n;
      w[1] = kept_selections_[size_t(i)].at;
      w[2] = k->at;
      w[3] = gather_.selection_table_at(t);
      w[4] = k->n_rows;
      w[5] = k->ascending ? 1 : 0;
    }
    std::memcpy(dst, words.data(), words.size() * 8);
    const std::vector<int32_t>& tables = gather_.selection_tables();
    std::memcpy(dst + words.size() * 8, tables.data(), tables.size() * 4);
  }

  // attend()'s outputs (in out_) rotated back (each token's out_rope) into their kept arrays, one launch where they
  // are a block's consecutive tokens. Not waited for: nothing comes back to the host, and the call that reads the
  // outputs (the block's tail, a fetch) is queued behind it on the stream, so the host prepares and queues that call
  // while the attention runs. Only attend()'s own pinned staging, which the queued copies still read, must outlive
  // them: the next attend() waits for this one's work first (attention_staging_).
  void keep_outputs(std::span<const SparseAttentionParams> batch) {
    const SparseAttentionParams& p0 = batch[0];
    const HeadRope& r0 = *p0.out_rope;
    const int64_t T = int64_t(batch.size()), H = p0.n_heads, D = p0.head_dim, RD = r0.rope_dim;
    rope_host_.reserve(size_t(T * RD) * 4);
    rope_dev_.reserve(size_t(T * RD) * 4);
    for (int64_t t = 0; t < T; ++t) {
      const SparseAttentionParams& p = batch[size_t(t)];
      const HeadRope& r = *p.out_rope;
      DI_CHECK_MSG(r.n_heads == H && r.head_dim == D && r.rope_dim == RD && r.inverse == r0.inverse && !r.normalize &&
                       p.out_kept_array == p0.out_kept_array && p.out_kept_floats == p0.out_kept_floats &&
                       p.out >= p.out_kept_array && p.out + H * D <= p.out_kept_array + p.out_kept_floats,
                   "sparse attention: a token's out_rope or kept output array differs from the call's");
      std::memcpy(rope_host_.get<float>() + t * RD, r.cos_sin, size_t(RD) * 4);
    }
    const bool consecutive = one_run(T, H * D, [&](int64_t t) { return batch[size_t(t)].out; });
    float* kept = keep_array(p0.out_kept_array, p0.out_kept_floats);
    DI_CUDA_CHECK(cudaMemcpyAsync(rope_dev_.get(), rope_host_.get(), size_t(T * RD) * 4, cudaMemcpyHostToDevice, stream_));
    const float* out = out_.get<float>();
    const float* cos_sin = rope_dev_.get<float>();
    for (int64_t t0 = 0; t0 < T;) {  // runs of consecutive outputs
      const int64_t n = consecutive ? T : 1;
      cuda::launch_head_rope({{out + t0 * H * D, H * D, kept + (batch[size_t(t0)].out - p0.out_kept_array), H * D, n, H, D, RD,
                               cos_sin + t0 * RD},
                              r0.inverse, false, 0.0},
                             stream_);
      t0 += n;
    }
    attention_staging_.queued(stream_);
  }

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
  cudaStream_t stream_ = nullptr;
  cuda::WeightCache weights_;
  DeviceBuffer x_, out_, rows_, index_, scores_;  // per-op scratch, grown on demand
  // A linears() batch: its ops' weights and widths, where their operands sit in batch_ (and staging_, pinned).
  std::vector<const cuda::DeviceWeight*> weights_of_;
  std::vector<int64_t> k_, k_pad_;
  LinearBatchLayout layout_;
  DeviceBuffer batch_;
  cuda::PinnedBuffer staging_;  // batch_'s host mirror (and hc_mix's x, then its output)
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

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, int n_threads, std::string* error) {
  int n_devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&n_devices);
  if (err != cudaSuccess || device < 0 || device >= n_devices) {
    *error = err != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(err)
                                : "CUDA device " + std::to_string(device) + " not present (" + std::to_string(n_devices) + " found)";
    return nullptr;
  }
  // Each choice's variable, its values (the first the default) and what a value sets.
  struct Choice {
    const char* name;
    std::vector<const char*> values;
    void (*set)(const std::string& value, KernelPaths& paths);
  };
  static const Choice kChoices[] = {
      // DEEPINFER_CUDA_LINEAR: mma (default: tensor cores, 2-5x faster than the FMA kernel from 8 tokens up on an
      // H200) or fma (the portable FMA kernel). Both passed cuda_tests there; one path serves every token count,
      // so a token's outputs do not depend on its batch. For cuda_tests: mma_staged (the tensor-core path with its
      // staged kernel from 64 tokens on, even where its grid would leave the device idle) and mma_split (the same,
      // split over K wherever K has several slices).
      {"DEEPINFER_CUDA_LINEAR", {"mma", "fma", "mma_staged", "mma_split"},
       [](const std::string& v, KernelPaths& p) {
         p.tensor_core_linear = v != "fma";
         if (v == "mma_staged") p.mma_choice = cuda::MmaKernelChoice::kStaged;
         if (v == "mma_split") p.mma_choice = cuda::MmaKernelChoice::kStagedSplit;
       }},
      // DEEPINFER_CUDA_ATTENTION: fused (default: one kernel, verified on an H200) or split (two kernels that read
      // each row once per 8 heads; written without a GPU at hand, see bench/cuda/NOTES.md).
      {"DEEPINFER_CUDA_ATTENTION", {"fused", "split"}, [](const std::string& v, KernelPaths& p) { p.split_attention = v == "split"; }},
      // DEEPINFER_CUDA_KV: floats (default: the model decodes cache rows and the backend copies 4 bytes a value),
      // packed (the cache rows' own bytes are copied and decoded on the device) or mirror (packed, and the device
      // keeps the attention's rows and the index keys by their stamps, so a call copies only rows written since it
      // last saw them; up to DEEPINFER_CUDA_KV_MIRROR_GB, default 2). packed and mirror were written without a GPU
      // at hand.
      {"DEEPINFER_CUDA_KV", {"floats", "packed", "mirror"},
       [](const std::string& v, KernelPaths& p) {
         p.packed_rows = v != "floats";
         p.mirror_rows = v == "mirror";
       }},
      // DEEPINFER_CUDA_ATTENTION_ROWS: decoded (default: packed cache rows decoded into floats, then attended over)
      // or packed (the attention kernels read the packed rows' bytes themselves, the same values bit for bit; with
      // DEEPINFER_CUDA_KV packed or mirror; written without a GPU at hand).
      {"DEEPINFER_CUDA_ATTENTION_ROWS", {"decoded", "packed"},
       [](const std::string& v, KernelPaths& p) { p.packed_attention_rows = v == "packed"; }},
      // DEEPINFER_CUDA_INDEX_SCORES: fma (default: each dot product a chain of fp32 FMAs) or mma (on the tensor
      // cores, index_scores_mma_kernel.cu; written without a GPU at hand).
      {"DEEPINFER_CUDA_INDEX_SCORES", {"fma", "mma"}, [](const std::string& v, KernelPaths& p) { p.mma_index_scores = v == "mma"; }},
      // DEEPINFER_CUDA_PROMPT_LINEAR: mma (default: prompt tokens' linears as generated tokens' are) or fp8 (prompt
      // tokens' ops whose x the model quantised to e4m3 blocks run on FP8 operands, kernels.h; written without a
      // GPU at hand, see bench/cuda/NOTES.md). With fp8 the model runs prompt and generated tokens as separate
      // passes. For cuda_tests: fp8_big and fp8_small (the same bits through one block tile always). wgmma: the
      // same ops on Hopper's warpgroup MMA (kernels.h; compute capability 9.0 only, checked below; written without
      // a GPU at hand).
      {"DEEPINFER_CUDA_PROMPT_LINEAR", {"mma", "fp8", "fp8_big", "fp8_small", "wgmma"},
       [](const std::string& v, KernelPaths& p) {
         p.fp8_prompt_linear = v != "mma";
         if (v == "fp8_big") p.fp8_tile = cuda::Fp8TileChoice::kBig;
         if (v == "fp8_small") p.fp8_tile = cuda::Fp8TileChoice::kSmall;
         p.fp8_wgmma = v == "wgmma";
       }},
      // DEEPINFER_CUDA_MOE: host (default: the model's own MoE code, its linears on the device) or device (a
      // block's whole MoE on the device in one call, and its whole FFN side with the mHC around it; Backend::moe
      // and moe_side, written without a GPU at hand).
      {"DEEPINFER_CUDA_MOE", {"host", "device"}, [](const std::string& v, KernelPaths& p) { p.device_moe = v == "device"; }},
      // DEEPINFER_CUDA_LINEAR_CHAIN: host (default: the model's steps, its linears on the device) or device (the
      // attention's output projection in one call, z kept on the device, and its projections with the q path in
      // one call, qr kept there; Backend::linear_chain and projection_chain, written without a GPU at hand).
      {"DEEPINFER_CUDA_LINEAR_CHAIN", {"host", "device"}, [](const std::string& v, KernelPaths& p) { p.device_chain = v == "device"; }},
      // DEEPINFER_CUDA_INDEX_SELECT: host (default: the index scores come back and the model selects), device (the
      // top-k selection on the device after the scores, only the selections coming back; Backend::index_select_batch)
      // or kept (the same, and with DEEPINFER_CUDA_KV packed or mirror the selections stay on the device, where the
      // attention builds its compressed slots from them: the index call does not wait; Backend::keeps_selections; the
      // model keeps them only where q and the attention's output stay on the device too, which needs
      // DEEPINFER_CUDA_LINEAR_CHAIN=device). Written without a GPU at hand.
      {"DEEPINFER_CUDA_INDEX_SELECT", {"host", "device", "kept"}, [](const std::string& v, KernelPaths& p) {
         p.device_select = v != "host";
         p.keep_selections = v == "kept";
       }},
      // DEEPINFER_CUDA_GRAPHS: on (default) or off: the device MoE's stream work replayed as CUDA graphs (written
      // without a GPU at hand; off runs the same operations one by one).
      {"DEEPINFER_CUDA_GRAPHS", {"on", "off"}, [](const std::string& v, KernelPaths& p) { p.graphs = v == "on"; }},
      // DEEPINFER_CUDA_WAIT: as-needed (default: a call whose outputs all stay on the device, the attention's, a block
      // tail's or an index call's kept selections, returns without waiting, and the next call queues behind it) or
      // every-call (each call waits for its work: the comparison, `bench --op-times` figures that charge each call its
      // own device time, and a device fault reported by the call that caused it rather than by the next one that waits).
      {"DEEPINFER_CUDA_WAIT", {"as-needed", "every-call"}, [](const std::string& v, KernelPaths& p) { p.wait_every_call = v == "every-call"; }},
  };
  KernelPaths paths;
  for (const Choice& choice : kChoices) {
    const std::optional<std::string> value = env_choice(choice.name, choice.values, error);
    if (!value) return nullptr;
    choice.set(*value, paths);
  }
  if (paths.fp8_wgmma) {
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (!cuda::linear_fp8_wgmma_runs_on(prop.major, prop.minor)) {
      *error = "DEEPINFER_CUDA_PROMPT_LINEAR=wgmma needs a compute capability 9.0 device (sm_90a); CUDA device " +
               std::to_string(device) + " is " + std::to_string(prop.major) + "." + std::to_string(prop.minor);
      return nullptr;
    }
  }
  if (const char* gb = std::getenv("DEEPINFER_CUDA_KV_MIRROR_GB")) {
    char* end = nullptr;
    paths.mirror_gb = std::strtod(gb, &end);
    if (end == gb || *end != '\0' || !(paths.mirror_gb > 0)) {
      *error = std::string("DEEPINFER_CUDA_KV_MIRROR_GB must be a number of GB > 0, not '") + gb + "'";
      return nullptr;
    }
  }
  // DEEPINFER_CUDA_WEIGHT_GB: how many GB of device memory the weights may take (every weight but the routed
  // experts always goes on the device; experts beyond it run on the host's CPU kernels). Unset: the free memory
  // less a reserve.
  double weight_budget_gb = -1;
  if (const char* gb = std::getenv("DEEPINFER_CUDA_WEIGHT_GB")) {
    char* end = nullptr;
    weight_budget_gb = std::strtod(gb, &end);
    if (end == gb || *end != '\0' || !(weight_budget_gb >= 0)) {
      *error = std::string("DEEPINFER_CUDA_WEIGHT_GB must be a number of GB >= 0, not '") + gb + "'";
      return nullptr;
    }
  }
  // The host's CPU kernels: per-row work, gathers, and the experts kept in host memory.
  std::unique_ptr<Backend> host = make_fast_backend(n_threads, error);
  if (!host) return nullptr;
  return std::make_unique<CudaBackend>(device, std::move(host), weight_budget_gb, paths);
}

}  // namespace deepinfer
