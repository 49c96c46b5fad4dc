// How the kernels are launched and get their dynamic shared memory: `launch_kernel(kernel, grid, block,
// shared_bytes, stream, args...)` is `kernel<<<grid, block, shared_bytes, stream>>>(args...)`, and
// `DI_DYNAMIC_SHARED(T, name);` is `extern __shared__ T name[];`. Under nvcc nothing else: the same code as
// the triple-chevron launch. The one reason for this header is the device emulation (DEEPINFER_DEVICE_EMULATION,
// tests/cuda_device_emulation), which compiles the .cu files with the host compiler and runs the kernels'
// bodies on the CPU: there both are its own.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#ifdef DEEPINFER_DEVICE_EMULATION
#include "launch_emulation.h"
#else

#define DI_DYNAMIC_SHARED(T, name) extern __shared__ T name[]

namespace deepinfer::cuda {

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
}

}  // namespace deepinfer::cuda

#endif
