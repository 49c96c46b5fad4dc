// The KV page pool and the paged row lists on it: reference counts, sharing on copy, copy-on-write of a shared
// tail page, truncation releasing pages, exhaustion reported as an error (nothing changed) instead of a crash,
// and the rows' write stamps.
#include "model/page_pool.h"

#include <gtest/gtest.h>

#include <cstring>

#include "model/paged_rows.h"

namespace deepinfer {
namespace {

// Appends one row whose bytes are all `value`.
void append(PagedRows& rows, uint8_t value) {
  Result<uint8_t*> slot = rows.append();
  ASSERT_TRUE(slot.ok()) << slot.status().message();
  std::memset(slot.value(), value, size_t(rows.row_bytes()));
}

uint8_t first_byte(const PagedRows& rows, int64_t j) { return rows.row(j)[0]; }

TEST(PagePool, CountsReferencesAndRecyclesFreedPages) {
  PagePool pool(64, 3);
  const int32_t a = pool.allocate().value(), b = pool.allocate().value();
  EXPECT_EQ(pool.stats().n_used, 2);
  EXPECT_EQ(pool.n_free(), 1);
  pool.retain(a);
  EXPECT_EQ(pool.refcount(a), 2);
  EXPECT_EQ(pool.stats().n_shared, 1);
  pool.release(a);
  EXPECT_EQ(pool.stats().n_shared, 0);
  uint8_t* b_data = pool.data(b);
  pool.release(b);
  EXPECT_EQ(pool.stats().n_used, 1);
  const int32_t c = pool.allocate().value();  // the freed page (and its memory) comes back
  EXPECT_EQ(c, b);
  EXPECT_EQ(pool.data(c), b_data);
  pool.release(a);
  pool.release(c);
  EXPECT_EQ(pool.stats().n_used, 0);
}

TEST(PagePool, ExhaustionIsAnErrorNotACrash) {
  PagePool pool(64, 2);
  ASSERT_TRUE(pool.allocate().ok());
  ASSERT_TRUE(pool.allocate().ok());
  const Result<int32_t> none = pool.allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("exhausted"), std::string::npos);
  // A row list on a full pool reports the error and stays as it was.
  auto full = std::make_shared<PagePool>(64, 1);
  PagedRows rows(full, 32);  // 2 rows per page
  append(rows, 1);
  append(rows, 2);
  Result<uint8_t*> third = rows.append();
  EXPECT_FALSE(third.ok());
  EXPECT_EQ(rows.n_rows(), 2);
  EXPECT_EQ(rows.pages_to_append(1), 1);
}

TEST(PagedRows, RowsLiveInPagesOfRowsPerPageRows) {
  auto pool = std::make_shared<PagePool>(100, PagePool::kUnlimited);
  PagedRows rows(pool, 30);  // 3 rows per page, 10 bytes of slack
  EXPECT_EQ(rows.rows_per_page(), 3);
  for (int i = 0; i < 7; ++i) append(rows, uint8_t(i));
  EXPECT_EQ(rows.n_pages(), 3);
  EXPECT_EQ(pool->stats().n_used, 3);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(first_byte(rows, i), i);
  EXPECT_EQ(rows.row(4), rows.row(3) + 30);  // same page
  EXPECT_EQ(rows.contiguous_rows(4), 2);
  EXPECT_EQ(rows.contiguous_rows(6), 1);
}

TEST(PagedRows, CopiesSharePagesAndCopyASharedTailOnAppend) {
  auto pool = std::make_shared<PagePool>(64, 16);
  PagedRows a(pool, 16);  // 4 rows per page
  for (int i = 0; i < 6; ++i) append(a, uint8_t(i));  // one full page, one tail page with 2 rows
  PagedRows snapshot = a;                              // shares both pages, copies no bytes
  EXPECT_EQ(pool->stats().n_used, 2);
  EXPECT_EQ(pool->stats().n_shared, 2);
  EXPECT_EQ(snapshot.row(0), a.row(0));
  EXPECT_EQ(a.pages_to_append(1), 1);  // the shared tail is copied first
  append(a, 60);
  EXPECT_EQ(pool->stats().n_used, 3);
  EXPECT_EQ(pool->stats().n_shared, 1);  // the full page only
  EXPECT_EQ(snapshot.row(0), a.row(0));
  EXPECT_NE(snapshot.row(4), a.row(4));
  EXPECT_EQ(first_byte(a, 4), 4);  // the copy kept the rows before the new one
  EXPECT_EQ(first_byte(a, 5), 5);
  EXPECT_EQ(first_byte(a, 6), 60);
  EXPECT_EQ(snapshot.n_rows(), 6);
  // The snapshot appends too: its tail is its own now, written in place.
  EXPECT_EQ(snapshot.pages_to_append(1), 0);
  append(snapshot, 70);
  EXPECT_EQ(pool->stats().n_used, 3);
  EXPECT_EQ(first_byte(snapshot, 6), 70);
  EXPECT_EQ(first_byte(a, 6), 60);
}

TEST(PagedRows, TruncateReleasesPagesAndNeverChangesASharer) {
  auto pool = std::make_shared<PagePool>(64, 16);
  PagedRows a(pool, 16);
  for (int i = 0; i < 10; ++i) append(a, uint8_t(i));  // pages: 4 + 4 + 2 rows
  PagedRows b = a;
  a.truncate(5);  // keeps two pages; the third goes back (b still holds it)
  EXPECT_EQ(a.n_pages(), 2);
  EXPECT_EQ(pool->stats().n_used, 3);
  append(a, 50);  // row 5 sits in a page b shares: copied, b's row 5 unchanged
  EXPECT_EQ(first_byte(a, 5), 50);
  EXPECT_EQ(first_byte(b, 5), 5);
  EXPECT_EQ(first_byte(a, 4), 4);
  b = PagedRows();  // drops b's references
  EXPECT_EQ(pool->stats().n_used, 2);
  EXPECT_EQ(pool->stats().n_shared, 0);
  a.truncate(0);
  EXPECT_EQ(a.n_pages(), 0);
  EXPECT_EQ(pool->stats().n_used, 0);
}

TEST(PagedRows, AssignmentAndMoveKeepCountsRight) {
  auto pool = std::make_shared<PagePool>(64, 16);
  PagedRows a(pool, 16), b(pool, 16);
  for (int i = 0; i < 5; ++i) append(a, uint8_t(i));
  for (int i = 0; i < 3; ++i) append(b, uint8_t(10 + i));
  EXPECT_EQ(pool->stats().n_used, 3);
  b = a;  // b's own page goes back; a's two are shared
  EXPECT_EQ(pool->stats().n_used, 2);
  EXPECT_EQ(pool->stats().n_shared, 2);
  PagedRows c = std::move(b);
  EXPECT_EQ(b.n_pages(), 0);  // NOLINT: moved-from is empty
  EXPECT_EQ(pool->stats().n_shared, 2);
  EXPECT_EQ(first_byte(c, 4), 4);
}

// Every appended row gets a stamp no row had before; copies (sharing the rows) keep them, through the copy of a
// shared tail page too; a row appended where a truncated one was gets a new one.
TEST(PagedRows, StampsNameEachWrittenRow) {
  auto pool = std::make_shared<PagePool>(64, 16);
  PagedRows a(pool, 16);
  for (int i = 0; i < 5; ++i) append(a, uint8_t(i));
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_NE(a.stamp(j), 0u);
    for (int64_t k = 0; k < j; ++k) EXPECT_NE(a.stamp(j), a.stamp(k));
    EXPECT_EQ(a.stamps(0)[j], a.stamp(j));
  }
  PagedRows b = a;
  append(b, 9);  // copies the shared tail page (rows 4, 5)
  for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(b.stamp(j), a.stamp(j));
  EXPECT_EQ(a.n_rows(), 5);
  const uint64_t old = a.stamp(4);
  a.truncate(4);
  append(a, 7);
  EXPECT_NE(a.stamp(4), old);
  EXPECT_NE(a.stamp(4), b.stamp(5));
  PagedRows c = std::move(a);
  EXPECT_EQ(c.n_rows(), 5);
  EXPECT_EQ(c.stamp(4), c.stamps(4)[0]);
}

}  // namespace
}  // namespace deepinfer
