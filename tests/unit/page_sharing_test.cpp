// SharedPageCounter: full pages a sequence shares with an older one are found once per step; partly filled tail
// pages never count (the next append copies them away).
#include "engine/page_sharing.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

SequenceState state_on(const std::shared_ptr<PagePool>& pool) {
  SequenceState s;
  s.layers.resize(1);
  s.layers[0].compressor.ratio = 4;
  s.layers[0].compressor.rows = PagedRows(pool, 16);  // 4 rows per 64-byte page
  return s;
}

void grow(SequenceState& s, int n_rows) {
  for (int i = 0; i < n_rows; ++i) ASSERT_TRUE(s.layers[0].compressor.rows.append().ok());
}

TEST(SharedPageCounter, CountsFullPagesAnOlderSequenceHolds) {
  auto pool = std::make_shared<PagePool>(64, 64);
  SequenceState older = state_on(pool);
  grow(older, 10);                // pages: 4 + 4 full, 2-row tail
  SequenceState newer = older;    // shares all three pages
  grow(newer, 1);                 // copies the tail: the two full pages stay shared
  SequenceState other = state_on(pool);
  grow(other, 8);
  SharedPageCounter counter;
  counter.begin_step();
  EXPECT_EQ(counter.see(older), 0);
  EXPECT_EQ(counter.see(newer), 2);
  EXPECT_EQ(counter.see(other), 0);
  SequenceState snapshot = older;  // a prefix-cache match: counted without marking
  EXPECT_EQ(counter.count(snapshot), 2);
  counter.begin_step();            // a new step forgets what was seen
  EXPECT_EQ(counter.count(snapshot), 0);
  EXPECT_EQ(counter.see(newer), 0);
  EXPECT_EQ(counter.see(older), 2);
}

}  // namespace
}  // namespace deepinfer
