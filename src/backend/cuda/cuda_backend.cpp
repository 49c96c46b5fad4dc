// The CUDA backend: the Backend ops on the GPU. Weights (and the mHC fn arrays) are uploaded once and stay
// on the device (WeightCache); activations still live on the host, because the model code does, so each
// op copies its inputs in, runs its kernel and copies its outputs back before returning. That is the first,
// correct and slow step: device-resident activations and CUDA graphs need the model code to hold its
// activations behind the backend (see README, GPU section).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_cache.h"

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

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, bool tensor_core_linear) : tensor_core_linear_(tensor_core_linear) {
    DI_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = std::string("cuda-") + prop.name;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaBackend() override { cudaStreamDestroy(stream_); }

  const char* name() const override { return name_.c_str(); }

  void linear(const LinearParams& p) override {
    if (p.n_tokens == 0 || p.n_rows == 0) return;
    const cuda::DeviceWeight& w = weights_.get(*p.weight, stream_);
    DI_CHECK(p.row_begin >= 0 && p.row_begin + p.n_rows <= w.n_out);
    const int64_t T = p.n_tokens, K = w.n_in;
    x_.reserve(size_t(T * w.k_pad) * sizeof(float));
    out_.reserve(size_t(T * p.n_rows) * sizeof(float));
    if (K != w.k_pad) {  // the padding columns must be finite: they meet zero weights
      DI_CUDA_CHECK(cudaMemset2DAsync(x_.get<float>() + K, size_t(w.k_pad) * 4, 0, size_t(w.k_pad - K) * 4, size_t(T), stream_));
    }
    DI_CUDA_CHECK(cudaMemcpy2DAsync(x_.get(), size_t(w.k_pad) * 4, p.x, size_t(p.x_stride) * 4, size_t(K) * 4, size_t(T),
                                    cudaMemcpyHostToDevice, stream_));
    cuda::LinearLaunch l;
    if (p.epilogue == Epilogue::kF32AddBias) {
      bias_.reserve(size_t(T * p.n_rows) * sizeof(float));
      DI_CUDA_CHECK(cudaMemcpyAsync(bias_.get(), p.bias, size_t(T * p.n_rows) * 4, cudaMemcpyHostToDevice, stream_));
      l.bias = bias_.get<float>();
    }
    l.kind = w.kind;
    l.w = w.data.get<uint8_t>();
    l.row_pitch = w.row_pitch;
    l.scale = w.scale.get<uint8_t>();
    l.scale_pitch = w.scale_pitch;
    l.block = w.block;
    l.k_pad = w.k_pad;
    l.x = x_.get<float>();
    l.n_tokens = T;
    l.row_begin = p.row_begin;
    l.n_rows = p.n_rows;
    l.epilogue = to_launch(p.epilogue);
    l.out = out_.get<float>();
    if (tensor_core_linear_ && w.mma_exact) cuda::launch_linear_mma(l, stream_);
    else cuda::launch_linear(l, stream_);
    DI_CUDA_CHECK(cudaMemcpy2DAsync(p.out, size_t(p.out_stride) * 4, out_.get(), size_t(p.n_rows) * 4, size_t(p.n_rows) * 4,
                                    size_t(T), cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void hc_mix(const HcMixParams& p) override {
    if (p.n_tokens == 0) return;
    const float* fn = weights_.constant(p.fn, p.n_mix * p.width, stream_);
    x_.reserve(size_t(p.n_tokens * p.width) * 4);
    out_.reserve(size_t(p.n_tokens * p.n_mix) * 4);
    DI_CUDA_CHECK(cudaMemcpyAsync(x_.get(), p.x, size_t(p.n_tokens * p.width) * 4, cudaMemcpyHostToDevice, stream_));
    cuda::launch_hc_mix({x_.get<float>(), p.n_tokens, p.width, fn, p.n_mix, p.eps, out_.get<float>()}, stream_);
    DI_CUDA_CHECK(cudaMemcpyAsync(p.out, out_.get(), size_t(p.n_tokens * p.n_mix) * 4, cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void sparse_attention(const SparseAttentionParams& p) override {
    const int64_t H = p.n_heads, D = p.head_dim;
    // Gather the filled slots' rows into one array (the KV cache is host memory for now).
    slot_row_.assign(size_t(p.n_slots), -1);
    staging_.clear();
    int32_t n_filled = 0;
    for (int64_t j = 0; j < p.n_slots; ++j) {
      if (!p.slots[j]) continue;
      slot_row_[size_t(j)] = n_filled++;
      staging_.insert(staging_.end(), p.slots[j], p.slots[j] + D);
    }
    x_.reserve(size_t(H * D + H) * 4);
    rows_.reserve(std::max<size_t>(staging_.size(), 1) * 4);
    index_.reserve(size_t(std::max<int64_t>(p.n_slots, 1)) * 4);
    out_.reserve(size_t(H * D) * 4);
    float* q = x_.get<float>();
    float* sink = q + H * D;
    DI_CUDA_CHECK(cudaMemcpyAsync(q, p.q, size_t(H * D) * 4, cudaMemcpyHostToDevice, stream_));
    DI_CUDA_CHECK(cudaMemcpyAsync(sink, p.sink, size_t(H) * 4, cudaMemcpyHostToDevice, stream_));
    if (!staging_.empty()) {
      DI_CUDA_CHECK(cudaMemcpyAsync(rows_.get(), staging_.data(), staging_.size() * 4, cudaMemcpyHostToDevice, stream_));
    }
    if (p.n_slots) {
      DI_CUDA_CHECK(cudaMemcpyAsync(index_.get(), slot_row_.data(), size_t(p.n_slots) * 4, cudaMemcpyHostToDevice, stream_));
    }
    cuda::launch_sparse_attention({q, H, D, rows_.get<float>(), index_.get<int32_t>(), p.n_slots, sink, p.softmax_scale,
                                   p.block_running_max, out_.get<float>()},
                                  stream_);
    DI_CUDA_CHECK(cudaMemcpyAsync(p.out, out_.get(), size_t(H * D) * 4, cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void index_scores(const IndexScoreParams& p) override {
    if (p.n_keys == 0) return;
    const int64_t qn = p.n_heads * p.dim;
    x_.reserve(size_t(qn + p.n_heads) * 4);
    rows_.reserve(size_t(p.n_keys * p.dim) * 4);
    out_.reserve(size_t(p.n_keys) * 4);
    float* q = x_.get<float>();
    float* weights = q + qn;
    DI_CUDA_CHECK(cudaMemcpyAsync(q, p.q, size_t(qn) * 4, cudaMemcpyHostToDevice, stream_));
    DI_CUDA_CHECK(cudaMemcpyAsync(weights, p.weights, size_t(p.n_heads) * 4, cudaMemcpyHostToDevice, stream_));
    DI_CUDA_CHECK(cudaMemcpyAsync(rows_.get(), p.keys, size_t(p.n_keys * p.dim) * 4, cudaMemcpyHostToDevice, stream_));
    cuda::launch_index_scores({q, weights, p.n_heads, p.dim, rows_.get<float>(), p.n_keys, out_.get<float>()}, stream_);
    DI_CUDA_CHECK(cudaMemcpyAsync(p.scores, out_.get(), size_t(p.n_keys) * 4, cudaMemcpyDeviceToHost, stream_));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  std::string name_;
  bool tensor_core_linear_ = true;  // DEEPINFER_CUDA_LINEAR=mma (the default) or fma
  cudaStream_t stream_ = nullptr;
  cuda::WeightCache weights_;
  DeviceBuffer x_, out_, bias_, rows_, index_;  // per-op scratch, grown on demand
  std::vector<int32_t> slot_row_;
  std::vector<float> staging_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* error) {
  int n_devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&n_devices);
  if (err != cudaSuccess || device < 0 || device >= n_devices) {
    *error = err != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(err)
                                : "CUDA device " + std::to_string(device) + " not present (" + std::to_string(n_devices) + " found)";
    return nullptr;
  }
  // DEEPINFER_CUDA_LINEAR: mma (default: tensor cores, 2-5x faster than the FMA kernel from 8 tokens up on an
  // H200) or fma (the portable FMA kernel). Both passed cuda_tests there; one path serves every token count,
  // so a token's outputs do not depend on its batch.
  const char* linear_path = std::getenv("DEEPINFER_CUDA_LINEAR");
  const std::string path = linear_path ? linear_path : "mma";
  if (path != "fma" && path != "mma") {
    *error = "DEEPINFER_CUDA_LINEAR must be fma or mma, not '" + path + "'";
    return nullptr;
  }
  return std::make_unique<CudaBackend>(device, path == "mma");
}

}  // namespace deepinfer
