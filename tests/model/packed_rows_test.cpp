// SparseAttentionParams::packed and IndexScoreParams::key_runs: for a backend that takes cache rows packed
// (the CUDA backend copies a row's bytes instead of four per value), the model hands window and compressed
// cache rows and index keys over packed. Here a wrapper around the fast CPU backend says it takes them,
// decodes every packed row with unpack_kv_row and passes the same op on: the logits must equal those of the
// model that decodes the rows itself, bit for bit, for V4 and V4.1 prefills, decode steps and a batched decode
// step, and packed rows must have been given.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "golden_util.h"
#include "model/kv_format.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

class DecodesPackedRows final : public Backend {
 public:
  DecodesPackedRows(std::unique_ptr<Backend> inner, int64_t* n_packed) : inner_(std::move(inner)), n_packed_(n_packed) {}
  const char* name() const override { return inner_->name(); }
  bool takes_packed_rows() const override { return true; }
  void linear(const LinearParams& p) override { inner_->linear(p); }
  void linears(std::span<const LinearParams> ps) override { inner_->linears(ps); }
  void hc_mix(const HcMixParams& p) override { inner_->hc_mix(p); }
  void index_scores(const IndexScoreParams& p) override { index_scores_batch({&p, 1}); }
  void index_scores_batch(std::span<const IndexScoreParams> ps) override {
    std::vector<IndexScoreParams> decoded(ps.begin(), ps.end());
    std::vector<std::vector<float>> keys(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      const IndexScoreParams& p = ps[i];
      if (!p.key_format) continue;
      ASSERT_EQ(p.keys, nullptr) << "keys given both as floats and packed";
      ASSERT_EQ(p.key_format->n_values, p.dim);
      keys[i].resize(size_t(p.n_keys * p.dim));
      int64_t j = 0;
      for (const PackedRowRun& run : p.key_runs) {
        for (int64_t r = 0; r < run.n_rows && j < p.n_keys; ++r, ++j) {
          unpack_kv_row(*p.key_format, run.rows + r * p.key_format->row_bytes, &keys[i][size_t(j * p.dim)]);
        }
      }
      ASSERT_EQ(j, p.n_keys) << "the key runs hold fewer rows than n_keys";
      decoded[i].keys = keys[i].data();
      decoded[i].key_format = nullptr;
      decoded[i].key_runs = {};
      *n_packed_ += p.n_keys;
    }
    inner_->index_scores_batch(decoded);
  }
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override { inner_->for_rows(n, body); }
  bool kernels_differ_by_token_kind() const override { return inner_->kernels_differ_by_token_kind(); }
  void set_token_kind(TokenKind kind) override { inner_->set_token_kind(kind); }
  void sparse_attention(const SparseAttentionParams& p) override { sparse_attentions({&p, 1}); }

  void sparse_attentions(std::span<const SparseAttentionParams> ps) override {
    std::vector<SparseAttentionParams> decoded(ps.begin(), ps.end());
    std::vector<std::vector<const float*>> slots(ps.size());
    std::vector<std::vector<float>> rows(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      const SparseAttentionParams& p = ps[i];
      rows[i].resize(size_t(p.n_slots * p.head_dim));
      for (int64_t j = 0; j < p.n_slots; ++j) {
        const PackedSlot packed = p.packed ? p.packed[j] : PackedSlot{};
        ASSERT_FALSE(p.slots[j] && packed.row) << "slot " << j << " is both a float row and a packed one";
        if (!packed.row) {
          slots[i].push_back(p.slots[j]);
          continue;
        }
        ASSERT_EQ(packed.format->n_values, p.head_dim);
        float* row = &rows[i][size_t(j * p.head_dim)];
        unpack_kv_row(*packed.format, packed.row, row);
        slots[i].push_back(row);
        ++*n_packed_;
      }
      decoded[i].slots = slots[i].data();
      decoded[i].packed = nullptr;
    }
    inner_->sparse_attentions(decoded);
  }

 private:
  std::unique_ptr<Backend> inner_;
  int64_t* n_packed_;
};

std::unique_ptr<Model> open_model(const std::string& dir, int64_t* n_packed) {
  ModelOptions options;
  if (n_packed) {
    options.wrap_backend = [n_packed](std::unique_ptr<Backend> fast) -> std::unique_ptr<Backend> {
      return std::make_unique<DecodesPackedRows>(std::move(fast), n_packed);
    };
  }
  auto model = Model::open(dir, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(model.value()) : nullptr;
}

// Prefill then teacher-forced decode steps of golden case `case_index`, on both models.
void expect_same_logits(const std::string& dir, int case_index, size_t n_decode) {
  const std::string path = dir + "/case-" + std::to_string(case_index) + ".safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "golden data not found: " << path;
  auto gc = load_golden_case(path);
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  const std::vector<int32_t> continuation(gc->continuation.begin(),
                                          gc->continuation.begin() + std::min(n_decode, gc->continuation.size()));
  int64_t n_packed = 0;
  auto plain = open_model(dir, nullptr);
  auto packed = open_model(dir, &n_packed);
  ASSERT_TRUE(plain && packed);
  const auto want = run_teacher_forced(*plain, gc->prompt, continuation, {});
  const auto got = run_teacher_forced(*packed, gc->prompt, continuation, {});
  EXPECT_EQ(got.logits, want.logits);
  EXPECT_GT(n_packed, 0) << "no cache row was handed over packed";
}

TEST(PackedRows, V4FlashMatchesDecodedRows) { expect_same_logits(testing::golden_dir() + "/v4-flash/flash-tiny", 2, 16); }
TEST(PackedRows, V4ProMatchesDecodedRows) { expect_same_logits(testing::golden_dir() + "/v4-flash/pro-tiny", 1, 16); }
TEST(PackedRows, V41MatchesDecodedRows) {
  for (int i : {1, 2}) expect_same_logits(testing::golden_dir() + "/v41-flash/tiny-a", i, 16);
}

// Two sequences prefilled in one forward, then decoded together: one attention call holds both sequences'
// cache rows.
TEST(PackedRows, BatchedDecodeMatchesDecodedRows) {
  for (const char* name : {"/v4-flash/pro-tiny", "/v41-flash/tiny-a"}) {
    const std::string dir = testing::golden_dir() + name;
    if (!std::filesystem::exists(dir + "/case-2.safetensors")) GTEST_SKIP() << "golden data not found in " << dir;
    std::vector<GoldenCase> cases;
    for (int i : {1, 2}) {
      auto gc = load_golden_case(dir + "/case-" + std::to_string(i) + ".safetensors");
      ASSERT_TRUE(gc.ok()) << gc.status().message();
      cases.push_back(std::move(gc.value()));
    }
    int64_t n_packed = 0;
    std::vector<std::vector<float>> logits[2];
    for (int variant = 0; variant < 2; ++variant) {
      auto model = open_model(dir, variant ? &n_packed : nullptr);
      ASSERT_TRUE(model);
      std::vector<SequenceState> states;
      for (size_t i = 0; i < cases.size(); ++i) states.push_back(model->new_sequence());
      for (size_t step = 0; step <= 8; ++step) {
        std::vector<ForwardChunk> chunks;
        for (size_t i = 0; i < cases.size(); ++i) chunks.push_back(testing::golden_step_chunk(states[i], cases[i], step));
        for (const ChunkOutput& out : model->forward(chunks)) logits[variant].push_back(out.logits);
      }
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    for (size_t k = 0; k < logits[0].size(); ++k) ASSERT_EQ(logits[0][k], logits[1][k]) << name << " output " << k;
    EXPECT_GT(n_packed, 0) << name;
  }
}

}  // namespace
}  // namespace deepinfer
