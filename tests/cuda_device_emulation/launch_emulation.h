// Kernel launches for the device emulation (src/backend/cuda/device_launch.cuh includes this under
// DEEPINFER_DEVICE_EMULATION): the launch is checked as the runtime checks it when it is queued, its
// parameters are copied as the runtime copies them, and the grid runs on the emulated stream (the runtime
// emulation's queue: tests/cuda_emulation), through block_runner.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "block_runner.h"
#include "cuda_emulation.h"

// extern __shared__ T name[] on the GPU: here the running block's dynamic buffer.
#define DI_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::deepinfer::device_emulation::dynamic_shared(nullptr))

namespace deepinfer::device_emulation {
// Fails (as the launch would fail on the GPU) on a block of no or more than 1024 threads, a grid past its
// limits, or dynamic shared memory past 48 KB without the kernel's opt-in (cudaFuncSetAttribute) or past the
// device's limit.
void check_launch(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes);
}  // namespace deepinfer::device_emulation

namespace deepinfer::cuda {

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  device_emulation::check_launch(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes);
  auto params = std::make_shared<const std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
  cuda_emulation::enqueue(stream, [kernel, grid, block, shared_bytes, params] {
    device_emulation::run_grid(grid, block, shared_bytes, [&] { std::apply(kernel, *params); });
  });
}

}  // namespace deepinfer::cuda
