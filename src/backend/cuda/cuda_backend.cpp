// The CUDA backend's construction (make_cuda_backend and the environment's kernel choices), the weights' placement,
// hc_mix, the arrays it keeps between calls and its CUDA graphs. The class, and what each file of it does, is in
// cuda_backend.h.
#include "backend/cuda/cuda_backend.h"

namespace deepinfer {

CudaBackend::CudaBackend(int device, std::unique_ptr<Backend> host, double weight_budget_gb, const KernelPaths& paths)
    : device_(device), host_(std::move(host)), weight_budget_gb_(weight_budget_gb), packed_rows_(paths.packed_rows),
      tensor_core_linear_(paths.tensor_core_linear), mma_choice_(paths.mma_choice), split_attention_(paths.split_attention),
      packed_attention_rows_(paths.packed_attention_rows), mma_index_scores_(paths.mma_index_scores),
      mirror_rows_(paths.mirror_rows), mirror_gb_(paths.mirror_gb), fp8_prompt_linear_(paths.fp8_prompt_linear),
      fp8_tile_(paths.fp8_tile), fp8_wgmma_(paths.fp8_wgmma), device_moe_(paths.device_moe), graphs_(paths.graphs),
      device_chain_(paths.device_chain), device_select_(paths.device_select),
      keep_selections_(paths.keep_selections), split_row_draws_(paths.split_row_draws) {
  bind_device();
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  name_ = std::string("cuda-") + prop.name;
  max_shared_bytes_ = prop.sharedMemPerBlockOptin;
  sm_count_ = prop.multiProcessorCount;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  attention_staging_.create(paths.wait_every_call);
  tail_staging_.create(paths.wait_every_call);
  index_staging_.create(paths.wait_every_call);
  engram_staging_.create(paths.wait_every_call);
  second_staging_.create(paths.wait_every_call);
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&front_back_, cudaEventDisableTiming));
}

CudaBackend::~CudaBackend() {
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

Status CudaBackend::place_experts(int64_t other_weight_bytes, std::span<const LinearWeight* const> experts) {
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

void CudaBackend::hc_mix(const HcMixParams& p) {
  bind_device();
  if (p.n_tokens == 0 || p.n_mix == 0) return;
  const float* fn = weights_.constant(p.fn, p.n_mix * p.width, stream_);
  const size_t x_bytes = size_t(p.n_tokens * p.width) * 4, out_bytes = size_t(p.n_tokens * p.n_mix) * 4;
  x_.reserve(x_bytes);
  out_.reserve(out_bytes);
  staging_.reserve(std::max(x_bytes, out_bytes));
  copy_on_threads(host_.get(), staging_.get(), p.x, x_bytes);
  DI_CUDA_CHECK(cudaMemcpyAsync(x_.get(), staging_.get(), x_bytes, cudaMemcpyHostToDevice, stream_));
  cuda::launch_hc_mix({x_.get<float>(), p.n_tokens, p.width, fn, p.n_mix, p.eps, out_.get<float>()}, stream_);
  DI_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), out_.get(), out_bytes, cudaMemcpyDeviceToHost, stream_));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::memcpy(p.out, staging_.get(), out_bytes);
}

void CudaBackend::fetch_kept(float* host, int64_t n) {
  const KeptFetch array{host, n};
  fetch_kept_arrays({&array, 1});
}

void CudaBackend::fetch_kept_arrays(std::span<const KeptFetch> arrays) {
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
    copy_on_threads(host_.get(), a.host, staging_.get<uint8_t>() + at, size_t(a.n) * 4);
    at += size_t(a.n) * 4;
  }
}

float* CudaBackend::keep_array(const float* host, int64_t n) {
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

const float* CudaBackend::kept_at(const float* host, int64_t n) {
  for (KeptArray& k : kept_) {
    if (host >= k.host && host + n <= k.host + k.n) {
      k.last_use = ++kept_clock_;
      return k.dev.get<float>() + (host - k.host);
    }
  }
  DI_CHECK_MSG(false, name_ + ": " + std::to_string(n) + " values said to be kept on the device are not");
  return nullptr;
}

namespace {
// The errors of a capture or instantiation the runtime declines (graphs then go off for good and the work runs as
// plain launches): the capture rules, graphs unsupported, no memory for the executable graph.
bool graph_capture_refused(cudaError_t err) {
  switch (err) {
    case cudaErrorNotSupported:
    case cudaErrorMemoryAllocation:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
      return true;
    default:
      return false;
  }
}
}  // namespace

void CudaBackend::run_as_graph(const GraphKey& key, std::vector<const void*> buffers, const std::function<void()>& enqueue) {
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
    // A capture the runtime refused turns the graphs off. Another error may be the device's: a fault in work a call
    // did not wait for surfaces at the next call and stays, so the stream's wait reports it as itself rather than
    // blamed on the graphs; where the stream is sound, the graphs go off as well.
    (void)cudaGetLastError();
    if (!graph_capture_refused(err)) DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::fprintf(stderr, "%s: CUDA graph capture failed (%s); running without graphs\n", name_.c_str(), cudaGetErrorString(err));
    graphs_ = false;
    enqueue();
    return;
  }
  graphs_by_key_.emplace(key, CapturedGraph{exec, std::move(buffers)});
  DI_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
}

void CudaBackend::drop_graphs() {
  cudaStreamSynchronize(stream_);  // a launch a call did not wait for may still run one (unchecked: the destructor calls this)
  for (auto& [key, g] : graphs_by_key_) cudaGraphExecDestroy(g.exec);
  graphs_by_key_.clear();
}

namespace {

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
      // each row once per 8 heads; written without a GPU at hand, see bench/cuda/NOTES.md). A token whose slot list
      // does not fit the split kernels' shared memory (~5,900 slots on an H200) runs fused, in a launch of its own
      // kind (sparse_attentions), so that its batch-mates' paths stay their own.
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
      // DEEPINFER_CUDA_ROW_DRAWS: whole (default: a token's draw one block) or split (a step with fewer tokens than the
      // device has SMs spreads each token's draw over blocks of 2,048 ids, as row_draw_kernel.cu says: the same ids;
      // written without a GPU at hand).
      {"DEEPINFER_CUDA_ROW_DRAWS", {"whole", "split"}, [](const std::string& v, KernelPaths& p) { p.split_row_draws = v == "split"; }},
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
