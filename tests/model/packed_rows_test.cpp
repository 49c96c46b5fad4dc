// SparseAttentionParams::packed and IndexScoreParams::key_runs: for a backend that takes cache rows packed
// (the CUDA backend copies a row's bytes instead of four per value), the model hands window and compressed
// cache rows and index keys over packed. Here a wrapper around the fast CPU backend says it takes them,
// decodes every packed row with unpack_kv_row and passes the same op on: the logits must equal those of the
// model that decodes the rows itself, bit for bit, for V4 and V4.1 prefills, decode steps and a batched decode
// step, and packed rows must have been given. The wrapper also holds the model to its row stamps (PackedSlot::stamp):
// every packed row has one, and a stamp seen again names the same bytes, also across rollbacks (rows rewritten at
// the same places), window rings that wrap, and copied sequences that then diverge (a shared tail page copied).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "golden_util.h"
#include "model/kv_format.h"
#include "model/teacher_forcing.h"

namespace deepinfer {
namespace {

// What a row stamp promises: one stamp, one row content, in every call of the model.
struct StampLedger {
  std::unordered_map<uint64_t, std::vector<uint8_t>> bytes;  // the first content seen with each stamp
  int64_t n_repeats = 0;  // rows whose stamp was seen before (what a device mirror would not copy again)

  void check(uint64_t stamp, const uint8_t* row, int64_t row_bytes) {
    ASSERT_NE(stamp, 0u) << "a packed row without a stamp";
    const auto [it, fresh] = bytes.try_emplace(stamp, row, row + row_bytes);
    if (fresh) return;
    ++n_repeats;
    ASSERT_EQ(int64_t(it->second.size()), row_bytes) << "stamp " << stamp << " names rows of two formats";
    EXPECT_TRUE(std::equal(it->second.begin(), it->second.end(), row)) << "stamp " << stamp << " names two row contents";
  }
};

class DecodesPackedRows final : public Backend {
 public:
  DecodesPackedRows(std::unique_ptr<Backend> inner, int64_t* n_packed, StampLedger* ledger)
      : inner_(std::move(inner)), n_packed_(n_packed), ledger_(ledger) {}
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
        ASSERT_NE(run.stamps, nullptr) << "a key run without stamps";
        for (int64_t r = 0; r < run.n_rows && j < p.n_keys; ++r, ++j) {
          const uint8_t* row = run.rows + r * p.key_format->row_bytes;
          ledger_->check(run.stamps[r], row, p.key_format->row_bytes);
          unpack_kv_row(*p.key_format, row, &keys[i][size_t(j * p.dim)]);
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
        ledger_->check(packed.stamp, packed.row, packed.format->row_bytes);
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
  StampLedger* ledger_;
};

// n_packed: nullptr for the model that decodes rows itself, else the wrapped one (with its own ledger, or `ledger`).
std::unique_ptr<Model> open_model(const std::string& dir, int64_t* n_packed, StampLedger* ledger = nullptr) {
  ModelOptions options;
  if (n_packed) {
    auto own = std::make_shared<StampLedger>();
    options.wrap_backend = [n_packed, ledger, own](std::unique_ptr<Backend> fast) -> std::unique_ptr<Backend> {
      return std::make_unique<DecodesPackedRows>(std::move(fast), n_packed, ledger ? ledger : own.get());
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

// Row stamps through what rewrites cache rows: a prompt long enough for the window ring to wrap, decode steps,
// a rollback and different tokens at the rolled-back positions, and a copied sequence (as a prefix-cache
// snapshot) that then goes on apart from the original. Every stamp seen twice must name the same bytes.
void expect_stamps_name_one_content(const std::string& dir, int case_index) {
  const std::string path = dir + "/case-" + std::to_string(case_index) + ".safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "golden data not found: " << path;
  auto gc = load_golden_case(path);
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  int64_t n_packed = 0;
  StampLedger ledger;
  auto model = open_model(dir, &n_packed, &ledger);
  ASSERT_TRUE(model);
  auto feed = [&](SequenceState& seq, std::vector<int32_t> ids, bool prompt) {
    ForwardChunk chunk{&seq, ids, prompt ? int64_t(ids.size()) : 0};
    model->forward(std::span<const ForwardChunk>(&chunk, 1));
  };
  SequenceState a = model->new_sequence();
  feed(a, gc->prompt, true);
  for (int32_t id : {5, 6, 7, 8, 9}) feed(a, {id}, false);
  const int64_t n = int64_t(gc->prompt.size()) + 5;
  model->rollback(a, n - 3);
  for (int32_t id : {11, 12, 13, 14}) feed(a, {id}, false);  // positions n - 3 .. n: new rows where old ones were
  SequenceState b = a;  // shares a's pages, tail included
  for (int32_t id : {21, 22, 23, 24, 25, 26, 27, 28}) feed(a, {id}, false);
  for (int32_t id : {31, 32, 33, 34, 35, 36, 37, 38}) feed(b, {id}, false);
  EXPECT_GT(n_packed, 0);
  EXPECT_GT(ledger.n_repeats, 0) << "no stamp was seen twice";
}

TEST(PackedRows, StampsNameOneContentV4) { expect_stamps_name_one_content(testing::golden_dir() + "/v4-flash/flash-tiny", 3); }
TEST(PackedRows, StampsNameOneContentV41) { expect_stamps_name_one_content(testing::golden_dir() + "/v41-flash/tiny-a", 1); }

}  // namespace
}  // namespace deepinfer
