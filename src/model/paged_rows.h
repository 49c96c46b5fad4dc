// PagedRows: an append-only list of fixed-size packed rows stored in PagePool pages: row j lives in page
// j / rows_per_page at byte (j % rows_per_page) * row_bytes. Copying a PagedRows shares its pages (refcount + 1,
// no bytes copied): that is how prefix-cache snapshots and the sequences restored from them hold the same rows.
// Appending into a tail page someone else also holds copies that page first (copy-on-write), so a sharer never
// sees a row change; truncation (speculative rollback) drops the pages past the new end.
// Each row also carries a write stamp (new_row_stamp() at append): two rows with one stamp hold the same bytes,
// wherever they are, so a device that mirrors cache rows can key them by stamp and copy only rows it lacks.
// Invariant: pages_.size() == ceil(n_rows / rows_per_page); every page in pages_ has one reference from this object;
// stamps_.size() == n_rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/page_pool.h"

namespace deepinfer {

// A stamp no row has had before in this process (never 0): given to every cache row as it is written.
uint64_t new_row_stamp();

class PagedRows {
 public:
  PagedRows() = default;
  PagedRows(std::shared_ptr<PagePool> pool, int64_t row_bytes);
  PagedRows(const PagedRows& other);
  PagedRows& operator=(const PagedRows& other);
  PagedRows(PagedRows&& other) noexcept;
  PagedRows& operator=(PagedRows&& other) noexcept;
  ~PagedRows();

  int64_t n_rows() const { return n_rows_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t rows_per_page() const { return rows_per_page_; }
  int64_t n_pages() const { return int64_t(pages_.size()); }
  int64_t page_bytes() const { return pool_ ? pool_->page_bytes() : 0; }
  const std::vector<int32_t>& page_ids() const { return pages_; }
  // [row_bytes]
  const uint8_t* row(int64_t j) const {
    return ptrs_[size_t(j / rows_per_page_)] + (j % rows_per_page_) * row_bytes_;
  }
  // Row j's write stamp, and the stamps of rows j.. (stamps(j)[i] is row j + i's; valid until the next append or
  // truncate, unlike row(), whose bytes stay put).
  uint64_t stamp(int64_t j) const { return stamps_[size_t(j)]; }
  const uint64_t* stamps(int64_t j) const { return stamps_.data() + j; }
  // Rows j.. that sit contiguously after row(j) in its page (at least 1 for j < n_rows).
  int64_t contiguous_rows(int64_t j) const { return std::min(rows_per_page_ - j % rows_per_page_, n_rows_ - j); }
  // The [row_bytes] slot of row n_rows, which now counts as a row with a new stamp (the caller writes its bytes
  // before anything reads them): a new page when the tail is full, a private copy of the tail page when it is
  // shared. An error (nothing changed) when the pool has no page to give.
  Result<uint8_t*> append();
  // Pages append() would take from the pool for n more rows: new pages, plus a copy of the tail page if it is
  // partly filled and shared.
  int64_t pages_to_append(int64_t n) const;
  void truncate(int64_t n);

 private:
  void release_all();
  std::shared_ptr<PagePool> pool_;
  int64_t row_bytes_ = 0;
  int64_t rows_per_page_ = 1;
  int64_t n_rows_ = 0;
  std::vector<int32_t> pages_;  // [n_pages] ids in pool_
  std::vector<uint8_t*> ptrs_;  // [n_pages] pool_->data(pages_[i]), cached: row() takes no lock
  std::vector<uint64_t> stamps_;  // [n_rows] (a copy shares the rows, and so their stamps)
};

}  // namespace deepinfer
