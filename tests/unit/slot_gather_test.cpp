// SlotGather (the host side of the CUDA attention): three tokens whose lists mix float rows, packed rows of two
// formats, repeats and empty slots, of different lengths. Every slot's index must lead back to the very row it
// named (a float row by pointer, a packed row by its group's row pointer), each distinct row placed once, float
// rows first, groups in first-use order with consecutive rows and bytes, and the short lists padded with -1.
#include "backend/slot_gather.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
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

// A batched decode step gathered on host threads (SlotGather::gather with threads, every token rows_unshared): 50
// tokens of different list lengths, with float rows, window rings, packed rows of two formats (the second first used
// by a later token), kept selections or none, give the one thread's rows, groups, runs, slot rows and tables exactly.
// A page run two tokens hold is placed for each, and every slot and table entry still leads back to its row.
void expect_same_rows(const SlotGather& a, const SlotGather& b) {
  ASSERT_EQ(a.n_tokens(), b.n_tokens());
  ASSERT_EQ(a.n_slots(), b.n_slots());
  EXPECT_EQ(a.slot_rows(), b.slot_rows());
  EXPECT_EQ(a.float_rows(), b.float_rows());
  EXPECT_EQ(a.selection_tables(), b.selection_tables());
  for (int64_t t = 0; t < a.n_tokens(); ++t) EXPECT_EQ(a.selection_table_at(t), b.selection_table_at(t)) << "token " << t;
  EXPECT_EQ(a.n_rows(), b.n_rows());
  EXPECT_EQ(a.packed_bytes(), b.packed_bytes());
  ASSERT_EQ(a.packed_groups().size(), b.packed_groups().size());
  for (size_t i = 0; i < a.packed_groups().size(); ++i) {
    const SlotGather::PackedGroup& ga = a.packed_groups()[i];
    const SlotGather::PackedGroup& gb = b.packed_groups()[i];
    EXPECT_TRUE(ga.format == gb.format) << "group " << i;
    EXPECT_EQ(ga.rows, gb.rows) << "group " << i;
    EXPECT_EQ(ga.stamps, gb.stamps) << "group " << i;
    EXPECT_EQ(ga.first_row, gb.first_row) << "group " << i;
    EXPECT_EQ(ga.first_byte, gb.first_byte) << "group " << i;
    ASSERT_EQ(ga.runs.size(), gb.runs.size()) << "group " << i;
    for (size_t r = 0; r < ga.runs.size(); ++r) {
      EXPECT_EQ(ga.runs[r].stamps, gb.runs[r].stamps) << "group " << i << " run " << r;
      EXPECT_EQ(ga.runs[r].n, gb.runs[r].n) << "group " << i << " run " << r;
      EXPECT_EQ(ga.runs[r].first, gb.runs[r].first) << "group " << i << " run " << r;
    }
  }
}

// The row a gathered index names: a float row's address, or a packed row's, with its stamp.
std::pair<const void*, uint64_t> row_of(const SlotGather& gather, int32_t at) {
  if (at < 0) return {nullptr, 0};
  if (at < int64_t(gather.float_rows().size())) return {gather.float_rows()[size_t(at)], 0};
  for (const SlotGather::PackedGroup& g : gather.packed_groups()) {
    if (at < g.first_row + int64_t(g.rows.size())) return {g.rows[size_t(at - g.first_row)], g.stamps[size_t(at - g.first_row)]};
  }
  return {nullptr, ~uint64_t(0)};
}

TEST(SlotGather, BatchOnThreadsGathersAsOnOneThread) {
  const KvRowFormat window = kv_row_format(KvRowKind::kV4Kv, 64, 32), other = kv_row_format(KvRowKind::kV41Fp4, 64);
  constexpr int kTokens = 50, kRing = 6, kPageRows = 5;
  std::mt19937 rng(7);
  std::vector<float> fresh(size_t(kTokens * 64));
  std::vector<std::vector<uint8_t>> memory;  // each ring, page and other row its own allocation
  std::vector<std::vector<uint64_t>> stamps(kTokens);
  std::vector<PackedRowRun> rings(kTokens);
  std::vector<std::vector<PackedRowRun>> runs(kTokens);
  std::vector<KeptSelectionSlots> kept(kTokens);
  std::vector<std::vector<const float*>> rows(kTokens);
  std::vector<std::vector<PackedSlot>> packed(kTokens);
  std::vector<SparseAttentionParams> ps(kTokens);
  uint64_t next_stamp = 1;
  for (int t = 0; t < kTokens; ++t) {
    stamps[size_t(t)].resize(kRing + 3 * kPageRows);
    for (uint64_t& s : stamps[size_t(t)]) s = next_stamp++;
    memory.emplace_back(size_t(kRing * window.row_bytes));
    rings[size_t(t)] = {memory.back().data(), kRing, stamps[size_t(t)].data()};
    const uint8_t* ring = memory.back().data();
    const int n_selected = t % 3 == 1 ? 0 : 4;  // every third token without a kept selection
    const int n_window = 1 + int(rng() % kRing);
    for (int j = 0; j < n_window; ++j) {
      const int r = int(rng() % kRing);
      rows[size_t(t)].push_back(nullptr);
      packed[size_t(t)].push_back({ring + r * window.row_bytes, &window, stamps[size_t(t)][size_t(r)]});
    }
    rows[size_t(t)].push_back(&fresh[size_t(t * 64)]);
    packed[size_t(t)].push_back({});
    if (t >= 20 && t % 2 == 0) {  // a row of the other format, first in the second part
      memory.emplace_back(size_t(other.row_bytes));
      rows[size_t(t)].push_back(nullptr);
      packed[size_t(t)].push_back({memory.back().data(), &other, next_stamp++});
    }
    const int at = int(rows[size_t(t)].size());
    for (int j = 0; j < n_selected; ++j) {  // the selection's slots: not read
      rows[size_t(t)].push_back(nullptr);
      packed[size_t(t)].push_back({});
    }
    for (int page = 0; page < 3; ++page) {
      memory.emplace_back(size_t(kPageRows * window.row_bytes));
      runs[size_t(t)].push_back({memory.back().data(), kPageRows, &stamps[size_t(t)][size_t(kRing + page * kPageRows)]});
    }
    kept[size_t(t)] = {.selected = nullptr, .n = n_selected, .at = at, .ascending = t % 2 == 0, .format = &window,
                       .runs = runs[size_t(t)], .n_rows = 3 * kPageRows - int(rng() % kPageRows)};
    SparseAttentionParams& p = ps[size_t(t)];
    p.head_dim = 64;
    p.slots = rows[size_t(t)].data();
    p.packed = packed[size_t(t)].data();
    p.n_slots = int64_t(rows[size_t(t)].size());
    p.rows_unshared = true;
    p.window_ring = &rings[size_t(t)];
    if (n_selected) p.kept_selection = &kept[size_t(t)];
  }
  std::string error;
  const std::unique_ptr<Backend> threads = make_fast_backend(2, &error);
  ASSERT_TRUE(threads) << error;
  SlotGather alone, threaded;
  alone.gather(ps);
  threaded.gather(ps, threads.get());
  ASSERT_EQ(alone.packed_groups().size(), 2u);
  EXPECT_TRUE(alone.packed_groups()[0].format == window);
  expect_same_rows(alone, threaded);
  threaded.gather(std::span(ps).first(34), threads.get());  // a second gather starts over
  alone.gather(std::span(ps).first(34));
  expect_same_rows(alone, threaded);

  // Token 45 selects from token 2's pages: one thread places them once, the threads twice; every index still names
  // the same row.
  runs[45] = runs[2];
  kept[45].n_rows = kept[2].n_rows;
  alone.gather(ps);
  threaded.gather(ps, threads.get());
  EXPECT_EQ(threaded.n_rows(), alone.n_rows() + kept[2].n_rows);
  ASSERT_EQ(alone.n_slots(), threaded.n_slots());
  for (size_t i = 0; i < alone.slot_rows().size(); ++i) {
    ASSERT_EQ(row_of(alone, alone.slot_rows()[i]), row_of(threaded, threaded.slot_rows()[i])) << "slot " << i;
  }
  ASSERT_EQ(alone.selection_tables().size(), threaded.selection_tables().size());
  for (size_t i = 0; i < alone.selection_tables().size(); ++i) {
    ASSERT_EQ(row_of(alone, alone.selection_tables()[i]), row_of(threaded, threaded.selection_tables()[i])) << "table entry " << i;
  }
  // In a row mirror (on the threads), the run placed twice gets one slot a row: a second call finds every row and
  // copies nothing, its token's window row rewritten since is copied alone.
  RowMirror mirror(1 << 12);
  std::vector<int64_t> slots, copies;
  const SlotGather::PackedGroup& g = threaded.packed_groups()[0];
  mirror_group_slots(mirror, g, threads.get(), slots, copies);
  for (size_t i = 0; i < g.rows.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (g.stamps[k] == g.stamps[i]) {
        ASSERT_EQ(slots[k], slots[i]) << "rows " << k << " and " << i << " share a stamp";
      }
    }
  }
  stamps[45][0] = next_stamp++;
  threaded.gather(ps, threads.get());
  mirror_group_slots(mirror, threaded.packed_groups()[0], threads.get(), slots, copies);
  EXPECT_EQ(copies.size(), 1u) << "the rewritten ring row alone";
  threaded.gather(ps, threads.get());
  mirror_group_slots(mirror, threaded.packed_groups()[0], threads.get(), slots, copies);
  EXPECT_TRUE(copies.empty());
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
