// RowMirror: slots by stamp, emptied whole when a call's missing rows would not fit (row_mirror.h).
#include "backend/row_mirror.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace deepinfer {

RowMirror::RowMirror(int64_t capacity) : capacity_(capacity) {
  DI_CHECK(capacity > 0 && capacity <= INT32_MAX);
  slot_of_.reset(std::min<int64_t>(capacity, 4096));
}

void RowMirror::make_room_for(int64_t n_held) {
  if (n_held <= slot_of_.max_keys()) return;
  slot_of_.reset(std::min(capacity_, std::max(n_held, 2 * slot_of_.max_keys())));
  for (int64_t s = 0; s < next_free_; ++s) slot_of_.try_emplace(stamp_of_slot_[size_t(s)], int32_t(s));
}

int64_t RowMirror::find(uint64_t stamp) const {
  DI_CHECK_MSG(stamp != 0, "a mirrored row needs a stamp");
  return slot_of_.find(stamp);
}

void RowMirror::place_missing(std::span<const uint64_t> stamps, std::span<int64_t> slots, std::vector<int64_t>& copies) {
  const RowRange all{0, int64_t(stamps.size())};
  place_missing(stamps, slots, {&all, 1}, copies);
}

void RowMirror::place_missing(std::span<const uint64_t> stamps, std::span<int64_t> slots, std::span<const RowRange> ranges,
                              std::vector<int64_t>& copies) {
  DI_CHECK(stamps.size() == slots.size());
  DI_CHECK_MSG(int64_t(stamps.size()) <= capacity_, "a call's rows do not fit the row mirror");
  copies.clear();
  int64_t missing = 0, last_end = 0;
  for (const auto& [begin, end] : ranges) {
    DI_CHECK_MSG(last_end <= begin && begin <= end && end <= int64_t(slots.size()), "row mirror: ranges out of order");
    missing += std::count(slots.begin() + begin, slots.begin() + end, int64_t(-1));
    last_end = end;
  }
  const RowRange all{0, int64_t(stamps.size())};
  if (missing > capacity_ - next_free_) {  // every row of the call is missing then
    slot_of_.reset(1);  // (emptied; its room stays)
    next_free_ = 0;
    stamp_of_slot_.clear();
    ++n_flushes_;
    forget_runs();
    std::fill(slots.begin(), slots.end(), int64_t(-1));
    ranges = {&all, 1};
    missing = int64_t(stamps.size());
  }
  make_room_for(next_free_ + missing);
  for (const auto& [begin, end] : ranges) {
    for (int64_t k = begin; k < end; ++k) {
      if (slots[size_t(k)] >= 0) continue;
      DI_CHECK_MSG(stamps[size_t(k)] != 0, "a mirrored row needs a stamp");
      // A new stamp takes the next free slot (there is one: missing rows <= free slots); a stamp an earlier row
      // of this call placed gets that row's slot.
      const auto [slot, inserted] = slot_of_.try_emplace(stamps[size_t(k)], int32_t(next_free_));
      if (inserted) {
        ++next_free_;
        stamp_of_slot_.push_back(stamps[size_t(k)]);
        copies.push_back(k);
      }
      slots[size_t(k)] = slot;
    }
  }
}

int64_t RowMirror::find_run(const uint64_t* stamps, int64_t n, int64_t* slots) const {
  const auto it = runs_.find(stamps);
  if (it == runs_.end() || int64_t(it->second.stamps.size()) != n) return 0;
  const RememberedRun& run = it->second;
  if (std::memcmp(run.stamps.data(), stamps, size_t(n) * sizeof(uint64_t)) == 0) {  // the common case: unchanged
    std::memcpy(slots, run.slots.data(), size_t(n) * sizeof(int64_t));
    return n;
  }
  int64_t found = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (run.stamps[size_t(i)] != stamps[i]) continue;
    slots[i] = run.slots[size_t(i)];
    ++found;
  }
  return found;
}

void RowMirror::remember_run(const uint64_t* stamps, int64_t n, const int64_t* slots) {
  DI_CHECK(std::find(slots, slots + n, int64_t(-1)) == slots + n);
  // The runs remembered cost 16 bytes a row. The live ones hold rows of the arena, so past its capacity some are
  // stale (pages freed since): all are forgotten, and the live ones remembered again as calls place them.
  if (remembered_rows_ + n > capacity_) forget_runs();
  RememberedRun& run = runs_[stamps];
  remembered_rows_ += n - int64_t(run.stamps.size());
  run.stamps.assign(stamps, stamps + n);
  run.slots.assign(slots, slots + n);
}

bool RowMirror::update_run(const uint64_t* stamps, int64_t n, const int64_t* slots) {
  const auto it = runs_.find(stamps);
  if (it == runs_.end() || int64_t(it->second.stamps.size()) != n) return false;
  DI_CHECK(std::find(slots, slots + n, int64_t(-1)) == slots + n);
  std::memcpy(it->second.stamps.data(), stamps, size_t(n) * sizeof(uint64_t));
  std::memcpy(it->second.slots.data(), slots, size_t(n) * sizeof(int64_t));
  return true;
}

void RowMirror::forget_runs() {
  runs_.clear();
  remembered_rows_ = 0;
}

}  // namespace deepinfer
