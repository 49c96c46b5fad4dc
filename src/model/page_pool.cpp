// PagePool bookkeeping: ids index memory_/refcount_; a freed page keeps its memory for the next allocate().
#include "model/page_pool.h"

#include <string>

namespace deepinfer {

PagePool::PagePool(int64_t page_bytes, int64_t capacity_pages) : page_bytes_(page_bytes), capacity_(capacity_pages) {
  DI_CHECK(page_bytes > 0 && capacity_pages >= 0 && capacity_pages <= kUnlimited);
}

Result<int32_t> PagePool::allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (n_used_ >= capacity_) {
    return Status::error("KV page pool exhausted: all " + std::to_string(capacity_) + " pages of " +
                         std::to_string(page_bytes_) + " bytes are in use");
  }
  int32_t page = 0;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    page = int32_t(memory_.size());
    memory_.push_back(std::make_unique<uint8_t[]>(size_t(page_bytes_)));
    refcount_.push_back(0);
  }
  refcount_[size_t(page)] = 1;
  n_used_ += 1;
  return page;
}

void PagePool::retain(int32_t page) {
  std::lock_guard<std::mutex> lock(mu_);
  DI_CHECK(page >= 0 && size_t(page) < refcount_.size() && refcount_[size_t(page)] > 0);
  if (++refcount_[size_t(page)] == 2) n_shared_ += 1;
}

void PagePool::release(int32_t page) {
  std::lock_guard<std::mutex> lock(mu_);
  DI_CHECK(page >= 0 && size_t(page) < refcount_.size() && refcount_[size_t(page)] > 0);
  const int32_t left = --refcount_[size_t(page)];
  if (left == 1) n_shared_ -= 1;
  if (left == 0) {
    n_used_ -= 1;
    free_.push_back(page);
  }
}

int32_t PagePool::refcount(int32_t page) const {
  std::lock_guard<std::mutex> lock(mu_);
  DI_CHECK(page >= 0 && size_t(page) < refcount_.size());
  return refcount_[size_t(page)];
}

uint8_t* PagePool::data(int32_t page) const {
  std::lock_guard<std::mutex> lock(mu_);
  DI_CHECK(page >= 0 && size_t(page) < memory_.size());
  return memory_[size_t(page)].get();
}

int64_t PagePool::n_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_ - n_used_;
}

PagePoolStats PagePool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {page_bytes_, capacity_, n_used_, n_shared_};
}

}  // namespace deepinfer
