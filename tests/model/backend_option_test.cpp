// ModelOptions::make_backend: a model runs on the backend the caller supplies (the GPU op-by-op test wraps
// the CUDA and reference backends this way). Here a wrapper around the fast CPU backend counts the ops it is
// given and must change nothing: its logits equal those of a model opened the ordinary way, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

class CountingBackend final : public Backend {
 public:
  CountingBackend(std::unique_ptr<Backend> inner, std::map<std::string, int>* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  const char* name() const override { return "counting"; }
  void linear(const LinearParams& p) override {
    ++(*calls_)["linear"];
    inner_->linear(p);
  }
  void hc_mix(const HcMixParams& p) override {
    ++(*calls_)["hc_mix"];
    inner_->hc_mix(p);
  }
  void sparse_attention(const SparseAttentionParams& p) override {
    ++(*calls_)["sparse_attention"];
    inner_->sparse_attention(p);
  }
  void index_scores(const IndexScoreParams& p) override {
    ++(*calls_)["index_scores"];
    inner_->index_scores(p);
  }

 private:
  std::unique_ptr<Backend> inner_;
  std::map<std::string, int>* calls_;
};

TEST(ModelBackendOption, SuppliedBackendRunsEveryOpAndChangesNothing) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir + "/case-2.safetensors")) GTEST_SKIP() << "golden data not found in " << dir;
  auto gc = load_golden_case(dir + "/case-2.safetensors");  // 37 prompt tokens: every op kind runs
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  std::vector<int32_t> continuation(gc->continuation.begin(), gc->continuation.begin() + 8);

  auto plain = Model::open(dir, ModelOptions{.n_threads = 2});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  const auto expected = run_teacher_forced(*plain.value(), gc->prompt, continuation, {});

  std::map<std::string, int> calls;
  ModelOptions options;
  options.make_backend = [&calls]() -> std::unique_ptr<Backend> {
    std::string error;
    auto fast = make_fast_backend(2, &error);
    return fast ? std::make_unique<CountingBackend>(std::move(fast), &calls) : nullptr;
  };
  auto wrapped = Model::open(dir, options);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().message();
  EXPECT_STREQ(wrapped.value()->backend().name(), "counting");
  const auto got = run_teacher_forced(*wrapped.value(), gc->prompt, continuation, {});
  EXPECT_EQ(got.logits, expected.logits);
  for (const char* op : {"linear", "hc_mix", "sparse_attention", "index_scores"}) EXPECT_GT(calls[op], 0) << op;
}

TEST(ModelBackendOption, NoBackendIsAClearError) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "golden data not found in " << dir;
  ModelOptions options;
  options.make_backend = []() -> std::unique_ptr<Backend> { return nullptr; };
  auto model = Model::open(dir, options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("make_backend"), std::string::npos) << model.status().message();
}

}  // namespace
}  // namespace deepinfer
