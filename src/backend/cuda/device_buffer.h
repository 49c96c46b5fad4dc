// Owning allocations: DeviceBuffer (one cudaMalloc, freed on destruction; reserve() makes it a grow-only
// scratch buffer for the per-op activations that cross from and to the host) and PinnedBuffer (page-locked
// host memory, the staging side of those copies: the DMA reads and writes it directly, so an async copy
// from it is truly asynchronous and the driver's own staging copy is skipped). Both wait for the device's queued
// work before they free their memory: a call that does not wait for its work (the attention whose outputs stay on
// the device, a block's tail) may leave copies and kernels queued that read it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace deepinfer::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) DI_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) {
      cudaDeviceSynchronize();
      cudaFree(ptr_);
    }
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // `bytes` of device memory, or an empty buffer when the device has no room for them (the error is cleared).
  static DeviceBuffer try_allocate(size_t bytes) {
    DeviceBuffer b;
    if (cudaMalloc(&b.ptr_, bytes) != cudaSuccess) {
      b.ptr_ = nullptr;
      (void)cudaGetLastError();
      return b;
    }
    b.bytes_ = bytes;
    return b;
  }

  template <typename T = void> T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  // Grows to at least `bytes` (contents are not kept). The wait for the queued work that may read the old memory is
  // checked here, so that a device fault in that work is reported by this call rather than dropped by the destructor.
  // The old memory is freed before the new is allocated, so that growing needs no room for both.
  void reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    if (ptr_) {
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      DI_CUDA_CHECK(cudaFree(std::exchange(ptr_, nullptr)));
      bytes_ = 0;
    }
    *this = DeviceBuffer(bytes + bytes / 4);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_) {
      cudaDeviceSynchronize();
      cudaFreeHost(ptr_);
    }
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  template <typename T = void> T* get() const { return static_cast<T*>(ptr_); }
  // Grows to at least `bytes` (contents are not kept).
  void reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    if (ptr_) {
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      cudaFreeHost(ptr_);
    }
    ptr_ = nullptr;
    bytes_ = 0;
    const size_t grown = bytes + bytes / 4;
    DI_CUDA_CHECK(cudaMallocHost(&ptr_, grown));
    bytes_ = grown;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace deepinfer::cuda
