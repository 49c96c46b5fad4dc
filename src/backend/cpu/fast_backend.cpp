// The fast CPU backend: fp32 accumulation, SIMD kernels chosen at run time (cpu_features.h), weights
// decoded in registers or per-thread tiles (never expanded in memory), rows split across threads so each
// core streams its own slice of the weights. Same rounding points as the reference (outputs rounded to
// bf16/fp32 as the op says); only the accumulation order and precision differ. Owns the thread pool and
// the per-op workspaces; the op drivers live in linear_cpu.cpp and attention_cpu.cpp.
#include "backend/cpu/fast_backend.h"

#include <malloc.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/linear_cpu.h"
#include "core/status.h"
#include "backend/cpu/worker_pool.h"

namespace deepinfer {

namespace {

// A prefill allocates and frees activation buffers of tens of MB in every layer (the mHC streams of 512
// tokens alone are 32 MB). glibc serves blocks that large with mmap and unmaps them on free, so every layer
// faulted in and zeroed fresh pages again: 560K minor faults in a 512-token prefill of the 4-layer benchmark
// model, 3.6% of its time in the kernel's clear_page. Served from the heap, which is never trimmed, the
// pages stay mapped: the heap grows once to the largest forward pass's working set and is reused after
// (220K faults, most of them the weights' own). Process-wide, set once by the first fast backend. (Threads other
// than the main one allocate from glibc's per-thread heaps, 64 MB each at most: their larger blocks are still
// mmapped.)
void keep_freed_memory_mapped() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
  });
}

class FastBackend final : public Backend {
 public:
  // Generated tokens run every op on `level`; a prompt's linear ops run on `prompt_level` (its other ops on
  // `level` too).
  FastBackend(int n_threads, SimdLevel level, SimdLevel prompt_level)
      : pool_(n_threads), level_(level), prompt_level_(prompt_level), name_(std::string("fast-") + simd_level_name(level)) {
    if (prompt_level != level) name_ += std::string("+") + simd_level_name(prompt_level) + "-prompts";
    keep_freed_memory_mapped();
  }
  const char* name() const override { return name_.c_str(); }

  void linear(const LinearParams& p) override { cpu::linear_fast(p, linear_level(), pool_, linear_ws_); }
  void linears(std::span<const LinearParams> ps) override { cpu::linears_fast(ps, linear_level(), pool_, batch_ws_); }
  void hc_mix(const HcMixParams& p) override { cpu::hc_mix_fast(p, level_, pool_); }
  void sparse_attention(const SparseAttentionParams& p) override {
    DI_CHECK_MSG(!p.packed, "packed attention slots for a backend that does not take them");
    cpu::sparse_attention_fast(p, level_, &pool_, attention_ws_);
  }
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override {
    for (const SparseAttentionParams& p : ps) DI_CHECK_MSG(!p.packed, "packed attention slots for a backend that does not take them");
    cpu::sparse_attentions_fast(ps, level_, pool_, attention_ws_);
  }
  void index_scores(const IndexScoreParams& p) override {
    DI_CHECK_MSG(!p.key_format, "packed index keys for a backend that does not take them");
    cpu::index_scores_fast(p, level_, pool_, index_ws_);
  }
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override {
    if (n > 1) pool_.parallel_for(n, 1, body);
    else body(0, n);
  }
  bool kernels_differ_by_token_kind() const override { return prompt_level_ != level_; }
  void set_token_kind(TokenKind kind) override { kind_ = kind; }

 private:
  SimdLevel linear_level() const { return kind_ == TokenKind::kPrompt ? prompt_level_ : level_; }

  cpu::WorkerPool pool_;
  SimdLevel level_;
  SimdLevel prompt_level_;
  TokenKind kind_ = TokenKind::kGenerated;
  std::string name_;
  cpu::LinearWorkspace linear_ws_;
  std::vector<cpu::LinearWorkspace> batch_ws_;  // linears(): one per op
  cpu::AttentionWorkspace attention_ws_;
  cpu::IndexWorkspace index_ws_;
};

}  // namespace

std::unique_ptr<Backend> make_fast_backend_with_level(int n_threads, SimdLevel level) {
  return make_fast_backend_with_levels(n_threads, level, level);
}

std::unique_ptr<Backend> make_fast_backend_with_levels(int n_threads, SimdLevel level, SimdLevel prompt_level) {
  for (SimdLevel l : {level, prompt_level}) {
    DI_CHECK_MSG(simd_level_supported(l), std::string("SIMD level not supported: ") + simd_level_name(l));
  }
  return std::make_unique<FastBackend>(n_threads, level, prompt_level);
}

// DEEPINFER_SIMD forces one kernel family for every token (benchmarks compare them; outputs differ between
// families in the last bits, since their sums run in different orders).
std::unique_ptr<Backend> make_fast_backend(int n_threads, std::string* error) {
  const char* forced = std::getenv("DEEPINFER_SIMD");
  if (forced == nullptr || *forced == '\0') {
    return make_fast_backend_with_levels(n_threads, best_simd_level(), best_prompt_simd_level());
  }
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16,
                          SimdLevel::kAvx512Bf16Quant, SimdLevel::kAmxBf16}) {
    if (std::string(forced) != simd_level_name(level)) continue;
    if (simd_level_supported(level)) return make_fast_backend_with_level(n_threads, level);
    *error = std::string("DEEPINFER_SIMD=") + forced + ": this CPU lacks the instructions of that kernel family";
    return nullptr;
  }
  *error = std::string("DEEPINFER_SIMD=") + forced + ": unknown kernel family (scalar, avx2, avx512, avx512bf16, avx512bf16quant, amxbf16)";
  return nullptr;
}

}  // namespace deepinfer
