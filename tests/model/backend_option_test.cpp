// ModelOptions::make_backend and wrap_backend: a model runs on the backend the caller supplies (the GPU
// op-by-op test wraps the CUDA and reference backends this way) or on a wrapper around the one it selected
// (`bench --op-times`). Here a TimedBackend around the fast CPU backend counts and times the ops it is given
// and must change nothing: its logits equal those of a model opened the ordinary way, bit for bit.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <span>
#include <thread>
#include <string>

#include "backend/timed_backend.h"
#include "golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

TEST(ModelBackendOption, SuppliedBackendRunsEveryOpAndChangesNothing) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir + "/case-2.safetensors")) GTEST_SKIP() << "golden data not found in " << dir;
  auto gc = load_golden_case(dir + "/case-2.safetensors");  // 37 prompt tokens: every op kind runs
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  std::vector<int32_t> continuation(gc->continuation.begin(), gc->continuation.begin() + 8);

  auto plain = Model::open(dir, ModelOptions{.n_threads = 2});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  const auto expected = run_teacher_forced(*plain.value(), gc->prompt, continuation, {});

  OpTimes times{};
  LinearTimes linear{};
  ModelOptions options;
  options.make_backend = [&times, &linear]() -> std::unique_ptr<Backend> {
    std::string error;
    auto fast = make_fast_backend(2, &error);
    return fast ? std::make_unique<TimedBackend>(std::move(fast), &times, &linear) : nullptr;
  };
  auto wrapped = Model::open(dir, options);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().message();
  EXPECT_STREQ(wrapped.value()->backend().name(), plain.value()->backend().name());
  const auto got = run_teacher_forced(*wrapped.value(), gc->prompt, continuation, {});
  EXPECT_EQ(got.logits, expected.logits);
  for (OpKind op : {OpKind::kLinear, OpKind::kHcMix, OpKind::kSparseAttention, OpKind::kIndexScores, OpKind::kRowWork}) {
    EXPECT_GT(times[size_t(op)].calls, 0) << op_kind_name(op);
    EXPECT_GT(times[size_t(op)].entries, 0) << op_kind_name(op);
    EXPECT_LE(times[size_t(op)].entries, times[size_t(op)].calls) << op_kind_name(op);
    EXPECT_GT(times[size_t(op)].seconds, 0.0) << op_kind_name(op);
  }
  // The model hands independent linears over as batches: fewer calls into the backend than linear ops.
  EXPECT_LT(times[size_t(OpKind::kLinear)].entries, times[size_t(OpKind::kLinear)].calls);
  // The linear ops split by weight type add up to the linear total; flash-tiny has bf16, FP8 and FP4 weights.
  int64_t calls = 0;
  double seconds = 0;
  for (const LinearTime& t : linear) {
    calls += t.calls;
    seconds += t.seconds;
  }
  EXPECT_EQ(calls, times[size_t(OpKind::kLinear)].calls);
  EXPECT_NEAR(seconds, times[size_t(OpKind::kLinear)].seconds, 1e-9);
  for (WeightType type : {WeightType::kBf16, WeightType::kFp8, WeightType::kFp4}) {
    EXPECT_GT(linear[size_t(type)].calls, 0) << weight_type_name(type);
    EXPECT_GT(linear[size_t(type)].weight_bytes, 0.0) << weight_type_name(type);
  }
}

TEST(TimedBackend, LinearWeightBytesCountTheRowsReadAndTheirScales) {
  const LinearWeight fp8{.dtype = DType::kF8E4M3, .n_out = 1024, .n_in = 1000, .block = 128};
  // Rows [100, 400) touch the scale rows of blocks 0-3, each ceil(1000 / 128) = 8 bytes.
  EXPECT_EQ(linear_weight_bytes({.weight = &fp8, .row_begin = 100, .n_rows = 300}), 300.0 * 1000 + 4 * 8);
  const LinearWeight fp4{.dtype = DType::kI8, .n_out = 16, .n_in = 64};
  EXPECT_EQ(linear_weight_bytes({.weight = &fp4, .row_begin = 0, .n_rows = 3}), 3.0 * 32 + 3 * 2);
  const LinearWeight bf16{.dtype = DType::kBF16, .n_out = 8, .n_in = 10};
  EXPECT_EQ(linear_weight_bytes({.weight = &bf16, .row_begin = 2, .n_rows = 5}), 5.0 * 20);
}

// A linears() batch of two weight types: its time goes to each type in proportion to the bytes its ops read.
TEST(TimedBackend, MixedBatchSplitsItsTimeByWeightBytes) {
  struct Slow final : Backend {  // each batch takes at least a millisecond
    const char* name() const override { return "slow"; }
    void linear(const LinearParams&) override { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }
    void linears(std::span<const LinearParams>) override { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }
    void hc_mix(const HcMixParams&) override {}
    void sparse_attention(const SparseAttentionParams&) override {}
    void index_scores(const IndexScoreParams&) override {}
  };
  OpTimes times{};
  LinearTimes linear{};
  TimedBackend timed(std::make_unique<Slow>(), &times, &linear);
  const LinearWeight fp8{.dtype = DType::kF8E4M3, .n_out = 256, .n_in = 256, .block = 128};   // 65536 + 4 bytes
  const LinearWeight bf16{.dtype = DType::kBF16, .n_out = 64, .n_in = 256};                   // 32768 bytes
  const LinearParams ops[] = {{.weight = &fp8, .n_rows = 256}, {.weight = &bf16, .n_rows = 64}, {.weight = &fp8, .n_rows = 256}};
  timed.linears(ops);
  const LinearTime &f = linear[size_t(WeightType::kFp8)], &b = linear[size_t(WeightType::kBf16)];
  EXPECT_EQ(f.calls, 2);
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(f.weight_bytes, 2 * 65540.0);
  EXPECT_EQ(b.weight_bytes, 32768.0);
  EXPECT_GE(f.seconds + b.seconds, 1e-3);
  EXPECT_NEAR(f.seconds + b.seconds, times[size_t(OpKind::kLinear)].seconds, 1e-12);
  EXPECT_NEAR(f.seconds / b.seconds, f.weight_bytes / b.weight_bytes, 1e-9);
  EXPECT_EQ(times[size_t(OpKind::kLinear)].calls, 3);
  EXPECT_EQ(times[size_t(OpKind::kLinear)].entries, 1);
}

TEST(ModelBackendOption, WrappedBackendRunsEveryOpAndChangesNothing) {
  const std::string dir = testing::golden_dir() + "/v4-flash/flash-tiny";
  if (!std::filesystem::exists(dir + "/case-2.safetensors")) GTEST_SKIP() << "golden data not found in " << dir;
  auto gc = load_golden_case(dir + "/case-2.safetensors");
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  std::vector<int32_t> continuation(gc->continuation.begin(), gc->continuation.begin() + 4);
  auto plain = Model::open(dir, ModelOptions{.exact = true});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  const auto expected = run_teacher_forced(*plain.value(), gc->prompt, continuation, {});

  OpTimes times{};
  ModelOptions options{.exact = true};  // the wrapper receives the backend these options select
  options.wrap_backend = [&times](std::unique_ptr<Backend> selected) -> std::unique_ptr<Backend> {
    return std::make_unique<TimedBackend>(std::move(selected), &times);
  };
  auto wrapped = Model::open(dir, options);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().message();
  const auto got = run_teacher_forced(*wrapped.value(), gc->prompt, continuation, {});
  EXPECT_EQ(got.logits, expected.logits);
  EXPECT_GT(times[size_t(OpKind::kLinear)].calls, 0);

  options.wrap_backend = [](std::unique_ptr<Backend>) -> std::unique_ptr<Backend> { return nullptr; };
  auto refused = Model::open(dir, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("wrap_backend"), std::string::npos) << refused.status().message();
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
