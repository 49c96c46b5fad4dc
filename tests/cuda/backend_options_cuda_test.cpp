// The CUDA backend's kernel choices from the environment (make_cuda_backend): an unknown value is an error that
// names the variable, the value and the choices, not a silent default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/cuda_util.h"

namespace deepinfer {
namespace {

TEST(CudaBackendOptions, AnUnknownChoiceIsAnErrorNamingIt) {
  DI_SKIP_WITHOUT_CUDA();
  for (const char* name : {"DEEPINFER_CUDA_LINEAR", "DEEPINFER_CUDA_ATTENTION", "DEEPINFER_CUDA_KV", "DEEPINFER_CUDA_PROMPT_LINEAR"}) {
    setenv(name, "bogus", 1);
    std::string error;
    const std::unique_ptr<Backend> backend = make_cuda_backend(0, 0, &error);
    unsetenv(name);
    EXPECT_EQ(backend, nullptr) << name;
    EXPECT_NE(error.find(name), std::string::npos) << error;
    EXPECT_NE(error.find("'bogus'"), std::string::npos) << error;
    EXPECT_NE(error.find("must be one of"), std::string::npos) << error;
  }
  std::string error;
  EXPECT_NE(make_cuda_backend(0, 0, &error), nullptr) << error;  // every variable unset: the defaults
}

}  // namespace
}  // namespace deepinfer
