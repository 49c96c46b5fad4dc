// The V4 golden cases (../shared/golden/v4-flash) through both kernel paths: the exact path must match
// every logit, MTP logit and hidden.L row within 1e-3 (in practice bit for bit), the fast path must stay
// within the README's fast-path bounds read from tolerance.args.
#include <gtest/gtest.h>

#include <filesystem>

#include "golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;

struct GoldenParam {
  std::string model;
  int case_index;
};

std::string param_name(const ::testing::TestParamInfo<GoldenParam>& info) {
  std::string name = info.param.model + "_case" + std::to_string(info.param.case_index);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class V4Golden : public ::testing::TestWithParam<GoldenParam> {
 protected:
  std::string model_dir() const { return golden_dir() + "/v4-flash/" + GetParam().model; }
  std::string case_path() const { return model_dir() + "/case-" + std::to_string(GetParam().case_index) + ".safetensors"; }
  void SetUp() override {
    if (!std::filesystem::exists(case_path())) GTEST_SKIP() << "golden case not found: " << case_path();
  }
};

TEST_P(V4Golden, ExactPathMatchesEveryRow) {
  auto model = Model::open(model_dir(), ModelOptions{.exact = true});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto gc = load_golden_case(case_path());
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, {.prefill_chunk = 0, .mtp = true});
  EXPECT_LE(max_abs_diff(gc->logits, r.logits), 1e-3);
  EXPECT_LE(max_abs_diff(gc->mtp_logits, r.mtp_logits), 1e-3);
  const int64_t D = model.value()->config().dim;
  for (size_t l = 0; l < gc->hidden.size(); ++l) {
    std::vector<float> got(r.layer_streams.begin() + int64_t(l) * 4 * D, r.layer_streams.begin() + int64_t(l + 1) * 4 * D);
    EXPECT_LE(max_abs_diff(gc->hidden[l], got), 1e-3) << "hidden." << l;
  }
}

TEST_P(V4Golden, FastPathWithinReadmeBounds) {
  auto model = Model::open(model_dir(), ModelOptions{.exact = false, .n_threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto gc = load_golden_case(case_path());
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, {.prefill_chunk = 0, .mtp = true});
  auto tol = testing::read_tolerances(model_dir());
  ASSERT_FALSE(tol.empty()) << "tolerance.args missing in " << model_dir();
  const int64_t V = model.value()->config().vocab_size;
  auto s = testing::logit_stats(gc->logits, r.logits, V, tol["bad-cos"]);
  EXPECT_TRUE(s.finite);
  EXPECT_GE(s.top1, tol["top1"]);
  EXPECT_LE(s.mean_abs, tol["mean-abs"]);
  EXPECT_GE(s.median_cos, tol["median-cos"]);
  EXPECT_GE(s.min_cos, tol["min-cos"]);
  EXPECT_LE(s.bad_frac, tol["max-bad-frac"]);
  const bool short_prompt = double(gc->prompt.size()) <= tol["short-prompt"];
  EXPECT_GE(s.row0_cos, short_prompt ? tol["row0-cos-short"] : tol["row0-cos"]);
  auto m = testing::logit_stats(gc->mtp_logits, r.mtp_logits, V);
  EXPECT_TRUE(m.finite);
  EXPECT_GE(m.median_cos, 0.9);  // README: MTP logits are a smoke test only
  RecordProperty("top1", std::to_string(s.top1));
  RecordProperty("median_cos", std::to_string(s.median_cos));
}

INSTANTIATE_TEST_SUITE_P(Cases, V4Golden,
                         ::testing::Values(GoldenParam{"flash-tiny", 1}, GoldenParam{"flash-tiny", 2},
                                           GoldenParam{"flash-tiny", 3}, GoldenParam{"pro-tiny", 1},
                                           GoldenParam{"pro-tiny", 2}, GoldenParam{"pro-tiny", 3}),
                         param_name);

}  // namespace
}  // namespace deepinfer
