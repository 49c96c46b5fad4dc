// SlotGather (the host side of the CUDA attention): three tokens whose lists mix float rows, packed rows of two
// formats, repeats and empty slots, of different lengths. Every slot's index must lead back to the very row it
// named (a float row by pointer, a packed row by its group's row pointer), each distinct row placed once, float
// rows first, groups in first-use order with consecutive rows and bytes, and the short lists padded with -1.
#include "backend/slot_gather.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace deepinfer {
namespace {

TEST(SlotGather, EverySlotLeadsBackToItsRow) {
  const KvRowFormat window = kv_row_format(KvRowKind::kV41Kv, 64), compressed = kv_row_format(KvRowKind::kV41Fp4, 64);
  std::vector<float> fresh(5 * 64);
  std::vector<uint8_t> window_bytes(size_t(4 * window.row_bytes)), compressed_bytes(size_t(6 * compressed.row_bytes));
  const float* f[5];
  for (int i = 0; i < 5; ++i) f[i] = &fresh[size_t(i * 64)];
  auto w = [&](int i) { return PackedSlot{&window_bytes[size_t(i * window.row_bytes)], &window, uint64_t(100 + i)}; };
  auto c = [&](int i) { return PackedSlot{&compressed_bytes[size_t(i * compressed.row_bytes)], &compressed, uint64_t(200 + i)}; };
  const PackedSlot none{};
  // Token lists: what each slot names (a float row, a packed row, or nothing).
  struct Slot {
    const float* row;
    PackedSlot packed;
  };
  const std::vector<std::vector<Slot>> lists = {
      {{f[0], none}, {nullptr, c(2)}, {nullptr, w(1)}, {nullptr, none}, {f[1], none}, {nullptr, c(2)}},
      {{f[1], none}, {nullptr, w(1)}, {nullptr, w(3)}, {nullptr, c(0)}},
      {{nullptr, c(5)}, {f[4], none}, {nullptr, none}, {nullptr, w(0)}, {nullptr, c(0)}, {f[0], none}, {nullptr, w(3)},
       {nullptr, c(1)}},
  };
  std::vector<std::vector<const float*>> rows(lists.size());
  std::vector<std::vector<PackedSlot>> packed(lists.size());
  std::vector<SparseAttentionParams> ps;
  for (size_t t = 0; t < lists.size(); ++t) {
    for (const Slot& s : lists[t]) {
      rows[t].push_back(s.row);
      packed[t].push_back(s.packed);
    }
    SparseAttentionParams p;
    p.head_dim = 64;
    p.slots = rows[t].data();
    p.packed = packed[t].data();
    p.n_slots = int64_t(rows[t].size());
    ps.push_back(p);
  }
  SlotGather gather;
  gather.gather(ps);
  ASSERT_EQ(gather.n_tokens(), 3);
  ASSERT_EQ(gather.n_slots(), 8);
  const int64_t n_float = int64_t(gather.float_rows().size());
  EXPECT_EQ(n_float, 3);  // f0, f1, f4
  ASSERT_EQ(gather.packed_groups().size(), 2u);
  const SlotGather::PackedGroup& g0 = gather.packed_groups()[0];
  const SlotGather::PackedGroup& g1 = gather.packed_groups()[1];
  EXPECT_EQ(g0.format.kind, KvRowKind::kV41Fp4) << "groups come in first-use order";
  EXPECT_EQ(g0.rows.size(), 4u);  // c2, c0, c5, c1
  EXPECT_EQ(g1.rows.size(), 3u);  // w1, w3, w0
  EXPECT_EQ(g0.first_row, n_float);
  EXPECT_EQ(g1.first_row, n_float + 4);
  EXPECT_EQ(g0.first_byte, 0);
  EXPECT_EQ(g1.first_byte, 4 * compressed.row_bytes);
  EXPECT_EQ(gather.n_rows(), n_float + 7);
  EXPECT_EQ(gather.packed_bytes(), 4 * compressed.row_bytes + 3 * window.row_bytes);
  std::set<const void*> distinct;
  for (size_t t = 0; t < lists.size(); ++t) {
    for (int64_t j = 0; j < gather.n_slots(); ++j) {
      const int32_t at = gather.slot_rows()[t * 8 + size_t(j)];
      if (j >= int64_t(lists[t].size()) || (!lists[t][size_t(j)].row && !lists[t][size_t(j)].packed.row)) {
        EXPECT_EQ(at, -1) << "token " << t << " slot " << j << " is empty";
        continue;
      }
      ASSERT_GE(at, 0);
      ASSERT_LT(at, gather.n_rows());
      const Slot& s = lists[t][size_t(j)];
      if (s.row) {
        ASSERT_LT(at, n_float);
        EXPECT_EQ(gather.float_rows()[size_t(at)], s.row) << "token " << t << " slot " << j;
        distinct.insert(s.row);
      } else {
        const SlotGather::PackedGroup& g = at < g1.first_row ? g0 : g1;
        EXPECT_EQ(g.rows[size_t(at - g.first_row)], s.packed.row) << "token " << t << " slot " << j;
        EXPECT_EQ(g.stamps[size_t(at - g.first_row)], s.packed.stamp) << "token " << t << " slot " << j;
        distinct.insert(s.packed.row);
      }
    }
  }
  EXPECT_EQ(int64_t(distinct.size()), gather.n_rows()) << "each distinct row placed exactly once";

  gather.gather(std::span(ps).first(1));  // a second gather starts over
  EXPECT_EQ(gather.n_slots(), 6);
  EXPECT_EQ(gather.float_rows().size(), 2u);
  EXPECT_EQ(gather.n_rows(), 2 + 2);
}

// A token whose rows no other token of the call reads (SparseAttentionParams::rows_unshared: a decode step's) has them
// placed without a lookup: a row it shares anyway is placed again, and every slot still leads back to its row; the
// other tokens share theirs as before.
TEST(SlotGather, UnsharedTokensRowsArePlacedAnew) {
  const KvRowFormat format = kv_row_format(KvRowKind::kV41Kv, 64);
  std::vector<uint8_t> bytes(size_t(2 * format.row_bytes));
  std::vector<float> fresh(64);
  const float* rows[] = {fresh.data(), nullptr, nullptr};
  const PackedSlot packed[] = {{}, {bytes.data(), &format, 7}, {bytes.data() + format.row_bytes, &format, 8}};
  std::vector<SparseAttentionParams> ps(3, SparseAttentionParams{.head_dim = 64, .slots = rows, .n_slots = 3, .packed = packed});
  ps[1].rows_unshared = true;
  SlotGather gather;
  gather.gather(ps);
  EXPECT_EQ(gather.float_rows().size(), 2u) << "the fresh row, and again for the unshared token";
  ASSERT_EQ(gather.packed_groups().size(), 1u);
  const SlotGather::PackedGroup& g = gather.packed_groups()[0];
  EXPECT_EQ(g.rows.size(), 4u);
  for (int t = 0; t < 3; ++t) {
    const int32_t* at = &gather.slot_rows()[size_t(t * 3)];
    EXPECT_EQ(gather.float_rows()[size_t(at[0])], fresh.data()) << "token " << t;
    for (int j = 1; j < 3; ++j) {
      EXPECT_EQ(g.rows[size_t(at[j] - g.first_row)], packed[j].row) << "token " << t << " slot " << j;
      EXPECT_EQ(g.stamps[size_t(at[j] - g.first_row)], packed[j].stamp) << "token " << t << " slot " << j;
    }
  }
  EXPECT_EQ(std::vector<int32_t>(gather.slot_rows().begin(), gather.slot_rows().begin() + 3),
            std::vector<int32_t>(gather.slot_rows().begin() + 6, gather.slot_rows().end()))
      << "the shared tokens share their rows";
  EXPECT_NE(gather.slot_rows()[4], gather.slot_rows()[1]) << "the unshared token's row placed anew";
}

// A decode token's window ring (SparseAttentionParams::window_ring, with rows_unshared): the ring is placed whole as a
// run of its group (its stamps recorded for the mirror), and each window slot leads back to its ring row by its place
// there; a slot outside the ring (a compressed row) and a float row are placed as before.
TEST(SlotGather, WindowRingPlacedWholeAsARun) {
  const KvRowFormat format = kv_row_format(KvRowKind::kV41Kv, 64);
  std::vector<uint8_t> ring_bytes(size_t(5 * format.row_bytes)), other(size_t(format.row_bytes));
  std::vector<uint64_t> stamps = {71, 72, 73, 74, 75};
  auto ring_row = [&](int i) { return &ring_bytes[size_t(i * format.row_bytes)]; };
  const PackedRowRun ring{ring_bytes.data(), 5, stamps.data()};
  std::vector<float> fresh(64);
  // Window slots at ring rows 3, 4, 0 (wrapped), then the fresh row, then a compressed row.
  const float* rows[] = {nullptr, nullptr, nullptr, fresh.data(), nullptr};
  const PackedSlot packed[] = {{ring_row(3), &format, 74}, {ring_row(4), &format, 75}, {ring_row(0), &format, 71}, {}, {other.data(), &format, 99}};
  SparseAttentionParams p{.head_dim = 64, .slots = rows, .n_slots = 5, .packed = packed};
  p.rows_unshared = true;
  p.window_ring = &ring;
  SlotGather gather;
  gather.gather({&p, 1});
  ASSERT_EQ(gather.packed_groups().size(), 1u);
  const SlotGather::PackedGroup& g = gather.packed_groups()[0];
  EXPECT_EQ(g.rows.size(), 6u) << "the ring's 5 rows and the compressed row";
  ASSERT_EQ(g.runs.size(), 1u);
  EXPECT_EQ(g.runs[0].stamps, stamps.data());
  EXPECT_EQ(g.runs[0].n, 5);
  for (int j : {0, 1, 2, 4}) {
    const int32_t at = gather.slot_rows()[size_t(j)];
    EXPECT_EQ(g.rows[size_t(at - g.first_row)], packed[j].row) << "slot " << j;
    EXPECT_EQ(g.stamps[size_t(at - g.first_row)], packed[j].stamp) << "slot " << j;
  }
  EXPECT_EQ(gather.float_rows()[size_t(gather.slot_rows()[3])], fresh.data());
  // A batched step's tokens, each with its own ring.
  const int n_tokens = 40;
  std::vector<std::vector<uint8_t>> ring_memory(n_tokens, ring_bytes);
  std::vector<PackedRowRun> rings;
  std::vector<std::vector<PackedSlot>> lists;
  for (int t = 0; t < n_tokens; ++t) {
    rings.push_back({ring_memory[size_t(t)].data(), 5, stamps.data()});
    lists.push_back({packed, packed + 5});
    lists.back()[2].row = ring_memory[size_t(t)].data();  // ring row 0 of its own ring
  }
  std::vector<SparseAttentionParams> ps(n_tokens, p);
  for (int t = 0; t < n_tokens; ++t) {
    ps[size_t(t)].window_ring = &rings[size_t(t)];
    ps[size_t(t)].packed = lists[size_t(t)].data();
  }
  gather.gather(ps);
  const SlotGather::PackedGroup& gb = gather.packed_groups()[0];
  EXPECT_EQ(gb.runs.size(), size_t(n_tokens));
  for (int t = 0; t < n_tokens; ++t) {
    const int32_t at = gather.slot_rows()[size_t(t * 5 + 2)];
    EXPECT_EQ(gb.rows[size_t(at - gb.first_row)], ring_memory[size_t(t)].data()) << "token " << t;
  }
}

// Kept selections (SparseAttentionParams::kept_selection): every row a token's selection may name is gathered as its
// table, in the runs' order; a run seen before with as many rows is placed once, one of another length anew; the
// selection's slots are left empty whatever the list holds there; a token without one has no table.
TEST(SlotGather, KeptSelectionsGatherEveryRowTheyMayName) {
  const KvRowFormat format = kv_row_format(KvRowKind::kV4Kv, 64, 32);
  std::vector<uint8_t> bytes(size_t(10 * format.row_bytes));
  std::vector<uint64_t> stamps(10);
  for (size_t i = 0; i < stamps.size(); ++i) stamps[i] = 300 + i;
  auto row = [&](int i) { return &bytes[size_t(i * format.row_bytes)]; };
  // Token 0 sees rows 0-6 in two pages; token 1 none; token 2 rows 0-7 (8 of its runs' 10: the second page's first 4).
  const PackedRowRun runs0[] = {{row(0), 4, &stamps[0]}, {row(4), 3, &stamps[4]}};
  const PackedRowRun runs2[] = {{row(0), 4, &stamps[0]}, {row(4), 6, &stamps[4]}};
  std::vector<float> fresh(64);
  const float* slots0[] = {fresh.data(), nullptr, nullptr, nullptr};
  const PackedSlot packed0[] = {{}, {row(9), &format, 309}, {}, {}};  // slot 1 is the selection's: not read
  const float* slots1[] = {fresh.data(), nullptr};
  const PackedSlot packed1[] = {{}, {row(5), &format, 305}};
  const float* slots2[] = {nullptr, nullptr, nullptr};
  const PackedSlot packed2[] = {{row(2), &format, 302}, {}, {}};
  const KeptSelectionSlots kept0{.selected = nullptr, .n = 2, .at = 1, .ascending = false, .format = &format, .runs = runs0, .n_rows = 7};
  const KeptSelectionSlots kept2{.selected = nullptr, .n = 2, .at = 1, .ascending = true, .format = &format, .runs = runs2, .n_rows = 8};
  std::vector<SparseAttentionParams> ps(3);
  ps[0] = {.head_dim = 64, .slots = slots0, .n_slots = 4, .packed = packed0, .kept_selection = &kept0};
  ps[1] = {.head_dim = 64, .slots = slots1, .n_slots = 2, .packed = packed1};
  ps[2] = {.head_dim = 64, .slots = slots2, .n_slots = 3, .packed = packed2, .kept_selection = &kept2};
  SlotGather gather;
  gather.gather(ps);
  ASSERT_EQ(gather.packed_groups().size(), 1u);
  const SlotGather::PackedGroup& g = gather.packed_groups()[0];
  auto packed_row = [&](int32_t at) { return at >= g.first_row ? g.rows[size_t(at - g.first_row)] : nullptr; };
  auto stamp = [&](int32_t at) { return at >= g.first_row ? g.stamps[size_t(at - g.first_row)] : 0; };
  EXPECT_EQ(gather.slot_rows()[1], -1) << "the selection's slot is the device's";
  EXPECT_EQ(gather.slot_rows()[2], -1);
  EXPECT_EQ(packed_row(gather.slot_rows()[1 * 4 + 1]), row(5));
  EXPECT_EQ(packed_row(gather.slot_rows()[2 * 4 + 0]), row(2));
  EXPECT_EQ(gather.selection_table_at(1), -1);
  ASSERT_EQ(gather.selection_table_at(0), 0);
  ASSERT_EQ(gather.selection_table_at(2), 7);
  const std::vector<int32_t>& tables = gather.selection_tables();
  ASSERT_EQ(tables.size(), 15u);
  for (int r = 0; r < 7; ++r) {
    EXPECT_EQ(packed_row(tables[size_t(r)]), row(r)) << "token 0, row " << r;
    EXPECT_EQ(stamp(tables[size_t(r)]), stamps[size_t(r)]) << "token 0, row " << r;
  }
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(packed_row(tables[size_t(7 + r)]), row(r)) << "token 2, row " << r;
    EXPECT_EQ(stamp(tables[size_t(7 + r)]), stamps[size_t(r)]) << "token 2, row " << r;
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(tables[size_t(7 + r)], tables[size_t(r)]) << "the first page's run, placed once";
  EXPECT_NE(tables[7 + 4], tables[4]) << "the second page's run at another length, placed anew";
  EXPECT_EQ(g.rows.size(), 13u) << "token 0's 7 rows, token 1's row 5, token 2's second run (4) and its row 2";
}

// mirror_group_slots (the CUDA backend's attention with DEEPINFER_CUDA_KV=mirror): the group's runs are recorded where
// their rows lie, the slots equal those of a row-by-row lookup, a repeated call finds every run whole and copies
// nothing, a rewritten row (a new stamp in its page) is looked up and copied again while the other runs stay found,
// and a call that empties the arena places and remembers every row again.
void expect_mirror_slots_of_runs_equal_the_row_lookups(Backend* threads) {
  const KvRowFormat format = kv_row_format(KvRowKind::kV4Kv, 64, 32);
  std::vector<uint8_t> bytes(size_t(12 * format.row_bytes));
  std::vector<uint64_t> stamps(12);
  for (size_t i = 0; i < stamps.size(); ++i) stamps[i] = 500 + i;
  auto row = [&](int i) { return &bytes[size_t(i * format.row_bytes)]; };
  const PackedRowRun runs[] = {{row(0), 4, &stamps[0]}, {row(4), 4, &stamps[4]}, {row(8), 4, &stamps[8]}};
  const float* slots[] = {nullptr, nullptr, nullptr};
  const PackedSlot packed[] = {{row(2), &format, 502}, {}, {}};  // a window slot naming a row a run holds too
  const KeptSelectionSlots kept{.selected = nullptr, .n = 2, .at = 1, .ascending = false, .format = &format, .runs = runs, .n_rows = 11};
  const SparseAttentionParams p{.head_dim = 64, .slots = slots, .n_slots = 3, .packed = packed, .kept_selection = &kept};
  SlotGather gather;
  RowMirror mirror(64), by_row(64);
  std::vector<int64_t> got, want, copies, want_copies;
  auto call = [&] {
    gather.gather({&p, 1});
    const SlotGather::PackedGroup& g = gather.packed_groups()[0];
    mirror_group_slots(mirror, g, threads, got, copies);
    want.clear();
    for (uint64_t s : g.stamps) want.push_back(by_row.find(s));
    by_row.place_missing(g.stamps, want, want_copies);
  };
  call();
  const SlotGather::PackedGroup& g = gather.packed_groups()[0];
  ASSERT_EQ(g.runs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(g.runs[i].first, int64_t(1 + 4 * i)) << "after the window slot's row";
    EXPECT_EQ(g.runs[i].n, i < 2 ? 4 : 3);
    EXPECT_EQ(g.runs[i].stamps, &stamps[4 * i]);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(copies, want_copies);
  EXPECT_EQ(copies.size(), 11u) << "11 distinct rows, row 2 named twice";
  EXPECT_EQ(mirror.n_remembered_runs(), 3);
  call();
  EXPECT_EQ(got, want);
  EXPECT_TRUE(copies.empty()) << "every run found whole";
  stamps[5] = 900;  // row 5 rewritten
  call();
  EXPECT_EQ(got, want);
  EXPECT_EQ(copies, (std::vector<int64_t>{6})) << "row 5 alone, at its place in the group";
  call();
  EXPECT_TRUE(copies.empty()) << "its run remembered with the new stamp";
  // The last run rewritten call after call until its new rows no longer fit the arena: the call that empties it
  // copies every row again, those of the runs it had found whole too, and remembers every run anew.
  while (mirror.n_flushes() == 0) {
    for (size_t i = 8; i < 11; ++i) stamps[i] += 1000;
    call();
    ASSERT_EQ(got, want);
    ASSERT_EQ(copies, want_copies);
  }
  EXPECT_EQ(by_row.n_flushes(), 1);
  EXPECT_EQ(copies.size(), 11u) << "every distinct row copied again after the flush";
  call();
  EXPECT_EQ(got, want);
  EXPECT_TRUE(copies.empty()) << "every run remembered after the flush";
}

// On the calling thread, and with the runs found and the rows looked up on two host threads.
TEST(SlotGather, MirrorSlotsOfRunsEqualTheRowLookups) {
  expect_mirror_slots_of_runs_equal_the_row_lookups(nullptr);
  std::string error;
  const std::unique_ptr<Backend> threads = make_fast_backend(2, &error);
  ASSERT_TRUE(threads) << error;
  expect_mirror_slots_of_runs_equal_the_row_lookups(threads.get());
}

TEST(SlotGatherDeathTest, PackedRowOfAnotherWidthIsCaught) {
  const KvRowFormat wide = kv_row_format(KvRowKind::kV41Kv, 128);
  std::vector<uint8_t> bytes(size_t(wide.row_bytes));
  const float* rows[1] = {nullptr};
  const PackedSlot packed[1] = {{bytes.data(), &wide}};
  SparseAttentionParams p;
  p.head_dim = 64;
  p.slots = rows;
  p.packed = packed;
  p.n_slots = 1;
  SlotGather gather;
  EXPECT_DEATH(gather.gather({&p, 1}), "head_dim 64");
}

}  // namespace
}  // namespace deepinfer
