// The CUDA backend for the GPU tests, and the choice of its linear path. A fresh backend per case: its weight cache is keyed by host
// addresses, and a case's freed weights may come back at the same address in the next case. A machine
// without a usable device skips with the reason (the `cuda` label runs only where a GPU is meant to be,
// but it must not crash elsewhere).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::testing {

inline std::unique_ptr<Backend> cuda_backend_or_null(std::string* error) { return make_cuda_backend(0, error); }

// The CUDA linear path (DEEPINFER_CUDA_LINEAR: fma or mma) of the backends made while it lives.
class ScopedLinearPath {
 public:
  explicit ScopedLinearPath(const std::string& path) { setenv("DEEPINFER_CUDA_LINEAR", path.c_str(), 1); }
  ~ScopedLinearPath() { unsetenv("DEEPINFER_CUDA_LINEAR"); }
  ScopedLinearPath(const ScopedLinearPath&) = delete;
  ScopedLinearPath& operator=(const ScopedLinearPath&) = delete;
};

// Both linear paths, as test parameters.
inline const std::vector<std::string>& linear_paths() {
  static const std::vector<std::string> paths = {"fma", "mma"};
  return paths;
}

}  // namespace deepinfer::testing

#define DI_SKIP_WITHOUT_CUDA()                                                             \
  do {                                                                                     \
    std::string di_cuda_error_;                                                            \
    if (!::deepinfer::testing::cuda_backend_or_null(&di_cuda_error_)) GTEST_SKIP() << di_cuda_error_; \
  } while (0)

#define DI_MAKE_CUDA_BACKEND(var)                                          \
  std::string var##_error;                                                 \
  std::unique_ptr<::deepinfer::Backend> var = ::deepinfer::make_cuda_backend(0, &var##_error); \
  ASSERT_TRUE(var) << var##_error
