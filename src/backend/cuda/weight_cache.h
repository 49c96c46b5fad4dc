// Device copies of the stored linear weights, uploaded once on first use and kept for the backend's
// lifetime. The key is the weight's data pointer (a checkpoint mapping: its bytes must stay alive and
// unchanged while the backend lives, as a model's do). Rows are repacked to a padded pitch (k_pad, a
// multiple of 32 elements, zero codes past K) so that every row starts 16-byte aligned.
//
// Uploads go on the stream the kernels that read them run on. A plain cudaMemcpy from pageable memory
// returns before its DMA has landed, and the legacy stream it uses does not order a non-blocking stream's
// kernels after it: the first GPU run read half-uploaded weights in the first forward of a model (the
// golden flash-tiny case 1 had a row-0 cosine of 0.963; later rows, after the uploads, were fine).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "model/weights.h"

namespace deepinfer::cuda {

struct DeviceWeight {
  WeightKind kind = WeightKind::kBf16;
  int64_t n_out = 0, n_in = 0, k_pad = 0;
  int64_t row_pitch = 0, scale_pitch = 0;
  int block = 0;
  // Every scale byte in 2^-100 .. 2^100: each scaled e4m3 / e2m1 value is then an exact bf16 (normal range),
  // as the tensor-core path needs. Always true for bf16 weights.
  bool mma_exact = true;
  DeviceBuffer data, scale;
};

class WeightCache {
 public:
  // The weight's device copy; a first use queues its upload on `stream`, before the caller's kernels.
  const DeviceWeight& get(const LinearWeight& w, cudaStream_t stream);
  // Device copy of a constant float array of a model (mHC fn rows): same lifetime and stream rules.
  const float* constant(const float* host, int64_t n, cudaStream_t stream);
  // Device copy of a bf16 array's values as floats (an mHC side's norm weights), kept as constant() keeps its.
  const float* bf16_constant(const uint16_t* host, int64_t n, cudaStream_t stream);
  size_t device_bytes() const { return bytes_; }

 private:
  const float* kept_constant(const void* key, int64_t n) const;  // nullptr: none kept under key
  const float* keep_constant(const void* key, const float* values, int64_t n, cudaStream_t stream);

  std::unordered_map<const void*, DeviceWeight> weights_;
  std::unordered_map<const void*, std::pair<int64_t, DeviceBuffer>> constants_;
  size_t bytes_ = 0;
};

}  // namespace deepinfer::cuda
