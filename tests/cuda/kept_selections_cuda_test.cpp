// Selections kept on the device (IndexSelectParams::keep_selected, DEEPINFER_CUDA_INDEX_SELECT=kept) and the
// attention's compressed slots built there from them (SparseAttentionParams::kept_selection, launch_selected_slots),
// against the same backend's selections brought back (DEEPINFER_CUDA_INDEX_SELECT=device) and the slot lists the
// model builds from them on the host: the same outputs bit for bit, and the host's selection arrays never written.
// A batched decode step's tokens: each its own sequence (window rows as floats, compressed rows packed in pages of
// stamped rows, index keys), some selecting every row they see, one seeing none.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_test_util.h"
#include "model/kv_format.h"
#include "model/ops.h"

namespace deepinfer::testing {
namespace {

constexpr int64_t kHeads = 4, kHeadDim = 128, kRopeDim = 64, kIndexHeads = 4, kIndexDim = 64, kPageRows = 16;

// One decode token and its sequence's rows.
struct Token {
  int64_t n_window = 0, n_rows = 0, n_select = 0;
  std::vector<float> window;            // [n_window, kHeadDim]
  std::vector<uint8_t> rows;            // [n_rows, row_bytes] packed compressed rows
  std::vector<uint64_t> stamps;         // [n_rows]
  std::vector<PackedRowRun> runs;       // rows in pages of kPageRows
  std::vector<float> keys;              // [n_rows, kIndexDim]
  std::vector<float> iq, iw;            // the indexer's query [kIndexHeads, kIndexDim] and weights [kIndexHeads]
  std::vector<float> q;                 // [kHeads, kHeadDim]
  std::vector<float> cos_sin;           // [kRopeDim]: the token's angles (AT4)
  int64_t n_slots() const { return (n_window + n_select + 63) / 64 * 64; }
};

struct Step {
  KvRowFormat format = kv_row_format(KvRowKind::kV4Kv, kHeadDim, kRopeDim);
  std::vector<Token> tokens;
  std::vector<float> sink;
};

// Tokens of (window rows, compressed rows, selected rows); stamps from next_stamp on, each row its own.
Step random_step(std::mt19937& rng, const std::vector<std::array<int64_t, 3>>& shapes, uint64_t& next_stamp) {
  Step s;
  s.sink = random_bf16_values(rng, kHeads, 1.0f);
  const RopeTable rope = make_rope_table(int(kRopeDim), 10000.0);
  for (const auto& [n_window, n_rows, n_select] : shapes) {
    Token& t = s.tokens.emplace_back();
    t.n_window = n_window;
    t.n_rows = n_rows;
    t.n_select = n_select;
    t.window = random_bf16_values(rng, n_window * kHeadDim, 1.0f);
    std::vector<float> values = random_bf16_values(rng, n_rows * kHeadDim, 1.0f);
    t.rows.resize(size_t(n_rows * s.format.row_bytes));
    for (int64_t r = 0; r < n_rows; ++r) {
      float* row = &values[size_t(r * kHeadDim)];
      qdq_fp8(row, kHeadDim - kRopeDim, s.format.block);
      EXPECT_TRUE(pack_kv_row(s.format, row, &t.rows[size_t(r * s.format.row_bytes)]));
      t.stamps.push_back(next_stamp++);
    }
    for (int64_t r = 0; r < n_rows; r += kPageRows) {
      t.runs.push_back({&t.rows[size_t(r * s.format.row_bytes)], std::min(kPageRows, n_rows - r), &t.stamps[size_t(r)]});
    }
    // Keys that repeat a few distinct rows, so that scores tie (ties go to the lower index).
    const std::vector<float> distinct = random_bf16_values(rng, 5 * kIndexDim, 1.0f);
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t d = int64_t(rng() % 5u);
      t.keys.insert(t.keys.end(), &distinct[size_t(d * kIndexDim)], &distinct[size_t((d + 1) * kIndexDim)]);
    }
    t.iq = random_bf16_values(rng, kIndexHeads * kIndexDim, 1.0f);
    t.iw = random_bf16_values(rng, kIndexHeads, 0.25f);
    t.q = random_bf16_values(rng, kHeads * kHeadDim, 1.0f);
    t.cos_sin.resize(size_t(kRopeDim));
    rope.cos_sin(std::uniform_int_distribution<int64_t>(0, 100000)(rng), t.cos_sin.data());
  }
  return s;
}

// The step's index selections on `gpu`, kept there or into `selected` (each token's n_select, -5 before).
void select(Backend& gpu, const Step& s, bool keep, std::vector<std::vector<int64_t>>& selected) {
  selected.assign(s.tokens.size(), {});
  std::vector<IndexSelectParams> ops;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const Token& t = s.tokens[i];
    selected[i].assign(size_t(t.n_select), -5);
    ops.push_back({.score = {.q = t.iq.data(), .weights = t.iw.data(), .n_heads = kIndexHeads, .dim = kIndexDim,
                             .keys = t.keys.data(), .n_keys = t.n_rows},
                   .n_select = t.n_select, .selected = selected[i].data(), .keep_selected = keep});
  }
  ASSERT_TRUE(gpu.index_select_batch(ops)) << "the device declined to select";
}

// The step's attention on `gpu` over each token's window rows and its selected compressed rows (ascending: in
// ascending row order, as V4.1 lists them): built on the device from the kept selections, or here from `selected`.
// Every token's slots in blocks of 64 with a running maximum each (V4's), so that which rows share a block, and so
// their order, shows in the outputs.
// With keep_output, each output rotated back and kept in `out` (fetched by the caller); else written there. With
// unshared, every token is marked alone in its chunk (SparseAttentionParams::rows_unshared), as a batched decode step's
// are: a batch of SlotGather::kThreadedTokens or more is then gathered on the host's threads.
void attend(Backend& gpu, const Step& s, bool kept, bool ascending, const std::vector<std::vector<int64_t>>& selected,
            bool keep_output, std::vector<float>& out, bool unshared = false) {
  const size_t T = s.tokens.size();
  std::vector<std::vector<const float*>> slots(T);
  std::vector<std::vector<PackedSlot>> packed(T);
  std::vector<KeptSelectionSlots> kept_slots(T);
  std::vector<HeadRope> out_rope;
  std::vector<SparseAttentionParams> ps;
  out.assign(T * size_t(kHeads * kHeadDim), -7.0f);
  for (size_t i = 0; i < T; ++i) {
    const Token& t = s.tokens[i];
    for (int64_t j = 0; j < t.n_window; ++j) slots[i].push_back(&t.window[size_t(j * kHeadDim)]);
    packed[i].assign(size_t(t.n_window), {});
    std::vector<int64_t> order = selected[i];
    if (ascending && !kept) std::sort(order.begin(), order.end());
    for (int64_t r : order) {
      slots[i].push_back(nullptr);
      if (kept) {
        packed[i].push_back({});
      } else {
        EXPECT_TRUE(r >= 0 && r < t.n_rows) << "a selection brought back names row " << r;
        packed[i].push_back({&t.rows[size_t(r * s.format.row_bytes)], &s.format, t.stamps[size_t(r)]});
      }
    }
    slots[i].resize(size_t(t.n_slots()), nullptr);
    packed[i].resize(size_t(t.n_slots()));
    kept_slots[i] = {.selected = selected[i].data(), .n = t.n_select, .at = t.n_window, .ascending = ascending,
                     .format = &s.format, .runs = t.runs, .n_rows = t.n_rows};
    out_rope.push_back({kHeads, kHeadDim, kRopeDim, t.cos_sin.data(), true, false, 0.0});
  }
  for (size_t i = 0; i < T; ++i) {
    const Token& t = s.tokens[i];
    ps.push_back({.q = t.q.data(), .n_heads = kHeads, .head_dim = kHeadDim, .slots = slots[i].data(), .n_slots = t.n_slots(),
                  .sink = s.sink.data(), .softmax_scale = 1.0 / std::sqrt(double(kHeadDim)), .block_running_max = true,
                  .out = &out[i * size_t(kHeads * kHeadDim)], .packed = packed[i].data(),
                  .out_rope = keep_output ? &out_rope[i] : nullptr, .out_kept_array = keep_output ? out.data() : nullptr,
                  .out_kept_floats = keep_output ? int64_t(out.size()) : 0,
                  .kept_selection = kept && t.n_select > 0 ? &kept_slots[i] : nullptr, .rows_unshared = unshared});
  }
  gpu.sparse_attentions(ps);
}

// The outputs the model's path gives: the selections brought back, the slots listed on the host, AT4 on the host
// where keep_output.
std::vector<float> brought_back_output(const Step& s, bool ascending, bool keep_output) {
  const ScopedEnv select_path("DEEPINFER_CUDA_INDEX_SELECT", "device");
  const std::unique_ptr<Backend> gpu = make_chain_backend("device");
  std::vector<std::vector<int64_t>> selected;
  std::vector<float> out;
  if (!gpu) return out;
  select(*gpu, s, false, selected);
  attend(*gpu, s, false, ascending, selected, false, out);
  if (keep_output) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      rope_rotate_heads(&out[i * size_t(kHeads * kHeadDim)] + kHeadDim - kRopeDim, kHeads, kHeadDim, s.tokens[i].cos_sin.data(),
                        kRopeDim / 2, true);
    }
  }
  return out;
}

bool all_sentinels(const std::vector<std::vector<int64_t>>& selected) {
  for (const std::vector<int64_t>& s : selected) {
    if (std::any_of(s.begin(), s.end(), [](int64_t v) { return v != -5; })) return false;
  }
  return true;
}

// (window rows, compressed rows, selected rows) per token: more rows than selected, as many, none, a window only;
// selections across a 64-slot block's end.
const std::vector<std::array<int64_t, 3>> kShapes = {{5, 40, 12}, {0, 12, 12}, {64, 70, 33}, {3, 0, 0}, {17, 100, 64}, {50, 90, 40}};

TEST(KeptSelectionsCuda, SlotsBuiltOnTheDeviceEqualTheHostsBitForBit) {
  DI_SKIP_WITHOUT_CUDA();
  for (const std::string& attention : attention_paths()) {
    for (const char* kv : {"packed", "mirror"}) {
      const ScopedCudaPaths paths("mma", attention, kv);
      for (bool ascending : {false, true}) {
        SCOPED_TRACE(attention + ", " + kv + (ascending ? ", ascending" : ", selection order"));
        std::mt19937 rng(900);
        uint64_t next_stamp = 1;
        const Step s = random_step(rng, kShapes, next_stamp);
        const std::vector<float> want = brought_back_output(s, ascending, false);
        const ScopedEnv select_path("DEEPINFER_CUDA_INDEX_SELECT", "kept");
        const std::unique_ptr<Backend> gpu = make_chain_backend("device");
        ASSERT_TRUE(gpu && gpu->keeps_selections());
        std::vector<std::vector<int64_t>> selected;
        std::vector<float> got;
        ASSERT_NO_FATAL_FAILURE(select(*gpu, s, true, selected));
        EXPECT_TRUE(all_sentinels(selected)) << "a kept selection was written on the host";
        attend(*gpu, s, true, ascending, selected, false, got);
        EXPECT_EQ(n_differing(want, got), 0) << "of " << want.size() << " outputs";
        EXPECT_FALSE(std::all_of(got.begin(), got.end(), [](float v) { return v == -7.0f; }));
      }
    }
  }
}

// A batched decode step of 40 tokens, each alone in its chunk, so that the host's threads gather its rows
// (SlotGather::gather_threaded): the same bits as the tokens gathered on one thread, with the selections brought
// back or kept.
TEST(KeptSelectionsCuda, ABatchGatheredOnTheHostsThreadsGivesTheSameBits) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(920);
  std::vector<std::array<int64_t, 3>> shapes;
  for (int i = 0; i < 40; ++i) {
    const int64_t n_rows = int64_t(rng() % 90);
    shapes.push_back({int64_t(rng() % 70), n_rows, n_rows ? 1 + int64_t(rng() % uint64_t(n_rows)) : 0});
  }
  uint64_t next_stamp = 1;
  const Step s = random_step(rng, shapes, next_stamp);
  for (const char* kv : {"packed", "mirror"}) {
    SCOPED_TRACE(kv);
    const ScopedCudaPaths paths("mma", "fused", kv);
    const std::vector<float> want = brought_back_output(s, true, false);
    for (bool kept : {false, true}) {
      SCOPED_TRACE(kept ? "selections kept" : "selections brought back");
      const ScopedEnv select_path("DEEPINFER_CUDA_INDEX_SELECT", kept ? "kept" : "device");
      const std::unique_ptr<Backend> gpu = make_chain_backend("device");
      ASSERT_TRUE(gpu);
      std::vector<std::vector<int64_t>> selected;
      std::vector<float> got;
      ASSERT_NO_FATAL_FAILURE(select(*gpu, s, kept, selected));
      attend(*gpu, s, kept, true, selected, false, got, true);
      EXPECT_EQ(n_differing(want, got), 0) << "of " << want.size() << " outputs";
    }
  }
}

TEST(KeptSelectionsCuda, IndexCallsThatKeepTheirSelectionsDoNotWaitYetKeepTheirInputs) {
  DI_SKIP_WITHOUT_CUDA();
  // Two layers' index selections and attentions back to back, the attentions keeping their outputs: neither call
  // waits, so the second index call must not rewrite the staging the first one's queued copies still read (under the
  // emulated runtime they read it only at the next wait), and the second attention must read the second selections.
  for (const char* kv : {"packed", "mirror"}) {
    SCOPED_TRACE(kv);
    const ScopedCudaPaths paths("mma", "fused", kv);
    std::mt19937 rng(910);
    uint64_t next_stamp = 1;
    const Step first = random_step(rng, kShapes, next_stamp);
    const Step second = random_step(rng, {{9, 50, 20}, {0, 30, 7}}, next_stamp);
    const std::vector<float> want_first = brought_back_output(first, false, true);
    const std::vector<float> want_second = brought_back_output(second, true, true);
    const ScopedEnv select_path("DEEPINFER_CUDA_INDEX_SELECT", "kept");
    const std::unique_ptr<Backend> gpu = make_chain_backend("device");
    ASSERT_TRUE(gpu && gpu->keeps_selections());
    // Twice: the first round grows the backend's buffers, and a buffer that grows waits for the device first.
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      std::vector<std::vector<int64_t>> first_selected, second_selected;
      std::vector<float> first_out, second_out;
      ASSERT_NO_FATAL_FAILURE(select(*gpu, first, true, first_selected));
      attend(*gpu, first, true, false, first_selected, true, first_out);
      ASSERT_NO_FATAL_FAILURE(select(*gpu, second, true, second_selected));
      attend(*gpu, second, true, true, second_selected, true, second_out);
      EXPECT_TRUE(all_sentinels(first_selected) && all_sentinels(second_selected)) << "a kept selection was written on the host";
      gpu->fetch_kept(first_out.data(), int64_t(first_out.size()));
      gpu->fetch_kept(second_out.data(), int64_t(second_out.size()));
      EXPECT_EQ(n_differing(want_first, first_out), 0) << "of the first layer's " << want_first.size() << " outputs";
      EXPECT_EQ(n_differing(want_second, second_out), 0) << "of the second layer's " << want_second.size() << " outputs";
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
