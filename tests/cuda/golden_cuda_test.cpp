// The golden models end to end on the CUDA backend (../shared/golden): every V4 and V4.1 case must stay
// within the fast-path bounds of tolerance.args, exactly as the fast CPU path does in tests/model (the GPU
// kernels accumulate in fp32 like the fast CPU kernels, with the same rounding points).
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/timed_backend.h"
#include "cuda/cuda_util.h"
#include "model/golden_util.h"
#include "model/teacher_forcing.h"
#include "model/weight_traffic.h"

namespace deepinfer {
namespace {

// Runs golden case `param` on the CUDA backend and checks it against the fast-path bounds.
void expect_within_fast_path_bounds(const testing::GoldenCaseParam& param) {
  const std::string model_dir = param.model_dir();
  const bool v41 = param.family == "v41-flash";
  // V4.1 README: case 4 is the owner-keys behaviour.
  const bool owner_keys = v41 && param.case_index == 4;
  const testing::ScopedCudaPaths paths(param.linear_path, param.attention_path, param.kv_path);
  auto model = Model::open(model_dir, ModelOptions{.exact = false, .index_owner_keys = owner_keys, .cuda = true});
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::printf("  backend: %s\n", model.value()->backend().name());
  auto gc = load_golden_case(param.case_path());
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  TeacherForcedOptions tf{.prefill_chunk = 0, .mtp = !v41, .dspark = v41};
  if (v41) {  // drafts forced onto the golden anchors and chains, as in the CPU fast-path test
    tf.forced_dspark_anchor = &gc->dspark_anchor;
    tf.forced_dspark_tokens = &gc->dspark_tokens;
  }
  auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, tf);
  auto tol = testing::read_tolerances(model_dir);
  ASSERT_FALSE(tol.empty()) << "tolerance.args missing in " << model_dir;
  const int64_t V = model.value()->config().vocab_size;
  auto s = v41 ? testing::logit_stats(gc->logits, r.logits, V) : testing::logit_stats(gc->logits, r.logits, V, tol["bad-cos"]);
  EXPECT_TRUE(s.finite);
  EXPECT_GE(s.top1, tol["top1"]);
  EXPECT_LE(s.mean_abs, tol["mean-abs"]);
  EXPECT_GE(s.median_cos, tol["median-cos"]);
  EXPECT_GE(s.min_cos, tol["min-cos"]);
  if (!v41) {
    EXPECT_LE(s.bad_frac, tol["max-bad-frac"]);
  }
  const bool short_prompt = double(gc->prompt.size()) <= tol["short-prompt"];
  EXPECT_GE(s.row0_cos, short_prompt ? tol["row0-cos-short"] : tol["row0-cos"]);
  if (v41) {
    auto d = testing::logit_stats(gc->dspark_logits, r.dspark_logits, V);
    EXPECT_TRUE(d.finite);
    EXPECT_GE(d.median_cos, 0.9);  // README: a smoke test on the fast path
  } else {
    auto m = testing::logit_stats(gc->mtp_logits, r.mtp_logits, V);
    EXPECT_TRUE(m.finite);
    EXPECT_GE(m.median_cos, 0.9);  // README: MTP logits are a smoke test only
  }
  std::printf("  top1 %.3f  mean_abs %.4f  median_cos %.6f  min_cos %.6f  row0_cos %.6f\n", s.top1, s.mean_abs,
              s.median_cos, s.min_cos, s.row0_cos);
}

class GoldenCuda : public ::testing::TestWithParam<testing::GoldenCaseParam> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(GetParam().case_path())) GTEST_SKIP() << "golden case not found: " << GetParam().case_path();
    DI_SKIP_WITHOUT_CUDA();
  }
};

TEST_P(GoldenCuda, WithinFastPathBounds) { expect_within_fast_path_bounds(GetParam()); }

// Every case on both linear paths, and with the split attention (cuda_util.h).
INSTANTIATE_TEST_SUITE_P(Cases, GoldenCuda,
                         ::testing::ValuesIn(testing::on_every_path(
                             {{"v4-flash", "flash-tiny", 1}, {"v4-flash", "flash-tiny", 2}, {"v4-flash", "flash-tiny", 3},
                              {"v4-flash", "pro-tiny", 1}, {"v4-flash", "pro-tiny", 2}, {"v4-flash", "pro-tiny", 3},
                              {"v41-flash", "tiny-a", 1}, {"v41-flash", "tiny-a", 2}, {"v41-flash", "tiny-a", 3},
                              {"v41-flash", "tiny-a", 4}})),
                         testing::golden_case_name);

// DEEPINFER_CUDA_WEIGHT_GB holding every weight but the routed experts and half of those: the other half run on
// the host's CPU kernels (Backend::place_experts), and the cases stay within the same bounds.
TEST(GoldenCudaOffload, HalfTheExpertsOnTheHost) {
  DI_SKIP_WITHOUT_CUDA();
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 2, "mma"}, {"v4-flash", "pro-tiny", 2, "mma"}, {"v41-flash", "tiny-a", 2, "mma"}}) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    auto config = load_model_config(param.model_dir());
    ASSERT_TRUE(config.ok()) << config.status().message();
    const WeightTraffic traffic = weight_traffic(config.value());
    const double budget = double(traffic.dense_bytes) + 0.5 * double(traffic.expert_bytes) * config->n_routed_experts;
    setenv("DEEPINFER_CUDA_WEIGHT_GB", std::to_string(budget / 1e9).c_str(), 1);
    SCOPED_TRACE(param.model_dir());
    expect_within_fast_path_bounds(param);
    unsetenv("DEEPINFER_CUDA_WEIGHT_GB");
  }
}

// DEEPINFER_CUDA_PROMPT_LINEAR=fp8: the prompt tokens' linears whose x the model quantised run on FP8 operands
// (kernels.h), the generated tokens' as before, so the model runs the two kinds as separate passes; the cases stay
// within the same bounds.
TEST(GoldenCudaFp8Prompt, WithinFastPathBounds) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedPromptLinear fp8("fp8");
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 3, "mma"}, {"v4-flash", "pro-tiny", 2, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    SCOPED_TRACE(param.case_path());
    expect_within_fast_path_bounds(param);
  }
}

// DEEPINFER_CUDA_PROMPT_LINEAR=wgmma: the same on the wgmma kernel (compute capability 9.0 devices only).
TEST(GoldenCudaWgmmaPrompt, WithinFastPathBounds) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedPromptLinear wgmma("wgmma");
  std::string error;
  if (!make_cuda_backend(0, 0, &error)) GTEST_SKIP() << error;
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 3, "mma"}, {"v4-flash", "pro-tiny", 2, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    SCOPED_TRACE(param.case_path());
    expect_within_fast_path_bounds(param);
  }
}

// DEEPINFER_CUDA_KV=mirror end to end: the rows the device keeps by stamp are the bytes the packed path copies each
// call, so the logits (main, MTP, DSpark) equal the packed path's bit for bit, through a prefill and the teacher-
// forced decode steps whose cache rows are mostly kept from the steps before.
TEST(GoldenCudaMirror, EqualsThePackedPathBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    SCOPED_TRACE(param.case_path());
    auto gc = load_golden_case(param.case_path());
    ASSERT_TRUE(gc.ok()) << gc.status().message();
    const bool v41 = param.family == "v41-flash";
    TeacherForcedOptions tf{.prefill_chunk = 0, .mtp = !v41, .dspark = v41};
    if (v41) {
      tf.forced_dspark_anchor = &gc->dspark_anchor;
      tf.forced_dspark_tokens = &gc->dspark_tokens;
    }
    std::vector<float> logits[2], side_logits[2];
    for (int mirror = 0; mirror < 2; ++mirror) {
      const testing::ScopedCudaPaths paths("mma", "fused", mirror ? "mirror" : "packed");
      auto model = Model::open(param.model_dir(), ModelOptions{.exact = false, .cuda = true});
      ASSERT_TRUE(model.ok()) << model.status().message();
      auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, tf);
      logits[mirror] = r.logits;
      side_logits[mirror] = v41 ? r.dspark_logits : r.mtp_logits;
    }
    EXPECT_EQ(logits[0], logits[1]);
    EXPECT_EQ(side_logits[0], side_logits[1]);
    EXPECT_FALSE(logits[0].empty());
  }
}

// DEEPINFER_CUDA_MOE=device end to end: every block's MoE in one call, on the device, gives the model's own MoE
// code's bits on this backend (tests/cuda/moe_cuda_test.cpp holds the op to that), so the logits (main, MTP,
// DSpark) equal the host MoE's bit for bit through a prefill and the teacher-forced decode steps.
TEST(GoldenCudaDeviceMoe, EqualsTheHostMoeBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    SCOPED_TRACE(param.case_path());
    auto gc = load_golden_case(param.case_path());
    ASSERT_TRUE(gc.ok()) << gc.status().message();
    const bool v41 = param.family == "v41-flash";
    TeacherForcedOptions tf{.prefill_chunk = 0, .mtp = !v41, .dspark = v41};
    if (v41) {
      tf.forced_dspark_anchor = &gc->dspark_anchor;
      tf.forced_dspark_tokens = &gc->dspark_tokens;
    }
    std::vector<float> logits[2], side_logits[2];
    int64_t linear_calls[2] = {0, 0}, whole[2] = {0, 0};
    for (int device = 0; device < 2; ++device) {
      const testing::ScopedCudaPaths paths("mma");
      setenv("DEEPINFER_CUDA_MOE", device ? "device" : "host", 1);
      OpTimes times{};
      ModelOptions options{.exact = false, .cuda = true};
      options.wrap_backend = [&](std::unique_ptr<Backend> inner) { return std::make_unique<TimedBackend>(std::move(inner), &times); };
      auto model = Model::open(param.model_dir(), options);
      unsetenv("DEEPINFER_CUDA_MOE");
      ASSERT_TRUE(model.ok()) << model.status().message();
      auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, tf);
      whole[device] = times[size_t(OpKind::kMoe)].calls;
      linear_calls[device] = times[size_t(OpKind::kLinear)].entries;
      logits[device] = r.logits;
      side_logits[device] = v41 ? r.dspark_logits : r.mtp_logits;
    }
    EXPECT_EQ(logits[0], logits[1]);
    EXPECT_EQ(side_logits[0], side_logits[1]);
    EXPECT_FALSE(logits[0].empty());
    // The MoEs ran whole on the device, each one call where the model's code makes three linears() calls.
    EXPECT_EQ(whole[0], 0);
    EXPECT_GT(whole[1], 0);
    EXPECT_EQ(linear_calls[0] - linear_calls[1], 3 * whole[1]);
    std::printf("  %lld MoEs whole on the device; backend linear calls %lld -> %lld\n", (long long)whole[1],
                (long long)linear_calls[0], (long long)linear_calls[1]);
  }
}

}  // namespace
}  // namespace deepinfer
