// The emulated runtime's stream queue, for the emulated kernel launchers (kernels_emulation.cpp): a launch
// becomes a function the stream runs at its next synchronisation, after everything queued before it.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace deepinfer::cuda_emulation {

void enqueue(cudaStream_t stream, std::function<void()> work);

}  // namespace deepinfer::cuda_emulation
