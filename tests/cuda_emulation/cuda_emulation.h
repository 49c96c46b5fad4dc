// The emulated runtime's stream queue, for the emulated kernel launchers (kernels_emulation.cpp): a launch
// becomes a function the stream runs at its next synchronisation, after everything queued before it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace deepinfer::cuda_emulation {

void enqueue(cudaStream_t stream, std::function<void()> work);

// The dynamic shared memory a kernel may be launched with: its cudaFuncSetAttribute opt-in, else 48 KB.
size_t max_dynamic_shared_bytes(const void* kernel);

}  // namespace deepinfer::cuda_emulation
