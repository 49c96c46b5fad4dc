// RowMirror: slots by stamp in a flat table, emptied whole when a call's missing rows would not fit (row_mirror.h).
#include "backend/row_mirror.h"

#include <algorithm>

#include "core/status.h"

namespace deepinfer {

RowMirror::RowMirror(int64_t capacity) : capacity_(capacity) {
  DI_CHECK(capacity > 0);
  int bits = 1;  // a table of 2^bits entries, at least twice the slots
  while ((int64_t(1) << bits) < 2 * capacity) ++bits;
  shift_ = 64 - bits;
  table_.resize(size_t(1) << bits);
}

int64_t RowMirror::find(uint64_t stamp) const {
  DI_CHECK_MSG(stamp != 0, "a mirrored row needs a stamp");
  for (size_t i = home(stamp);; i = (i + 1) & (table_.size() - 1)) {
    const Entry& e = table_[i];
    if (e.stamp == stamp) return e.slot;
    if (e.stamp == 0) return -1;
  }
}

void RowMirror::clear() {
  std::fill(table_.begin(), table_.end(), Entry{});
  next_free_ = 0;
  ++n_flushes_;
}

void RowMirror::place_missing(std::span<const uint64_t> stamps, std::span<int64_t> slots, std::vector<int64_t>& copies) {
  DI_CHECK(stamps.size() == slots.size());
  DI_CHECK_MSG(int64_t(stamps.size()) <= capacity_, "a call's rows do not fit the row mirror");
  copies.clear();
  const int64_t missing = std::count(slots.begin(), slots.end(), int64_t(-1));
  if (missing > capacity_ - next_free_) {  // every row of the call is missing then
    clear();
    std::fill(slots.begin(), slots.end(), int64_t(-1));
  }
  for (size_t k = 0; k < stamps.size(); ++k) {
    if (slots[k] >= 0) continue;
    DI_CHECK_MSG(stamps[k] != 0, "a mirrored row needs a stamp");
    size_t i = home(stamps[k]);
    while (table_[i].stamp != 0 && table_[i].stamp != stamps[k]) i = (i + 1) & (table_.size() - 1);
    if (table_[i].stamp == 0) {  // new: the next free slot (there is one: missing rows <= free slots)
      table_[i] = {stamps[k], next_free_++};
      copies.push_back(int64_t(k));
    }
    slots[k] = table_[i].slot;  // or the slot an earlier row of this call with the same stamp got
  }
}

}  // namespace deepinfer
