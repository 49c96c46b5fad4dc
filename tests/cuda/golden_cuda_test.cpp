// The golden models end to end on the CUDA backend (../shared/golden): every V4 and V4.1 case must stay
// within the fast-path bounds of tolerance.args, exactly as the fast CPU path does in tests/model (the GPU
// kernels accumulate in fp32 like the fast CPU kernels, with the same rounding points).
#include <gtest/gtest.h>

#include <filesystem>

#include "cuda/cuda_util.h"
#include "model/golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

class GoldenCuda : public ::testing::TestWithParam<testing::GoldenCaseParam> {
 protected:
  std::string model_dir() const { return GetParam().model_dir(); }
  std::string case_path() const { return GetParam().case_path(); }
  bool v41() const { return GetParam().family == "v41-flash"; }
  void SetUp() override {
    if (!std::filesystem::exists(case_path())) GTEST_SKIP() << "golden case not found: " << case_path();
    DI_SKIP_WITHOUT_CUDA();
  }
};

TEST_P(GoldenCuda, WithinFastPathBounds) {
  // V4.1 README: case 4 is the owner-keys behaviour.
  const bool owner_keys = v41() && GetParam().case_index == 4;
  const testing::ScopedCudaPaths paths(GetParam().linear_path, GetParam().attention_path, GetParam().kv_path);
  auto model = Model::open(model_dir(), ModelOptions{.exact = false, .index_owner_keys = owner_keys, .cuda = true});
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::printf("  backend: %s\n", model.value()->backend().name());
  auto gc = load_golden_case(case_path());
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  TeacherForcedOptions tf{.prefill_chunk = 0, .mtp = !v41(), .dspark = v41()};
  if (v41()) {  // drafts forced onto the golden anchors and chains, as in the CPU fast-path test
    tf.forced_dspark_anchor = &gc->dspark_anchor;
    tf.forced_dspark_tokens = &gc->dspark_tokens;
  }
  auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, tf);
  auto tol = testing::read_tolerances(model_dir());
  ASSERT_FALSE(tol.empty()) << "tolerance.args missing in " << model_dir();
  const int64_t V = model.value()->config().vocab_size;
  auto s = v41() ? testing::logit_stats(gc->logits, r.logits, V) : testing::logit_stats(gc->logits, r.logits, V, tol["bad-cos"]);
  EXPECT_TRUE(s.finite);
  EXPECT_GE(s.top1, tol["top1"]);
  EXPECT_LE(s.mean_abs, tol["mean-abs"]);
  EXPECT_GE(s.median_cos, tol["median-cos"]);
  EXPECT_GE(s.min_cos, tol["min-cos"]);
  if (!v41()) {
    EXPECT_LE(s.bad_frac, tol["max-bad-frac"]);
  }
  const bool short_prompt = double(gc->prompt.size()) <= tol["short-prompt"];
  EXPECT_GE(s.row0_cos, short_prompt ? tol["row0-cos-short"] : tol["row0-cos"]);
  if (v41()) {
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

// Every case on both linear paths, and with the split attention (cuda_util.h).
INSTANTIATE_TEST_SUITE_P(Cases, GoldenCuda,
                         ::testing::ValuesIn(testing::on_every_path(
                             {{"v4-flash", "flash-tiny", 1}, {"v4-flash", "flash-tiny", 2}, {"v4-flash", "flash-tiny", 3},
                              {"v4-flash", "pro-tiny", 1}, {"v4-flash", "pro-tiny", 2}, {"v4-flash", "pro-tiny", 3},
                              {"v41-flash", "tiny-a", 1}, {"v41-flash", "tiny-a", 2}, {"v41-flash", "tiny-a", 3},
                              {"v41-flash", "tiny-a", 4}})),
                         testing::golden_case_name);

}  // namespace
}  // namespace deepinfer
