#include "backend/cuda/weight_cache.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/expert_placement.h"
#include "core/dtypes.h"

namespace deepinfer::cuda {

const DeviceWeight& WeightCache::get(const LinearWeight& w, cudaStream_t stream) {
  auto it = weights_.find(w.data);
  if (it != weights_.end()) {
    DI_CHECK_MSG(it->second.n_out == w.n_out && it->second.n_in == w.n_in,
                 "a different weight at a cached weight's address");
    return it->second;
  }
  DeviceWeight d;
  d.n_out = w.n_out;
  d.n_in = w.n_in;
  const int64_t src_pitch = w.row_bytes();
  switch (w.dtype) {
    case DType::kBF16:
      d.kind = WeightKind::kBf16;
      break;
    case DType::kF8E4M3:
      d.kind = WeightKind::kFp8;
      DI_CHECK_MSG(w.block > 0 && w.block % 16 == 0, "e4m3 scale blocks must be multiples of 16 for the CUDA kernels");
      d.block = w.block;
      break;
    case DType::kI8:
      d.kind = WeightKind::kFp4;
      DI_CHECK_MSG(w.n_in % 32 == 0, "packed e2m1 rows must hold a multiple of 32 values");
      break;
    default:
      DI_CHECK_MSG(false, std::string("unsupported linear weight dtype for CUDA: ") + dtype_name(w.dtype));
  }
  const DeviceWeightLayout layout = device_weight_layout(w);  // the same sizes place_experts counts
  d.k_pad = layout.k_pad;
  d.row_pitch = layout.row_pitch;
  d.scale_pitch = layout.scale_pitch;
  d.data = DeviceBuffer(size_t(d.n_out * d.row_pitch));
  if (src_pitch == d.row_pitch) {
    DI_CUDA_CHECK(cudaMemcpyAsync(d.data.get(), w.data, d.data.bytes(), cudaMemcpyHostToDevice, stream));
  } else {  // zero-padded rows
    DI_CUDA_CHECK(cudaMemsetAsync(d.data.get(), 0, d.data.bytes(), stream));
    DI_CUDA_CHECK(cudaMemcpy2DAsync(d.data.get(), size_t(d.row_pitch), w.data, size_t(src_pitch), size_t(src_pitch),
                                    size_t(d.n_out), cudaMemcpyHostToDevice, stream));
  }
  if (d.kind != WeightKind::kBf16) {
    d.scale = DeviceBuffer(size_t(layout.scale_rows * layout.scale_pitch));
    const auto [lo, hi] = std::minmax_element(w.scale, w.scale + d.scale.bytes());
    d.mma_exact = *lo >= 127 - 100 && *hi <= 127 + 100;
    DI_CUDA_CHECK(cudaMemcpyAsync(d.scale.get(), w.scale, d.scale.bytes(), cudaMemcpyHostToDevice, stream));
  }
  bytes_ += d.data.bytes() + d.scale.bytes();
  return weights_.emplace(w.data, std::move(d)).first->second;
}

const float* WeightCache::constant(const float* host, int64_t n, cudaStream_t stream) {
  if (const float* kept = kept_constant(host, n)) return kept;
  return keep_constant(host, host, n, stream);
}

const float* WeightCache::bf16_constant(const uint16_t* host, int64_t n, cudaStream_t stream) {
  if (const float* kept = kept_constant(host, n)) return kept;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = bf16_to_float(host[i]);
  const float* device = keep_constant(host, values.data(), n, stream);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));  // once per array: `values` goes out of scope
  return device;
}

const float* WeightCache::kept_constant(const void* key, int64_t n) const {
  auto it = constants_.find(key);
  if (it == constants_.end()) return nullptr;
  DI_CHECK_MSG(it->second.first == n, "a different constant array at a cached array's address");
  return it->second.second.get<float>();
}

const float* WeightCache::keep_constant(const void* key, const float* values, int64_t n, cudaStream_t stream) {
  DeviceBuffer b(size_t(n) * sizeof(float));
  DI_CUDA_CHECK(cudaMemcpyAsync(b.get(), values, b.bytes(), cudaMemcpyHostToDevice, stream));
  bytes_ += b.bytes();
  return constants_.emplace(key, std::make_pair(n, std::move(b))).first->second.second.get<float>();
}

}  // namespace deepinfer::cuda
