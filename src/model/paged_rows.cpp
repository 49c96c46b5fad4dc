// PagedRows: page sharing on copy, copy-on-write of a shared tail page, release on truncate / destruction.
#include "model/paged_rows.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

namespace deepinfer {

uint64_t new_row_stamp() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

PagedRows::PagedRows(std::shared_ptr<PagePool> pool, int64_t row_bytes) : pool_(std::move(pool)), row_bytes_(row_bytes) {
  DI_CHECK(pool_ && row_bytes > 0 && row_bytes <= pool_->page_bytes());
  rows_per_page_ = pool_->page_bytes() / row_bytes;
}

PagedRows::PagedRows(const PagedRows& other)
    : pool_(other.pool_), row_bytes_(other.row_bytes_), rows_per_page_(other.rows_per_page_), n_rows_(other.n_rows_),
      pages_(other.pages_), ptrs_(other.ptrs_), stamps_(other.stamps_) {
  for (int32_t page : pages_) pool_->retain(page);
}

PagedRows& PagedRows::operator=(const PagedRows& other) {
  if (this == &other) return *this;
  for (int32_t page : other.pages_) other.pool_->retain(page);  // before releasing ours: the two may share pages
  release_all();
  pool_ = other.pool_;
  row_bytes_ = other.row_bytes_;
  rows_per_page_ = other.rows_per_page_;
  n_rows_ = other.n_rows_;
  pages_ = other.pages_;
  ptrs_ = other.ptrs_;
  stamps_ = other.stamps_;
  return *this;
}

PagedRows::PagedRows(PagedRows&& other) noexcept
    : pool_(std::move(other.pool_)), row_bytes_(other.row_bytes_), rows_per_page_(other.rows_per_page_),
      n_rows_(std::exchange(other.n_rows_, 0)), pages_(std::move(other.pages_)), ptrs_(std::move(other.ptrs_)),
      stamps_(std::move(other.stamps_)) {
  other.pages_.clear();
  other.ptrs_.clear();
  other.stamps_.clear();
}

PagedRows& PagedRows::operator=(PagedRows&& other) noexcept {
  if (this == &other) return *this;
  release_all();
  pool_ = std::move(other.pool_);
  row_bytes_ = other.row_bytes_;
  rows_per_page_ = other.rows_per_page_;
  n_rows_ = std::exchange(other.n_rows_, 0);
  pages_ = std::move(other.pages_);
  ptrs_ = std::move(other.ptrs_);
  stamps_ = std::move(other.stamps_);
  other.pages_.clear();
  other.ptrs_.clear();
  other.stamps_.clear();
  return *this;
}

PagedRows::~PagedRows() { release_all(); }

void PagedRows::release_all() {
  for (int32_t page : pages_) pool_->release(page);
  pages_.clear();
  ptrs_.clear();
  stamps_.clear();
  n_rows_ = 0;
}

Result<uint8_t*> PagedRows::append() {
  DI_CHECK(pool_);
  const int64_t offset = n_rows_ % rows_per_page_;
  if (offset == 0) {  // the tail page is full (or there is none): a fresh page
    Result<int32_t> page = pool_->allocate();
    if (!page.ok()) return page.status();
    pages_.push_back(page.value());
    ptrs_.push_back(pool_->data(page.value()));
  } else if (pool_->refcount(pages_.back()) > 1) {  // copy-on-write: the sharers keep the old page unchanged
    Result<int32_t> page = pool_->allocate();
    if (!page.ok()) return page.status();
    uint8_t* copy = pool_->data(page.value());
    std::memcpy(copy, ptrs_.back(), size_t(offset * row_bytes_));
    pool_->release(pages_.back());
    pages_.back() = page.value();
    ptrs_.back() = copy;
  }
  n_rows_ += 1;
  stamps_.push_back(new_row_stamp());
  return ptrs_.back() + offset * row_bytes_;
}

int64_t PagedRows::pages_to_append(int64_t n) const {
  if (n <= 0) return 0;
  const int64_t offset = n_rows_ % rows_per_page_;
  const int64_t fresh = (n_rows_ + n + rows_per_page_ - 1) / rows_per_page_ - int64_t(pages_.size());
  return fresh + (offset != 0 && pool_->refcount(pages_.back()) > 1 ? 1 : 0);
}

void PagedRows::truncate(int64_t n) {
  DI_CHECK(n >= 0);
  if (n >= n_rows_) return;
  const size_t keep = size_t((n + rows_per_page_ - 1) / rows_per_page_);
  for (size_t i = keep; i < pages_.size(); ++i) pool_->release(pages_[i]);
  pages_.resize(keep);
  ptrs_.resize(keep);
  stamps_.resize(size_t(n));
  n_rows_ = n;
}

}  // namespace deepinfer
