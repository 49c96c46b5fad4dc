// The golden models end to end on the CUDA backend (../shared/golden): every V4 and V4.1 case must stay
// within the fast-path bounds of tolerance.args, exactly as the fast CPU path does in tests/model (the GPU
// kernels accumulate in fp32 like the fast CPU kernels, with the same rounding points).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "backend/timed_backend.h"
#include "cuda/cuda_util.h"
#include "cuda/random_moe.h"
#include "model/golden_util.h"
#include "model/ops.h"
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
  TeacherForcedOptions tf{.prefill_chunk = param.prefill_chunk, .mtp = !v41, .dspark = v41};
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

// DEEPINFER_CUDA_INDEX_SCORES=mma: the indexer's dot products on the tensor cores (index_scores_mma_kernel.cu),
// through the index keys read packed from the mirror; the cases stay within the same bounds.
TEST(GoldenCudaIndexScoresMma, WithinFastPathBounds) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedIndexScores mma("mma");
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 3, "mma", "fused", "mirror"}, {"v41-flash", "tiny-a", 1, "mma", "fused", "mirror"}}) {
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

// Golden case `param` teacher-forced on a CUDA backend made under the environment as it is (its linear path:
// param's): the main logits, the MTP (V4) or DSpark (V4.1) logits, and the backend's op counts.
struct CudaRun {
  std::vector<float> logits, side_logits;
  std::vector<float> layer_streams;  // every layer's output stream at the last prompt position
  OpTimes times{};
  bool v41 = false;
};
// side_heads false: no MTP or DSpark run, so no forward keeps its hidden stream (the main logits alone).
void run_teacher_forced_on_cuda(const testing::GoldenCaseParam& param, const GoldenCase& gc, CudaRun& run, bool side_heads = true) {
  const bool v41 = param.family == "v41-flash";
  TeacherForcedOptions tf{.prefill_chunk = param.prefill_chunk, .mtp = !v41 && side_heads, .dspark = v41 && side_heads};
  if (v41) {
    tf.forced_dspark_anchor = &gc.dspark_anchor;
    tf.forced_dspark_tokens = &gc.dspark_tokens;
  }
  ModelOptions options{.exact = false, .cuda = true};
  options.wrap_backend = [&](std::unique_ptr<Backend> inner) { return std::make_unique<TimedBackend>(std::move(inner), &run.times); };
  auto model = Model::open(param.model_dir(), options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto r = run_teacher_forced(*model.value(), gc.prompt, gc.continuation, tf);
  run.logits = r.logits;
  run.side_logits = v41 ? r.dspark_logits : r.mtp_logits;
  run.layer_streams = r.layer_streams;
  run.v41 = v41;
}

// The CUDA backend with environment variable `variable` set to values[0] and to values[1] gives the same logits,
// main and side, bit for bit on each case of `params`; `also` checks more of the two runs.
void expect_same_bits(const std::vector<testing::GoldenCaseParam>& params, const char* variable, const char* const (&values)[2],
                      const std::function<void(const CudaRun (&)[2])>& also = nullptr) {
  for (const testing::GoldenCaseParam& param : params) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    SCOPED_TRACE(param.case_path());
    auto gc = load_golden_case(param.case_path());
    ASSERT_TRUE(gc.ok()) << gc.status().message();
    CudaRun runs[2];
    for (int i = 0; i < 2; ++i) {
      const testing::ScopedCudaPaths paths(param.linear_path, param.attention_path, param.kv_path);
      setenv(variable, values[i], 1);
      run_teacher_forced_on_cuda(param, gc.value(), runs[i]);
      unsetenv(variable);
    }
    EXPECT_EQ(runs[0].logits, runs[1].logits);
    EXPECT_EQ(runs[0].side_logits, runs[1].side_logits);
    EXPECT_EQ(runs[0].layer_streams, runs[1].layer_streams);
    EXPECT_FALSE(runs[0].logits.empty());
    EXPECT_FALSE(runs[0].layer_streams.empty());
    if (also) also(runs);
  }
}

// DEEPINFER_CUDA_KV=packed end to end: the cache rows go over packed and are decoded on the device as the host decodes
// them, and a decode step's token hands its sequence's window ring over whole (SparseAttentionParams::window_ring),
// its window slots placed by their places in it, so the logits (main, MTP, DSpark) and the layer streams equal those
// with the rows decoded on the host and sent as floats, bit for bit.
TEST(GoldenCudaPackedRows, EqualTheFloatRowsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma"}, {"v4-flash", "pro-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}},
                   "DEEPINFER_CUDA_KV", {"floats", "packed"});
}

// DEEPINFER_CUDA_KV=mirror end to end: the rows the device keeps by stamp are the bytes the packed path copies each
// call, so the logits (main, MTP, DSpark) equal the packed path's bit for bit, through a prefill and the teacher-
// forced decode steps whose cache rows are mostly kept from the steps before.
TEST(GoldenCudaMirror, EqualsThePackedPathBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}, "DEEPINFER_CUDA_KV",
                   {"packed", "mirror"});
}

// DEEPINFER_CUDA_ATTENTION_ROWS=packed end to end, on the mirror's rows and through both attention paths: the
// kernels decode each value of a packed row as launch_unpack_rows does, so the logits (main, MTP, DSpark) equal
// the decoded rows' bit for bit.
TEST(GoldenCudaPackedAttentionRows, EqualsTheDecodedRowsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma", "fused", "mirror"}, {"v41-flash", "tiny-a", 1, "mma", "split", "mirror"}},
                   "DEEPINFER_CUDA_ATTENTION_ROWS", {"decoded", "packed"});
}

// DEEPINFER_CUDA_MOE=device end to end: every block's FFN side (its mHC halves and the MoE) in one call, on the
// device, gives the model's own steps' bits on this backend (moe_cuda_test.cpp and moe_side_cuda_test.cpp hold
// the ops to that), so the logits (main, MTP, DSpark) equal the host's bit for bit through a prefill and the
// teacher-forced decode steps; and each side is one call where the model's steps make an hc_mix call and three
// linears() calls.
TEST(GoldenCudaDeviceMoe, EqualsTheHostMoeBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  expect_same_bits(
      {{"v4-flash", "flash-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}, "DEEPINFER_CUDA_MOE", {"host", "device"},
      [](const CudaRun (&runs)[2]) {
        const int64_t whole = runs[1].times[size_t(OpKind::kMoe)].calls;
        const int64_t host_calls = runs[0].times[size_t(OpKind::kLinear)].entries;
        const int64_t device_calls = runs[1].times[size_t(OpKind::kLinear)].entries;
        EXPECT_EQ(runs[0].times[size_t(OpKind::kMoe)].calls, 0);
        EXPECT_GT(whole, 0);
        EXPECT_EQ(host_calls - device_calls, 3 * whole);
        EXPECT_EQ(runs[0].times[size_t(OpKind::kHcMix)].entries - runs[1].times[size_t(OpKind::kHcMix)].entries, whole)
            << "each FFN side whole (Backend::moe_side) takes its hc_mix call along";
        std::printf("  %lld FFN sides whole on the device; backend linear calls %lld -> %lld\n", (long long)whole,
                    (long long)host_calls, (long long)device_calls);
      });
}

// DEEPINFER_CUDA_LINEAR_CHAIN=device end to end: every attention output projection (wo_a's groups, z's QDQ, wo_b)
// in one call, and every attention side's front (its mHC first half, the projections of u, qr's norm and QDQ, the
// projections of qr) in one call, give the model's own steps' bits on this backend, so the logits (main, MTP,
// DSpark) are the same bit for bit, with fewer backend linear and hc_mix calls.
TEST(GoldenCudaLinearChain, EqualsTheModelStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}, "DEEPINFER_CUDA_LINEAR_CHAIN",
                   {"host", "device"}, [](const CudaRun (&runs)[2]) {
                     const int64_t host_calls = runs[0].times[size_t(OpKind::kLinear)].entries;
                     const int64_t device_calls = runs[1].times[size_t(OpKind::kLinear)].entries;
                     // The same ops, each chain one call where the steps make two; the attention side's mixes go
                     // with its projection chain (Backend::mhc_projection_chain).
                     EXPECT_EQ(runs[0].times[size_t(OpKind::kLinear)].calls, runs[1].times[size_t(OpKind::kLinear)].calls);
                     EXPECT_LT(device_calls, host_calls);
                     const int64_t host_mixes = runs[0].times[size_t(OpKind::kHcMix)].entries;
                     const int64_t device_mixes = runs[1].times[size_t(OpKind::kHcMix)].entries;
                     EXPECT_LT(device_mixes, host_mixes);
                     std::printf("  backend linear calls %lld -> %lld, hc_mix calls %lld -> %lld\n", (long long)host_calls,
                                 (long long)device_calls, (long long)host_mixes, (long long)device_mixes);
                   });
}

// Both options on: every block's tail (the attention's output projection, the attention side's expansion and the
// FFN side) in one call where the call's tokens are one attention query block, giving the model's own steps' bits
// on this backend (moe_side_cuda_test.cpp holds the op to that), so the logits (main, MTP, DSpark) equal those with
// the output projection a call of its own, bit for bit. The tails' output projections are no linear calls of
// their own (TimedBackend counts a tail as one MoE call). V4's prompt also in calls of 128 tokens: its prefill then
// keeps q, the attention's output and the stream on the device too (calls of up to 256 tokens do), and the stream is
// fetched for the layer streams at the last prompt position. V4.1's Engram layers then update the kept stream on the
// device (Backend::engram_gate).
TEST(GoldenCudaBlockTail, EqualsTheModelStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedMoePath moe("device");
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma"},
                    {"v4-flash", "flash-tiny", 3, "mma", "fused", "floats", 128},
                    {"v41-flash", "tiny-a", 1, "mma"}},
                   "DEEPINFER_CUDA_LINEAR_CHAIN",
                   {"host", "device"}, [](const CudaRun (&runs)[2]) {
                     const int64_t host_ops = runs[0].times[size_t(OpKind::kLinear)].calls;
                     const int64_t device_ops = runs[1].times[size_t(OpKind::kLinear)].calls;
                     EXPECT_EQ(runs[0].times[size_t(OpKind::kMoe)].entries, runs[1].times[size_t(OpKind::kMoe)].entries)
                         << "each FFN side is one call, with its tail or without";
                     EXPECT_LT(device_ops, host_ops) << "no output projection ran inside a block tail";
                     // V4.1's Engram layers update the stream where the tails keep it (Backend::engram_gate).
                     const int64_t updates = runs[1].times[size_t(OpKind::kLinear)].stream_updates;
                     EXPECT_EQ(runs[0].times[size_t(OpKind::kLinear)].stream_updates, 0);
                     if (runs[1].v41) {
                       EXPECT_GT(updates, 0) << "no Engram update on the kept stream";
                     }
                     std::printf("  backend linear ops %lld -> %lld, backend linear calls %lld -> %lld, Engram updates on the "
                                 "kept stream %lld\n", (long long)host_ops, (long long)device_ops,
                                 (long long)runs[0].times[size_t(OpKind::kLinear)].entries,
                                 (long long)runs[1].times[size_t(OpKind::kLinear)].entries, (long long)updates);
                   });
}

// The head on the kept stream (Backend::head_on_kept_stream) end to end: with a block's tail in one call the stream (and
// V4.1's pre) stays on the device after the last block, and where no chunk keeps its hidden stream (no MTP or DSpark
// here) the head's steps run there too, with the host steps' bits: the logits equal the host chain's (DEEPINFER_CUDA_
// LINEAR_CHAIN=host, every step on the host) bit for bit. V4 also in 128-token prompt chunks, whose prefill keeps the
// stream; the last prompt chunk fetches it for the layer streams and runs the host's head.
TEST(GoldenCudaHeadOnKeptStream, EqualsTheHostStepsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedMoePath moe("device");
  for (const testing::GoldenCaseParam& param : std::vector<testing::GoldenCaseParam>{
           {"v4-flash", "flash-tiny", 3, "mma", "fused", "mirror", 128}, {"v4-flash", "pro-tiny", 2, "mma"},
           {"v41-flash", "tiny-a", 1, "mma", "fused", "mirror"}}) {
    if (!std::filesystem::exists(param.case_path())) GTEST_SKIP() << "golden case not found: " << param.case_path();
    SCOPED_TRACE(param.case_path());
    auto gc = load_golden_case(param.case_path());
    ASSERT_TRUE(gc.ok()) << gc.status().message();
    CudaRun runs[2];
    const char* chain[2] = {"host", "device"};
    for (int i = 0; i < 2; ++i) {
      const testing::ScopedCudaPaths paths(param.linear_path, param.attention_path, param.kv_path);
      const testing::ScopedEnv chains("DEEPINFER_CUDA_LINEAR_CHAIN", chain[i]);
      run_teacher_forced_on_cuda(param, gc.value(), runs[i], /*side_heads=*/false);
    }
    EXPECT_FALSE(runs[0].logits.empty());
    EXPECT_EQ(runs[0].logits, runs[1].logits);
    EXPECT_EQ(runs[0].layer_streams, runs[1].layer_streams);
    const int64_t heads = runs[1].times[size_t(OpKind::kLinear)].heads_on_kept_stream;
    EXPECT_EQ(runs[0].times[size_t(OpKind::kLinear)].heads_on_kept_stream, 0);
    // Every decode step's head, and every prompt chunk's but the last (which fetches the stream for the layer streams).
    const int64_t P = int64_t(gc.value().prompt.size()), chunk = param.prefill_chunk > 0 ? param.prefill_chunk : P;
    EXPECT_EQ(heads, int64_t(gc.value().continuation.size()) + (P + chunk - 1) / chunk - 1);
  }
}

// The same after V4.1's SWA bounded replay (ModelOptions::swa_bounded_replay), which leaves only the tails' tokens in
// the pass from its decoder layers on: a 300-token prompt in one forward (no layer streams read, so its head runs on
// the kept stream of the tail's tokens), then two decode steps, each equal to every step on the host bit for bit.
TEST(GoldenCudaHeadOnKeptStream, AfterAnSwaReplayEqualsTheHostSteps) {
  DI_SKIP_WITHOUT_CUDA();
  const std::string dir = testing::golden_dir() + "/v41-flash/tiny-a";
  if (!std::filesystem::exists(dir + "/case-1.safetensors")) GTEST_SKIP() << "golden data not found: " << dir;
  auto gc = load_golden_case(dir + "/case-1.safetensors");
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  const testing::ScopedMoePath moe("device");
  const testing::ScopedCudaPaths paths("mma", "fused", "mirror");
  std::vector<float> logits[2];
  OpTimes times[2]{};
  const char* chain[2] = {"host", "device"};
  for (int i = 0; i < 2; ++i) {
    const testing::ScopedEnv chains("DEEPINFER_CUDA_LINEAR_CHAIN", chain[i]);
    ModelOptions options{.exact = false, .swa_bounded_replay = true, .cuda = true};
    options.wrap_backend = [&](std::unique_ptr<Backend> inner) { return std::make_unique<TimedBackend>(std::move(inner), &times[i]); };
    auto model = Model::open(dir, options);
    ASSERT_TRUE(model.ok()) << model.status().message();
    SequenceState seq = model.value()->new_sequence();
    const std::vector<int32_t>& prompt = gc.value().prompt;
    ForwardChunk prefill{&seq, prompt, int64_t(prompt.size())};
    logits[i] = model.value()->forward(std::span<const ForwardChunk>(&prefill, 1))[0].logits;
    for (int step = 0; step < 2; ++step) {
      ForwardChunk decode{&seq, std::span<const int32_t>(&gc.value().continuation[size_t(step)], 1), 0};
      const std::vector<float> out = model.value()->forward(std::span<const ForwardChunk>(&decode, 1))[0].logits;
      logits[i].insert(logits[i].end(), out.begin(), out.end());
    }
  }
  EXPECT_FALSE(logits[0].empty());
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(times[0][size_t(OpKind::kLinear)].heads_on_kept_stream, 0);
  EXPECT_EQ(times[1][size_t(OpKind::kLinear)].heads_on_kept_stream, 3) << "the replayed prefill's head and both steps'";
}

// DEEPINFER_CUDA_WAIT end to end, with a block's tail in one call (the stream, and V4.1's pre, kept on the device
// between blocks): the attention and the tail return without waiting for their work (as-needed, the default), the
// calls after them queued behind it, or every call waits (every-call). The emulated runtime runs queued work only at
// a wait, so a call that rewrote staging still in use would change the bits. (A missing fetch of the kept stream or
// pre shows in GoldenCudaBlockTail, whose other run keeps nothing.)
TEST(GoldenCudaCallsThatDoNotWait, EqualEveryCallWaitingBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedTailPaths tail;
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma", "fused", "floats", 128}, {"v41-flash", "tiny-a", 1, "mma", "fused", "mirror"}},
                   "DEEPINFER_CUDA_WAIT", {"every-call", "as-needed"});
}

// DEEPINFER_CUDA_INDEX_SELECT=device end to end: each index source's top-k selection made on the device after the
// index scores (V4's I10; V4.1's steps 25-27: the candidate source's blocks, the other layers' mask of them) is the
// model's own selection, so the logits (main, MTP, DSpark) equal the host selection's bit for bit.
TEST(GoldenCudaIndexSelect, EqualsTheHostSelectionBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma"}, {"v41-flash", "tiny-a", 1, "mma"}}, "DEEPINFER_CUDA_INDEX_SELECT",
                   {"host", "device"}, [](const CudaRun (&runs)[2]) {
                     EXPECT_EQ(runs[0].times[size_t(OpKind::kIndexScores)].calls, runs[1].times[size_t(OpKind::kIndexScores)].calls)
                         << "the same index calls, selecting or not";
                   });
}

// DEEPINFER_CUDA_INDEX_SELECT=kept end to end, with q, the attention's output and the stream kept on the device (a
// block's tail in one call): each decode step's selections stay on the device, where the attention builds its
// compressed slots from them (V4's in the selection's order, V4.1's ascending, V4.1's reuse layers from the index
// source's), and the index call does not wait. The logits (main, MTP, DSpark) and the layer streams equal those with
// the selections brought back, bit for bit, through the packed and the mirrored rows. Calls of both kinds run in each
// case: V4's prompt chunks past Backend::kept_selection_extra_rows and its one 361-token prefill call (q not kept)
// bring theirs back, and so does V4.1's candidate source.
TEST(GoldenCudaKeptSelections, EqualTheSelectionsBroughtBackBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  const testing::ScopedTailPaths tail;
  expect_same_bits({{"v4-flash", "flash-tiny", 3, "mma", "fused", "packed", 128},
                    {"v4-flash", "pro-tiny", 3, "mma", "fused", "mirror"},
                    {"v41-flash", "tiny-a", 2, "mma", "fused", "mirror"},
                    {"v41-flash", "tiny-a", 3, "mma", "split", "packed"}},
                   "DEEPINFER_CUDA_INDEX_SELECT", {"device", "kept"}, [](const CudaRun (&runs)[2]) {
                     const OpTime& index = runs[1].times[size_t(OpKind::kIndexScores)];
                     const OpTime& attention = runs[1].times[size_t(OpKind::kSparseAttention)];
                     EXPECT_EQ(runs[0].times[size_t(OpKind::kIndexScores)].kept_selections, 0);
                     EXPECT_GT(index.kept_selections, 0) << "no selection was kept: the test compares device with device";
                     EXPECT_LT(index.kept_selections, index.calls) << "every call kept its selections: the other kind is not compared";
                     EXPECT_GT(attention.kept_selections, 0);
                     std::printf("  %lld of %lld index ops kept their selections, read by %lld of %lld attention tokens\n",
                                 (long long)index.kept_selections, (long long)index.calls, (long long)attention.kept_selections,
                                 (long long)attention.calls);
                   });
}

// Several sequences in one forward on the CUDA backend with every device path on (mirrored rows read packed, the
// selections kept, the chains, the device MoE and the tails): each sequence's logits equal its run alone bit for bit,
// through a batched prefill, decode steps of all sequences in one call (each token alone in its chunk, its rows placed
// without lookups: SparseAttentionParams::rows_unshared) and a late sequence whose prefill shares a forward with the
// others' decode steps. The kernels never mix tokens inside a sum, so no result depends on its batch. Each sequence has
// a twin in the same calls that asks for its draw alone (ForwardChunk::draw_only: Backend::linear_draws, the head's
// draws on the device; greedy, at a temperature for the second sequence (with top-p 0.9 over the whole vocabulary at
// odd rounds), with top-k for the third): draw_token of the sequence's logits row, with its log-probabilities (the
// first's at even rounds, the third's) token_logprobs of that row.
void expect_batched_sequences_match_each_alone(const std::string& family, const std::string& model_name) {
  const std::string dir = testing::golden_dir() + "/" + family + "/" + model_name;
  if (!std::filesystem::exists(dir + "/case-3.safetensors")) GTEST_SKIP() << "golden data not found: " << dir;
  SCOPED_TRACE(dir);
  const testing::ScopedCudaPaths paths("mma", "fused", "mirror", "packed");
  const testing::ScopedTailPaths tail;
  const testing::ScopedEnv select("DEEPINFER_CUDA_INDEX_SELECT", "kept");
  auto model = Model::open(dir, ModelOptions{.exact = false, .cuda = true});
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<GoldenCase> cases;
  for (int i = 1; i <= 3; ++i) {
    auto gc = load_golden_case(dir + "/case-" + std::to_string(i) + ".safetensors");
    ASSERT_TRUE(gc.ok()) << gc.status().message();
    cases.push_back(std::move(gc.value()));
  }
  const size_t n_decode = 8;
  const int64_t V = model.value()->config().vocab_size;
  std::vector<std::vector<float>> alone;
  for (const GoldenCase& gc : cases) {
    std::vector<int32_t> continuation(gc.continuation.begin(), gc.continuation.begin() + long(n_decode));
    alone.push_back(run_teacher_forced(*model.value(), gc.prompt, continuation, {}).logits);
  }
  std::vector<SequenceState> states, twins;
  for (size_t i = 0; i < cases.size(); ++i) {
    states.push_back(model.value()->new_sequence());
    twins.push_back(model.value()->new_sequence());
  }
  int64_t n_draws = 0, n_logprobs = 0;
  auto twin_draw = [](size_t round) { return TokenDraw{.temperature = 1.0f, .uniform = double((round * 37 + 11) % 100) / 100.0}; };
  std::vector<std::vector<float>> batched(cases.size());
  std::vector<size_t> step(cases.size(), 0);  // 0: the prefill is next
  for (size_t round = 0; round < n_decode + 3; ++round) {
    std::vector<ForwardChunk> chunks;
    std::vector<size_t> which;
    for (size_t i = 0; i < cases.size(); ++i) {
      if ((i == 2 && round < 2) || step[i] > n_decode) continue;  // the last sequence joins late
      chunks.push_back(testing::golden_step_chunk(states[i], cases[i], step[i]));
      which.push_back(i);
    }
    if (chunks.empty()) break;
    const size_t n_seqs = chunks.size();
    for (size_t k = 0; k < n_seqs; ++k) {
      chunks.push_back(testing::golden_step_chunk(twins[which[k]], cases[which[k]], step[which[k]]));
      chunks.back().draw_only = true;
      if (which[k] == 1) chunks.back().draw = twin_draw(round);
      if (which[k] == 1 && round % 2 == 1) chunks.back().draw.top_p = 0.9f;
      if (which[k] == 2) chunks.back().draw = {.temperature = 0.9f, .uniform = twin_draw(round).uniform, .top_k = 8, .min_p = 0.02f};
      if (which[k] == 0 && round % 2 == 0) chunks.back().draw.logprobs = 3;
      if (which[k] == 2) chunks.back().draw.logprobs = 20;
    }
    const std::vector<ChunkOutput> out = model.value()->forward(chunks);
    for (size_t k = 0; k < n_seqs; ++k) {
      batched[which[k]].insert(batched[which[k]].end(), out[k].logits.begin(), out[k].logits.end());
      ++step[which[k]];
      const ChunkOutput& twin = out[n_seqs + k];
      ASSERT_GE(out[k].logits.size(), size_t(V));
      EXPECT_TRUE(twin.logits.empty());
      const float* row = out[k].logits.data() + out[k].logits.size() - size_t(V);
      const TokenDraw& draw = chunks[n_seqs + k].draw;
      EXPECT_EQ(twin.drawn, draw_token(row, V, draw)) << "sequence " << which[k] << ", step " << step[which[k]] - 1;
      if (draw.logprobs >= 0) {
        TokenLogprob want;
        token_logprobs(row, V, twin.drawn, draw.logprobs, want);
        EXPECT_EQ(std::memcmp(&twin.logprob.logprob, &want.logprob, sizeof(float)), 0) << "sequence " << which[k];
        EXPECT_EQ(twin.logprob.top, want.top) << "sequence " << which[k];
        n_logprobs += 1;
      }
      ++n_draws;
    }
  }
  EXPECT_GT(n_draws, 0);
  EXPECT_GT(n_logprobs, 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(alone[i].size(), (n_decode + 1) * size_t(V));
    EXPECT_EQ(alone[i], batched[i]) << "sequence " << i;
  }
}

TEST(GoldenCudaBatching, BatchedSequencesMatchEachAlone) {
  DI_SKIP_WITHOUT_CUDA();
  expect_batched_sequences_match_each_alone("v4-flash", "pro-tiny");
  expect_batched_sequences_match_each_alone("v41-flash", "tiny-a");
}

}  // namespace
}  // namespace deepinfer
