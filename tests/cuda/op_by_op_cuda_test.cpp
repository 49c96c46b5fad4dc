// The golden models op by op on the GPU: a backend that runs every op on the CUDA backend and on the exact
// reference backend with the same inputs, records how far the GPU's outputs are from the reference's, and
// hands the reference's outputs on. The run then follows the golden trajectory bit for bit (the reference
// path reproduces the goldens exactly), so every GPU op is checked on the real activations of a real
// checkpoint, one op at a time, where the end-to-end logits of these tiny chaotic models only bound the
// whole. Bound per op call: calc_diff (STYLE.md) < 1e-5, a few 1-ulp bf16 flips in a call but not a
// wrong value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_test_util.h"
#include "model/golden_util.h"
#include "model/teacher_forcing.h"

namespace deepinfer::testing {
namespace {

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::kBf16: return "bf16";
    case Epilogue::kF32: return "f32";
    case Epilogue::kF32AddBias: return "f32+bias";
    case Epilogue::kSqrtSoftplus: return "sqrt-softplus";
  }
  return "?";
}

// Per kind of op call (op, epilogue, shape): the calls, the worst calc_diff and the summed ulp histogram.
struct OpRecord {
  int64_t calls = 0, n = 0, n_differ = 0, n_1ulp = 0, n_2ulp = 0, n_more = 0;
  double worst_calc_diff = 0, worst_max_rel = 0;
  bool finite = true;
};

class ComparingBackend final : public Backend {
 public:
  ComparingBackend(std::unique_ptr<Backend> gpu, std::map<std::string, OpRecord>* records)
      : gpu_(std::move(gpu)), reference_(make_reference_backend()), records_(records) {}
  const char* name() const override { return "cuda-vs-reference"; }

  void linear(const LinearParams& p) override {
    std::vector<float> got(size_t(p.n_tokens * p.n_rows), -7.0f);
    LinearParams g = p;
    g.out = got.data();
    g.out_stride = p.n_rows;
    gpu_->linear(g);  // first: the reference may write in place over x
    reference_->linear(p);
    std::vector<float> ref(got.size());
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      std::copy_n(p.out + t * p.out_stride, p.n_rows, &ref[size_t(t * p.n_rows)]);
    }
    char key[160];
    std::snprintf(key, sizeof key, "linear %s %s [%lld x %lld]", dtype_name(p.weight->dtype), epilogue_name(p.epilogue),
                  (long long)p.n_rows, (long long)p.weight->n_in);
    record(key, ref, got, p.epilogue == Epilogue::kBf16);
  }

  void hc_mix(const HcMixParams& p) override {
    const std::vector<float> got = gpu_then_reference(p, &HcMixParams::out, size_t(p.n_tokens * p.n_mix), &Backend::hc_mix);
    char key[96];
    std::snprintf(key, sizeof key, "hc_mix [%lld x %lld]", (long long)p.n_mix, (long long)p.width);
    record(key, std::vector<float>(p.out, p.out + got.size()), got, false);
  }

  void sparse_attention(const SparseAttentionParams& p) override {
    const std::vector<float> got = gpu_then_reference(p, &SparseAttentionParams::out, size_t(p.n_heads * p.head_dim),
                                                      &Backend::sparse_attention);
    char key[96];
    std::snprintf(key, sizeof key, "sparse_attention %lldh x %lld%s", (long long)p.n_heads, (long long)p.head_dim,
                  p.block_running_max ? "" : " (global max)");
    record(key, std::vector<float>(p.out, p.out + got.size()), got, true);
  }

  void index_scores(const IndexScoreParams& p) override {
    const std::vector<float> got = gpu_then_reference(p, &IndexScoreParams::scores, size_t(p.n_keys), &Backend::index_scores);
    char key[96];
    std::snprintf(key, sizeof key, "index_scores %lldh x %lld", (long long)p.n_heads, (long long)p.dim);
    record(key, std::vector<float>(p.scores, p.scores + got.size()), got, true);
  }

 private:
  // The op on the GPU into a poisoned buffer of n values (p with its output redirected there), then on the
  // reference into p's own output: GPU first, as the reference may write in place over an input.
  template <class P>
  std::vector<float> gpu_then_reference(const P& p, float* P::*out, size_t n, void (Backend::*op)(const P&)) {
    std::vector<float> got(n, -7.0f);
    P g = p;
    g.*out = got.data();
    (gpu_.get()->*op)(g);
    (reference_.get()->*op)(p);
    return got;
  }

  void record(const std::string& key, const std::vector<float>& ref, const std::vector<float>& got, bool bf16) {
    const Diff d = compare(ref, got, bf16);
    OpRecord& r = (*records_)[key];
    ++r.calls;
    r.n += d.n;
    r.n_differ += d.n_differ;
    r.n_1ulp += d.n_1ulp;
    r.n_2ulp += d.n_2ulp;
    r.n_more += d.n_more;
    r.worst_calc_diff = std::max(r.worst_calc_diff, d.calc_diff);
    r.worst_max_rel = std::max(r.worst_max_rel, d.max_rel);
    r.finite = r.finite && d.finite;
  }

  std::unique_ptr<Backend> gpu_, reference_;
  std::map<std::string, OpRecord>* records_;
};

class OpByOpCuda : public ::testing::TestWithParam<GoldenCaseParam> {};

TEST_P(OpByOpCuda, EveryOpCloseToTheReference) {
  const GoldenCaseParam& param = GetParam();
  const std::string dir = param.model_dir(), case_path = param.case_path();
  if (!std::filesystem::exists(case_path)) GTEST_SKIP() << "golden case not found: " << case_path;
  DI_SKIP_WITHOUT_CUDA();
  const bool v41 = param.family == "v41-flash";
  std::map<std::string, OpRecord> records;
  const ScopedCudaPaths paths(param.linear_path, param.attention_path, param.kv_path);
  ModelOptions options;
  options.make_backend = [&records]() -> std::unique_ptr<Backend> {
    std::string error;
    auto gpu = make_cuda_backend(0, 0, &error);
    if (!gpu) return nullptr;
    return std::make_unique<ComparingBackend>(std::move(gpu), &records);
  };
  auto model = Model::open(dir, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto gc = load_golden_case(case_path);
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  TeacherForcedOptions tf{.prefill_chunk = 0, .mtp = !v41, .dspark = false};
  auto r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, tf);
  // The reference's outputs were handed on: the logits are the exact path's, i.e. the goldens'.
  const auto s = logit_stats(gc->logits, r.logits, model.value()->config().vocab_size);
  EXPECT_NEAR(s.max_abs, 0.0, 1e-3) << "the comparing backend did not follow the reference trajectory";

  std::printf("  %-52s %6s %12s %10s %9s %8s %8s\n", "op (kind, shape)", "calls", "worst calc", "max rel", "differ",
              "1ulp", ">1ulp");
  for (const auto& [key, rec] : records) {
    std::printf("  %-52s %6lld %12.3e %10.3e %9lld %8lld %8lld\n", key.c_str(), (long long)rec.calls, rec.worst_calc_diff,
                rec.worst_max_rel, (long long)rec.n_differ, (long long)rec.n_1ulp, (long long)(rec.n_2ulp + rec.n_more));
    EXPECT_TRUE(rec.finite) << key;
    EXPECT_LT(rec.worst_calc_diff, 1e-5) << key;
  }
  EXPECT_FALSE(records.empty());
}

INSTANTIATE_TEST_SUITE_P(Cases, OpByOpCuda,
                         ::testing::ValuesIn(on_every_path({{"v4-flash", "flash-tiny", 1},
                                                                   {"v4-flash", "flash-tiny", 2},
                                                                   {"v4-flash", "pro-tiny", 2},
                                                                   {"v41-flash", "tiny-a", 2}},
                                                                  /*packed_kv=*/false)),  // the comparing backend takes floats
                         golden_case_name);

}  // namespace
}  // namespace deepinfer::testing
