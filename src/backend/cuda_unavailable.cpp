// make_cuda_backend() of a build without the CUDA backend (-DDEEPINFER_CUDA=OFF, the default): the CPU
// build links no CUDA code, so asking for the GPU is an error the caller reports.
#include "backend/backend.h"

namespace deepinfer {

#ifndef DEEPINFER_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int /*device*/, int /*n_threads*/, std::string* error) {
  *error = "this deepinfer was built without the CUDA backend (configure with -DDEEPINFER_CUDA=ON)";
  return nullptr;
}
#endif

}  // namespace deepinfer
