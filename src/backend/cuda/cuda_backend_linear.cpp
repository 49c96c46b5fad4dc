// The CUDA backend's linears (CudaBackend, cuda_backend.h): a batch of ops on the tensor-core or FMA kernels in
// grouped launches, the experts kept in host memory on the host's kernels, and the FP8-operand prompt path.
#include "backend/cuda/cuda_backend.h"

namespace deepinfer {

void CudaBackend::linears(std::span<const LinearParams> ps) {
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
    layout_.scatter_outputs(on_device, staging_.get<uint8_t>(), host_.get());
  }
}

void CudaBackend::launch_lone_mma(cuda::LinearLaunch l) {
  if (cuda::linear_mma_partial_floats(l, mma_choice_) > 0) l.partials = partials_.get<float>();
  cuda::launch_linear_mma(l, stream_, mma_choice_);
}

bool CudaBackend::enqueue_linears(std::span<const LinearParams> ps, bool copy_outputs) {
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
  layout_.stage_inputs(ps, host, host_.get());
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
  if (copy_outputs) {
    DI_CUDA_CHECK(cudaMemcpyAsync(host + in_bytes, base + in_bytes, bytes - in_bytes, cudaMemcpyDeviceToHost, stream_));
  }
  return true;
}

void CudaBackend::sort_by_mma_shape(std::vector<cuda::LinearLaunch>& launches) {
  std::stable_sort(launches.begin(), launches.end(), [](const cuda::LinearLaunch& a, const cuda::LinearLaunch& b) {
    return a.kind != b.kind ? int(a.kind) < int(b.kind) : a.k_pad < b.k_pad;
  });
}

int64_t CudaBackend::mma_group_partial_floats(std::span<const cuda::LinearLaunch> launches) const {
  int64_t floats = 0;
  for_each_run(launches, kMaxGridYZ, same_mma_shape, [&](std::span<const cuda::LinearLaunch> run) {
    if (run.size() == 1) floats = std::max(floats, cuda::linear_mma_partial_floats(run[0], mma_choice_));
  });
  return floats;
}

void CudaBackend::launch_mma_groups(std::vector<cuda::LinearLaunch>& launches, cuda::PinnedBuffer& descriptors_host,
                                    DeviceBuffer& descriptors) {
  upload_mma_descriptors(launches, descriptors_host, descriptors);
  launch_uploaded_mma_groups(launches, descriptors);
}

void CudaBackend::upload_mma_descriptors(std::vector<cuda::LinearLaunch>& launches, cuda::PinnedBuffer& descriptors_host,
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

void CudaBackend::launch_uploaded_mma_groups(std::span<const cuda::LinearLaunch> all, const DeviceBuffer& descriptors) {
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

bool CudaBackend::takes_fp8_path(const LinearParams& p, const cuda::DeviceWeight& w) const {
  return fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt && p.x_e4m3_block > 0 && w.mma_exact &&
         cuda::linear_fp8_supports(w.kind, w.block, p.x_e4m3_block);
}

void CudaBackend::launch_fp8_groups() {
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

}  // namespace deepinfer
