// RowMirror: a row is copied the first time its stamp is placed and found in its slot after; a call that does
// not fit the free slots empties the arena first, never a row the call has placed.
#include "backend/row_mirror.h"

#include <gtest/gtest.h>

#include <set>

namespace deepinfer {
namespace {

TEST(RowMirror, CopiesARowOnceThenFindsItsSlot) {
  RowMirror m(8);
  m.begin_call(3);
  const RowMirror::Place a = m.place(11), b = m.place(12), a_again = m.place(11);
  EXPECT_TRUE(a.copy);
  EXPECT_TRUE(b.copy);
  EXPECT_FALSE(a_again.copy);
  EXPECT_EQ(a_again.slot, a.slot);
  EXPECT_NE(a.slot, b.slot);
  m.begin_call(2);
  EXPECT_FALSE(m.place(12).copy);
  const RowMirror::Place c = m.place(13);
  EXPECT_TRUE(c.copy);
  EXPECT_EQ(m.n_held(), 3);
  EXPECT_EQ(m.n_flushes(), 0);
}

TEST(RowMirror, ACallThatDoesNotFitEmptiesTheArenaFirst) {
  RowMirror m(4);
  m.begin_call(3);
  for (uint64_t s : {1, 2, 3}) EXPECT_TRUE(m.place(s).copy);
  m.begin_call(2);  // one slot free, two may be needed: emptied
  EXPECT_EQ(m.n_flushes(), 1);
  std::set<int64_t> slots;
  for (uint64_t s : {3, 4}) {
    const RowMirror::Place p = m.place(s);
    EXPECT_TRUE(p.copy) << "stamp " << s << " was dropped with the arena";
    EXPECT_TRUE(slots.insert(p.slot).second);
    EXPECT_LT(p.slot, m.capacity());
  }
  m.begin_call(4);  // 2 held, 2 free: emptied again, so that 4 new rows fit
  EXPECT_EQ(m.n_flushes(), 2);
  slots.clear();
  for (uint64_t s : {5, 6, 7, 8}) EXPECT_TRUE(slots.insert(m.place(s).slot).second);
  EXPECT_EQ(int64_t(slots.size()), m.capacity());
}

TEST(RowMirror, RefusesACallLargerThanTheArenaAndRowsBeyondTheCall) {
  RowMirror m(2);
  EXPECT_DEATH(m.begin_call(3), "do not fit");
  m.begin_call(1);
  m.place(1);
  EXPECT_DEATH(m.place(2), "more rows placed");
  EXPECT_DEATH({ m.begin_call(1); m.place(0); }, "needs a stamp");
}

}  // namespace
}  // namespace deepinfer
