// The CUDA backend's kernel choices from the environment (make_cuda_backend): an unknown value is an error that
// names the variable, the value and the choices, not a silent default.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cuda/cuda_util.h"

namespace deepinfer {
namespace {

TEST(CudaBackendOptions, AnUnknownChoiceIsAnErrorNamingIt) {
  DI_SKIP_WITHOUT_CUDA();
  for (const char* name : {"DEEPINFER_CUDA_LINEAR", "DEEPINFER_CUDA_ATTENTION", "DEEPINFER_CUDA_KV", "DEEPINFER_CUDA_PROMPT_LINEAR",
                           "DEEPINFER_CUDA_MOE", "DEEPINFER_CUDA_LINEAR_CHAIN", "DEEPINFER_CUDA_INDEX_SELECT", "DEEPINFER_CUDA_GRAPHS",
                           "DEEPINFER_CUDA_ATTENTION_ROWS", "DEEPINFER_CUDA_INDEX_SCORES", "DEEPINFER_CUDA_WAIT",
                           "DEEPINFER_CUDA_ROW_DRAWS"}) {
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

// DEEPINFER_CUDA_INDEX_SELECT=kept keeps the selections for the attention only where the cache rows go over packed
// (the attention gathers every row a selection may name by its stamp), for more rows beyond the selected ones where
// the mirror keeps them; device selects without keeping.
TEST(CudaBackendOptions, KeptSelectionsNeedPackedRows) {
  DI_SKIP_WITHOUT_CUDA();
  struct Case {
    const char* select;
    const char* kv;
    bool keeps;
    int64_t extra_rows;  // beyond the selected ones: more where the mirror finds the rows' page runs whole
  };
  for (const Case& c : {Case{"kept", "packed", true, 2048}, Case{"kept", "mirror", true, 8192}, Case{"kept", "floats", false, 2048},
                        Case{"device", "mirror", false, 8192}, Case{"host", "packed", false, 2048}}) {
    setenv("DEEPINFER_CUDA_INDEX_SELECT", c.select, 1);
    setenv("DEEPINFER_CUDA_KV", c.kv, 1);
    std::string error;
    const std::unique_ptr<Backend> backend = make_cuda_backend(0, 0, &error);
    unsetenv("DEEPINFER_CUDA_INDEX_SELECT");
    unsetenv("DEEPINFER_CUDA_KV");
    ASSERT_NE(backend, nullptr) << error;
    EXPECT_EQ(backend->keeps_selections(), c.keeps) << c.select << " with " << c.kv << " rows";
    if (c.keeps) {
      EXPECT_EQ(backend->kept_selection_extra_rows(), c.extra_rows) << c.kv << " rows";
    }
  }
}

// DEEPINFER_CUDA_PROMPT_LINEAR=wgmma is a known value: a backend on a compute capability 9.0 device, elsewhere an
// error that names the variable and the capability it needs (no CUDA header here to ask the device first).
TEST(CudaBackendOptions, WgmmaPromptLinearIsKnownAndNeedsComputeCapability90) {
  DI_SKIP_WITHOUT_CUDA();
  setenv("DEEPINFER_CUDA_PROMPT_LINEAR", "wgmma", 1);
  std::string error;
  const std::unique_ptr<Backend> backend = make_cuda_backend(0, 0, &error);
  unsetenv("DEEPINFER_CUDA_PROMPT_LINEAR");
  if (backend) {
    EXPECT_TRUE(backend->kernels_differ_by_token_kind());  // prompt tokens' ops run on FP8 operands
    std::printf("    wgmma accepted on %s\n", backend->name());
  } else {
    EXPECT_EQ(error.find("must be one of"), std::string::npos) << error;
    EXPECT_NE(error.find("DEEPINFER_CUDA_PROMPT_LINEAR=wgmma"), std::string::npos) << error;
    EXPECT_NE(error.find("compute capability 9.0"), std::string::npos) << error;
    std::printf("    wgmma refused: %s\n", error.c_str());
  }
}

}  // namespace
}  // namespace deepinfer
