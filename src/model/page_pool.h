// PagePool: fixed-size byte pages for the cache rows that grow with a sequence (compressed KV rows and indexer
// keys, see paged_rows.h), reference counted so prefix-cache snapshots and the sequences restored from them share
// rows instead of copying them. Capacity (in pages) comes from the engine's cache budget; allocating past it is an
// error the caller sees, never a crash. Page memory is allocated on first use and recycled through a free list
// (kept until the pool dies), so a long-running engine stops allocating once it has reached its working set.
// Thread-safe (one mutex): rows are appended inside the model's forward, shared and dropped on the engine thread.
// Invariant: n_used == pages with refcount > 0; n_shared == pages with refcount > 1.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"

namespace deepinfer {

// 16 KiB holds 28 V4 compressed rows (584 B, 0.2% slack), 56 V4.1 rows (288 B, 1.6%) or 240 index keys (68 B,
// 0.4%): small enough that a partially filled tail page wastes little per stream, large enough that the page
// tables (one id per page) and the per-page allocation are noise. A ratio-4 stream fills one every 112 tokens.
constexpr int64_t kDefaultPageBytes = 16 << 10;

struct PagePoolStats {
  int64_t page_bytes = 0;
  int64_t n_total = 0;   // capacity (pages)
  int64_t n_used = 0;    // pages held by at least one owner (each counted once however many share it)
  int64_t n_shared = 0;  // pages held by two or more owners (a snapshot and a sequence, two sequences, ...)
};

class PagePool {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int32_t>::max();
  PagePool(int64_t page_bytes, int64_t capacity_pages);
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t page_bytes() const { return page_bytes_; }
  // A page with refcount 1 whose bytes are unspecified; an error when every page of the capacity is in use.
  Result<int32_t> allocate();
  void retain(int32_t page);   // one more owner
  void release(int32_t page);  // one owner fewer; the page is free again at 0
  int32_t refcount(int32_t page) const;
  // [page_bytes]; the address is stable while the page has an owner.
  uint8_t* data(int32_t page) const;
  int64_t n_free() const;  // pages allocate() can still hand out
  PagePoolStats stats() const;

 private:
  const int64_t page_bytes_;
  const int64_t capacity_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> memory_;  // [n_allocated][page_bytes]: grows on demand, never shrinks
  std::vector<int32_t> refcount_;                    // [n_allocated]
  std::vector<int32_t> free_;                        // pages with refcount 0, reused last-freed first
  int64_t n_used_ = 0;
  int64_t n_shared_ = 0;
};

}  // namespace deepinfer
