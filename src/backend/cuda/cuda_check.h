// CUDA runtime error checks: a failed CUDA call is a bug or a broken device, never an expected input
// error, so it stops the process through DI_CHECK with the runtime's message and the call that failed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

#define DI_CUDA_CHECK(call)                                                                              \
  do {                                                                                                   \
    const cudaError_t di_cuda_err_ = (call);                                                             \
    DI_CHECK_MSG(di_cuda_err_ == cudaSuccess, std::string(#call) + ": " + cudaGetErrorString(di_cuda_err_)); \
  } while (0)

// After a kernel launch: launch-configuration errors show at once, execution errors at the next sync.
#define DI_CUDA_CHECK_LAUNCH() DI_CUDA_CHECK(cudaGetLastError())
