// RowDecodeCache: a row decodes once per binding and keeps its address until clear(), across binds of other
// chunks' rows (the model hands the tokens of several chunks to one attention call); clear() drops the rows
// and the next request decodes again; a new row width while rows are in use is a bug, caught.
// KeyDecodeCache: keys decoded contiguously as the count grows, page by page, the earlier ones kept through
// each growth of its storage, and a rebinding to rows of another width decodes those at their own width.
#include "model/kv_decode_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "model/kv_format.h"
#include "model/ops.h"
#include "model/page_pool.h"
#include "model/paged_rows.h"

namespace deepinfer {
namespace {

// n_rows packed V4.1 window rows; row r holds the values (r + seed) * {1, -2, 0.5, ...} after the QDQ.
struct PackedRows {
  KvRowFormat format;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [n_rows, n_values] what each row unpacks to
  PackedRows(int64_t n_rows, int seed, int64_t width = 512) : format(kv_row_format(KvRowKind::kV41Kv, width)) {
    bytes.resize(size_t(n_rows * format.row_bytes));
    values.resize(size_t(n_rows * format.n_values));
    for (int64_t r = 0; r < n_rows; ++r) {
      float* v = &values[size_t(r * format.n_values)];
      for (int64_t i = 0; i < format.n_values; ++i) v[i] = float(r + seed) * float((i % 7) - 3) * 0.5f;
      qdq_fp8_v41(v, format.n_values, format.block);
      EXPECT_TRUE(pack_kv_row(format, v, &bytes[size_t(r * format.row_bytes)]));
    }
  }
  const float* row(int64_t r) const { return &values[size_t(r * format.n_values)]; }
};

bool same_row(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

TEST(RowDecodeCache, RowsOfEarlierBindingsStayValidUntilClear) {
  const PackedRows a(40, 1), b(40, 100);
  const int64_t n = a.format.n_values;
  RowDecodeCache cache;
  cache.bind(a.format, a.bytes.data(), 40);
  const float* a3 = cache.row(3);
  const float* a39 = cache.row(39);
  EXPECT_EQ(cache.row(3), a3) << "a row asked for twice decodes once";
  cache.bind(b.format, b.bytes.data(), 40);
  std::vector<const float*> b_rows;
  for (int64_t r = 0; r < 40; ++r) b_rows.push_back(cache.row(r));  // past one 32-row storage block
  EXPECT_EQ(cache.n_decoded(), 42);
  EXPECT_TRUE(same_row(a3, a.row(3), n)) << "chunk a's row 3 was overwritten by chunk b's rows";
  EXPECT_TRUE(same_row(a39, a.row(39), n));
  for (int64_t r = 0; r < 40; ++r) EXPECT_TRUE(same_row(b_rows[size_t(r)], b.row(r), n)) << "row " << r;

  cache.clear();
  EXPECT_EQ(cache.n_decoded(), 0);
  EXPECT_TRUE(same_row(cache.row(5), b.row(5), n)) << "the binding survives clear()";
  EXPECT_EQ(cache.n_decoded(), 1);
}

TEST(RowDecodeCacheDeathTest, NewRowWidthWithRowsInUseIsCaught) {
  const PackedRows a(2, 1);
  const KvRowFormat narrow = kv_row_format(KvRowKind::kV41Kv, 256);
  std::vector<uint8_t> narrow_rows(size_t(narrow.row_bytes), 0);
  RowDecodeCache cache;
  cache.bind(a.format, a.bytes.data(), 2);
  cache.row(0);
  EXPECT_DEATH(cache.bind(narrow, narrow_rows.data(), 1), "clear first");
  cache.clear();
  cache.bind(narrow, narrow_rows.data(), 1);  // fine once empty
  EXPECT_EQ(cache.n_decoded(), 0);
}

// Paged copies of PackedRows' rows, 3 rows per page.
PagedRows paged(const PackedRows& packed, int64_t n_rows) {
  PagedRows rows(std::make_shared<PagePool>(3 * packed.format.row_bytes, PagePool::kUnlimited), packed.format.row_bytes);
  for (int64_t r = 0; r < n_rows; ++r) {
    auto slot = rows.append();
    EXPECT_TRUE(slot.ok());
    std::memcpy(slot.value(), &packed.bytes[size_t(r * packed.format.row_bytes)], size_t(packed.format.row_bytes));
  }
  return rows;
}

TEST(KeyDecodeCache, KeysStayRightAsTheCountGrowsAndAcrossWidths) {
  const PackedRows narrow(40, 7, 256), wide(30, 3, 512);
  const PagedRows narrow_rows = paged(narrow, 40), wide_rows = paged(wide, 30);
  KeyDecodeCache cache;
  cache.bind(narrow.format, narrow_rows, &narrow_rows);
  for (int64_t n_keys : {1, 2, 5, 11, 40}) {  // storage grows from 1 row to 40 on the way
    const float* keys = cache.keys(n_keys);
    for (int64_t r = 0; r < n_keys; ++r) {
      ASSERT_TRUE(same_row(keys + r * narrow.format.n_values, narrow.row(r), narrow.format.n_values)) << n_keys << " keys, row " << r;
    }
  }
  // Fewer rows than the narrow binding held, each twice as wide: the storage must grow all the same.
  cache.bind(wide.format, wide_rows, &wide_rows);
  const float* keys = cache.keys(30);
  for (int64_t r = 0; r < 30; ++r) ASSERT_TRUE(same_row(keys + r * wide.format.n_values, wide.row(r), wide.format.n_values)) << "row " << r;
}

}  // namespace
}  // namespace deepinfer
