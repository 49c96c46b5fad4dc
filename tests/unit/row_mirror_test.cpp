// RowMirror: a row is copied the first time its stamp is placed and found in its slot after; rows of one stamp
// share a slot; a call whose missing rows do not fit the free slots empties the arena first (and copies all of
// its rows), never otherwise. A run of rows remembered (remember_run) is found while its stamps are the same (row by
// row where some changed) and the arena has not been emptied since.
#include "backend/row_mirror.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace deepinfer {
namespace {

// One call: find() for every row, then place_missing(); the slots, and which rows were copied.
std::vector<int64_t> place(RowMirror& m, const std::vector<uint64_t>& stamps, std::vector<int64_t>& copies) {
  std::vector<int64_t> slots;
  for (uint64_t s : stamps) slots.push_back(m.find(s));
  m.place_missing(stamps, slots, copies);
  return slots;
}

TEST(RowMirror, CopiesARowOnceThenFindsItsSlot) {
  RowMirror m(8);
  std::vector<int64_t> copies;
  const std::vector<int64_t> first = place(m, {11, 12, 11}, copies);
  EXPECT_EQ(copies, (std::vector<int64_t>{0, 1}));  // the second 11 shares the first's slot
  EXPECT_EQ(first[2], first[0]);
  EXPECT_NE(first[0], first[1]);
  const std::vector<int64_t> second = place(m, {12, 13}, copies);
  EXPECT_EQ(second[0], first[1]);
  EXPECT_EQ(copies, (std::vector<int64_t>{1}));
  EXPECT_EQ(m.find(13), second[1]);
  EXPECT_EQ(m.find(14), -1);
  EXPECT_EQ(m.n_held(), 3);
  EXPECT_EQ(m.n_flushes(), 0);
}

TEST(RowMirror, EmptiesTheArenaOnlyWhenTheMissingRowsDoNotFit) {
  RowMirror m(4);
  std::vector<int64_t> copies;
  place(m, {1, 2, 3}, copies);
  place(m, {1, 2, 3, 4}, copies);  // three held, one missing, one free: no flush
  EXPECT_EQ(m.n_flushes(), 0);
  EXPECT_EQ(copies, (std::vector<int64_t>{3}));
  const std::vector<int64_t> slots = place(m, {4, 5}, copies);  // one missing, none free: emptied
  EXPECT_EQ(m.n_flushes(), 1);
  EXPECT_EQ(copies, (std::vector<int64_t>{0, 1})) << "a flush drops the held rows of the call too";
  EXPECT_NE(slots[0], slots[1]);
  for (int64_t s : slots) EXPECT_LT(s, m.capacity());
  EXPECT_EQ(m.find(1), -1);
  EXPECT_EQ(m.n_held(), 2);
}

TEST(RowMirror, ManyStampsKeepDistinctSlots) {
  RowMirror m(1000);
  std::vector<uint64_t> stamps;
  for (uint64_t s = 1; s <= 1000; ++s) stamps.push_back(s * 1024);  // stamps that share low bits
  std::vector<int64_t> copies;
  const std::vector<int64_t> slots = place(m, stamps, copies);
  EXPECT_EQ(copies.size(), 1000u);
  EXPECT_EQ(std::set<int64_t>(slots.begin(), slots.end()).size(), 1000u);
  for (size_t k = 0; k < stamps.size(); ++k) EXPECT_EQ(m.find(stamps[k]), slots[k]);
}

// The stamp index grows with the rows held: a mirror as large as a 2 GB arena of 68 B keys (~30M slots here, whose
// index sized by the capacity would take 1 GB) costs nothing up front, and rows placed across the index's growths,
// and after a flush, are found in their slots.
TEST(RowMirror, IndexGrowsWithTheRowsHeld) {
  RowMirror big(int64_t(30) << 20);
  std::vector<int64_t> copies;
  std::vector<uint64_t> all;
  std::vector<int64_t> all_slots;
  for (int call = 0; call < 4; ++call) {  // 3000, 6000, 9000 and 12000 rows held: the index grows twice
    std::vector<uint64_t> stamps;
    for (int i = 0; i < 3000; ++i) stamps.push_back(uint64_t(call * 3000 + i + 1) * 4096);
    const std::vector<int64_t> slots = place(big, stamps, copies);
    EXPECT_EQ(copies.size(), stamps.size());
    all.insert(all.end(), stamps.begin(), stamps.end());
    all_slots.insert(all_slots.end(), slots.begin(), slots.end());
  }
  EXPECT_EQ(big.n_held(), 12000);
  EXPECT_EQ(std::set<int64_t>(all_slots.begin(), all_slots.end()).size(), all.size());
  for (size_t k = 0; k < all.size(); ++k) ASSERT_EQ(big.find(all[k]), all_slots[k]) << "row " << k;
  // A small mirror emptied by a call larger than its index has room for: the call's rows all placed and found.
  RowMirror small(5000);
  std::vector<uint64_t> first(4000), second(4500);
  for (size_t i = 0; i < first.size(); ++i) first[i] = i + 1;
  for (size_t i = 0; i < second.size(); ++i) second[i] = 100000 + i;
  place(small, first, copies);
  const std::vector<int64_t> slots = place(small, second, copies);
  EXPECT_EQ(small.n_flushes(), 1);
  EXPECT_EQ(copies.size(), second.size());
  for (size_t k = 0; k < second.size(); ++k) ASSERT_EQ(small.find(second[k]), slots[k]);
  EXPECT_EQ(small.find(first[0]), -1);
}

// place_missing over ranges (the rows a caller looked up; the others have their slots): the same slots and copies as
// over the whole call, the rows outside the ranges unread; where the missing rows do not fit, every row of the call
// is placed, those outside the ranges too.
TEST(RowMirror, PlacesTheMissingRowsOfRangesAsOfTheWholeCall) {
  RowMirror ranged(6), whole(6);
  std::vector<int64_t> copies, whole_copies;
  place(ranged, {1, 2}, copies);
  place(whole, {1, 2}, whole_copies);
  const std::vector<uint64_t> stamps = {1, 3, 2, 4, 3};
  std::vector<int64_t> slots = {ranged.find(1), -1, -9, -1, -1};  // row 2's -9: outside the ranges, not read
  const RowMirror::RowRange ranges[] = {{1, 2}, {3, 5}};
  ranged.place_missing(stamps, slots, ranges, copies);
  EXPECT_EQ(slots[2], -9);
  slots[2] = ranged.find(2);
  EXPECT_EQ(slots, place(whole, stamps, whole_copies));
  EXPECT_EQ(copies, whole_copies);
  EXPECT_EQ(copies, (std::vector<int64_t>{1, 3})) << "stamp 3's second row shares the first's slot";

  std::vector<int64_t> flushed = {ranged.find(1), -1, -1, -1};  // 3 missing, 2 free: the arena is emptied
  const RowMirror::RowRange last[] = {{1, 4}};
  ranged.place_missing(std::vector<uint64_t>{1, 5, 6, 7}, flushed, last, copies);
  EXPECT_EQ(ranged.n_flushes(), 1);
  EXPECT_EQ(copies, (std::vector<int64_t>{0, 1, 2, 3})) << "row 0, outside the ranges, copied again after the flush";
  EXPECT_EQ(ranged.find(1), flushed[0]);
}

TEST(RowMirror, RefusesACallLargerThanTheArenaAndAnUnstampedRow) {
  RowMirror m(2);
  std::vector<int64_t> copies, slots = {-1, -1, -1};
  EXPECT_DEATH(m.place_missing(std::vector<uint64_t>{1, 2, 3}, slots, copies), "do not fit");
  EXPECT_DEATH(m.find(0), "needs a stamp");
}

TEST(RowMirror, RemembersARunUntilItsStampsChangeOrTheArenaEmpties) {
  RowMirror m(6);
  std::vector<int64_t> copies;
  std::vector<uint64_t> page = {21, 22, 23};  // a page's stamps, at the address the run is remembered by
  const std::vector<int64_t> slots = place(m, page, copies);
  std::vector<int64_t> found(3, -7);
  EXPECT_EQ(m.find_run(page.data(), 3, found.data()), 0) << "not remembered yet";
  EXPECT_EQ(found, (std::vector<int64_t>{-7, -7, -7}));
  m.remember_run(page.data(), 3, slots.data());
  EXPECT_EQ(m.find_run(page.data(), 3, found.data()), 3);
  EXPECT_EQ(found, slots);
  EXPECT_EQ(m.find_run(page.data(), 2, found.data()), 0) << "a run of another length";
  EXPECT_EQ(m.find_run(page.data() + 1, 2, found.data()), 0) << "a run at another address";
  page[1] = 29;  // the row rewritten (or the page given to another sequence): the other rows still found
  std::fill(found.begin(), found.end(), -7);
  EXPECT_EQ(m.find_run(page.data(), 3, found.data()), 2);
  EXPECT_EQ(found, (std::vector<int64_t>{slots[0], -7, slots[2]}));
  page[1] = 22;
  EXPECT_EQ(m.find_run(page.data(), 3, found.data()), 3);
  // update_run rewrites a run remembered with as many rows, in place, and nothing else.
  page[2] = 24;
  const std::vector<int64_t> updated = {slots[0], slots[1], place(m, {24}, copies)[0]};
  EXPECT_FALSE(m.update_run(page.data(), 2, updated.data())) << "remembered with 3 rows";
  EXPECT_FALSE(m.update_run(page.data() + 1, 2, updated.data() + 1)) << "not remembered at that address";
  EXPECT_TRUE(m.update_run(page.data(), 3, updated.data()));
  EXPECT_EQ(m.find_run(page.data(), 3, found.data()), 3);
  EXPECT_EQ(found, updated);
  EXPECT_EQ(m.n_remembered_runs(), 1);
  page[2] = 23;
  EXPECT_TRUE(m.update_run(page.data(), 3, slots.data()));
  place(m, {31, 32, 33, 34}, copies);  // four missing, two free: the arena is emptied
  EXPECT_EQ(m.n_flushes(), 1);
  EXPECT_EQ(m.find_run(page.data(), 3, found.data()), 0) << "its rows are gone from the arena";
  EXPECT_EQ(m.n_remembered_runs(), 0);
  std::vector<int64_t> unplaced = {0, -1, 2};
  EXPECT_DEATH(m.remember_run(page.data(), 3, unplaced.data()), "");
  // Runs remembered past the arena's rows (stale ones among them): all forgotten, the new one kept.
  std::vector<uint64_t> a = {41, 42}, b = {31, 32, 33, 34, 41};  // the arena holds 31-34 since the flush, then a
  const std::vector<int64_t> slots_a = place(m, a, copies);
  m.remember_run(a.data(), 2, slots_a.data());
  const std::vector<int64_t> slots_b = place(m, b, copies);
  EXPECT_TRUE(copies.empty());
  m.remember_run(b.data(), 5, slots_b.data());  // 2 + 5 rows remembered, 6 in the arena
  EXPECT_EQ(m.n_remembered_runs(), 1);
  EXPECT_EQ(m.find_run(a.data(), 2, found.data()), 0);
  std::vector<int64_t> found_b(5);
  EXPECT_EQ(m.find_run(b.data(), 5, found_b.data()), 5);
  EXPECT_EQ(found_b, slots_b);
  EXPECT_EQ(m.n_flushes(), 1);
}

}  // namespace
}  // namespace deepinfer
