// The CUDA backend for the GPU tests, the choice of its linear path, and the golden-case parameter of the
// model-level GPU tests. A fresh backend per case: its weight cache is keyed by host addresses, and a case's
// freed weights may come back at the same address in the next case. A machine without a usable device skips
// with the reason (the `cuda` label runs only where a GPU is meant to be, but it must not crash elsewhere).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/golden_util.h"

namespace deepinfer::testing {

// DEEPINFER_CUDA_TEST_SHAPES=small (ctest sets it for cuda_device_emulated_tests, whose kernels run on the CPU):
// the token sweeps that a GPU runs in milliseconds trimmed to counts that still reach every tile shape and edge.
inline bool small_test_shapes() {
  const char* shapes = std::getenv("DEEPINFER_CUDA_TEST_SHAPES");
  return shapes && std::string(shapes) == "small";
}

inline std::unique_ptr<Backend> cuda_backend_or_null(std::string* error) { return make_cuda_backend(0, 0, error); }

// How many of two equally long output arrays' values differ in their bits (the bit-for-bit comparisons).
inline int64_t n_differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

// The CUDA backend's kernel choices for the backends made while it lives: the linear path
// (DEEPINFER_CUDA_LINEAR: fma, mma, mma_staged or mma_split), the attention path (DEEPINFER_CUDA_ATTENTION: fused or split) and how
// cache rows reach it (DEEPINFER_CUDA_KV: floats or packed).
class ScopedCudaPaths {
 public:
  explicit ScopedCudaPaths(const std::string& linear, const std::string& attention = "fused", const std::string& kv = "floats",
                           const std::string& attention_rows = "decoded") {
    setenv("DEEPINFER_CUDA_LINEAR", linear.c_str(), 1);
    setenv("DEEPINFER_CUDA_ATTENTION", attention.c_str(), 1);
    setenv("DEEPINFER_CUDA_KV", kv.c_str(), 1);
    setenv("DEEPINFER_CUDA_ATTENTION_ROWS", attention_rows.c_str(), 1);
  }
  ~ScopedCudaPaths() {
    unsetenv("DEEPINFER_CUDA_LINEAR");
    unsetenv("DEEPINFER_CUDA_ATTENTION");
    unsetenv("DEEPINFER_CUDA_KV");
    unsetenv("DEEPINFER_CUDA_ATTENTION_ROWS");
  }
  ScopedCudaPaths(const ScopedCudaPaths&) = delete;
  ScopedCudaPaths& operator=(const ScopedCudaPaths&) = delete;
};

// Environment variable `name` set to `value` for the backends made while it lives (unset after).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A CUDA backend with the device chains on or off (DEEPINFER_CUDA_LINEAR_CHAIN: device or host); nullptr, with a
// test failure, where none can be made.
inline std::unique_ptr<Backend> make_chain_backend(const char* chain) {
  const ScopedEnv option("DEEPINFER_CUDA_LINEAR_CHAIN", chain);
  std::string error;
  std::unique_ptr<Backend> backend = make_cuda_backend(0, 0, &error);
  EXPECT_NE(backend, nullptr) << error;
  return backend;
}

// The CUDA backend's linear path for prompt tokens (DEEPINFER_CUDA_PROMPT_LINEAR: mma, the default, fp8 or wgmma; or
// fp8_big / fp8_small, the FP8 path through one block tile always).
class ScopedPromptLinear : public ScopedEnv {
 public:
  explicit ScopedPromptLinear(const std::string& path) : ScopedEnv("DEEPINFER_CUDA_PROMPT_LINEAR", path) {}
};

// The CUDA backend's index-score kernel (DEEPINFER_CUDA_INDEX_SCORES: fma, the default, or mma).
class ScopedIndexScores : public ScopedEnv {
 public:
  explicit ScopedIndexScores(const std::string& kernel) : ScopedEnv("DEEPINFER_CUDA_INDEX_SCORES", kernel) {}
};

// The batched-linears tests' per-op setup: op p (its out ignored) on the reference into ref and alone on the
// device into alone, then queued for the batch call, which writes batched.
inline void run_alone_and_queue(LinearParams p, Backend& reference, Backend& device, float* ref, float* alone, float* batched,
                                std::vector<LinearParams>& batch) {
  p.out = ref;
  reference.linear(p);
  p.out = alone;
  device.linear(p);
  p.out = batched;
  batch.push_back(p);
}

// The linear paths a whole model runs on in the golden and op-by-op tests: fma and mma.
inline const std::vector<std::string>& model_linear_paths() {
  static const std::vector<std::string> paths = {"fma", "mma"};
  return paths;
}
// The linear op tests' paths: those two, and mma_staged and mma_split (the tensor-core path with its staged
// kernel, unsplit or split over K, wherever 64 tokens or more allow it, so that small test shapes reach them).
inline const std::vector<std::string>& linear_paths() {
  static const std::vector<std::string> paths = {"fma", "mma", "mma_staged", "mma_split"};
  return paths;
}
// Both attention paths, as test parameters.
inline const std::vector<std::string>& attention_paths() {
  static const std::vector<std::string> paths = {"fused", "split"};
  return paths;
}

// A golden case (../shared/golden/<family>/<model>/case-<i>.safetensors) run on one linear path.
struct GoldenCaseParam {
  std::string family, model;
  int case_index = 0;
  std::string linear_path = "fma";        // or mma (DEEPINFER_CUDA_LINEAR)
  std::string attention_path = "fused";   // or split (DEEPINFER_CUDA_ATTENTION)
  std::string kv_path = "floats";         // or packed (DEEPINFER_CUDA_KV)
  int64_t prefill_chunk = 0;              // > 0: the prompt in forward calls of this many tokens (TeacherForcedOptions)
  std::string model_dir() const { return golden_dir() + "/" + family + "/" + model; }
  std::string case_path() const { return model_dir() + "/case-" + std::to_string(case_index) + ".safetensors"; }
};

inline void PrintTo(const GoldenCaseParam& p, std::ostream* os) {
  *os << p.family << "/" << p.model << " case " << p.case_index << " (" << p.linear_path << ", " << p.attention_path << ", "
      << p.kv_path << (p.prefill_chunk > 0 ? ", prompt chunks of " + std::to_string(p.prefill_chunk) : "") << ")";
}

inline std::string golden_case_name(const ::testing::TestParamInfo<GoldenCaseParam>& info) {
  std::string name = info.param.family + "_" + info.param.model + "_case" + std::to_string(info.param.case_index) + "_" +
                     info.param.linear_path +
                     (info.param.attention_path == "fused" ? "" : "_" + info.param.attention_path) +
                     (info.param.kv_path == "floats" ? "" : "_" + info.param.kv_path) +
                     (info.param.prefill_chunk > 0 ? "_chunk" + std::to_string(info.param.prefill_chunk) : "");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// Every case on each model linear path with the fused attention, on the tensor-core linear with the split one, and
// (packed_kv) on the tensor-core linear and fused attention with the cache rows decoded on the device.
inline std::vector<GoldenCaseParam> on_every_path(const std::vector<GoldenCaseParam>& cases, bool packed_kv = true) {
  std::vector<GoldenCaseParam> params;
  for (const std::string& path : model_linear_paths()) {
    for (GoldenCaseParam p : cases) {
      p.linear_path = path;
      params.push_back(p);
    }
  }
  for (GoldenCaseParam p : cases) {
    p.linear_path = "mma";
    p.attention_path = "split";
    params.push_back(p);
  }
  for (GoldenCaseParam p : cases) {
    if (!packed_kv) break;
    p.linear_path = "mma";
    p.kv_path = "packed";
    params.push_back(p);
  }
  return params;
}

}  // namespace deepinfer::testing

#define DI_SKIP_WITHOUT_CUDA()                                                             \
  do {                                                                                     \
    std::string di_cuda_error_;                                                            \
    if (!::deepinfer::testing::cuda_backend_or_null(&di_cuda_error_)) GTEST_SKIP() << di_cuda_error_; \
  } while (0)

#define DI_MAKE_CUDA_BACKEND(var)                                          \
  std::string var##_error;                                                 \
  std::unique_ptr<::deepinfer::Backend> var = ::deepinfer::make_cuda_backend(0, 0, &var##_error); \
  ASSERT_TRUE(var) << var##_error
