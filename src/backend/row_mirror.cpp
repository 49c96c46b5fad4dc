// RowMirror: slots by stamp, emptied whole when a call would not fit (row_mirror.h).
#include "backend/row_mirror.h"

#include "core/status.h"

namespace deepinfer {

void RowMirror::begin_call(int64_t n_rows) {
  DI_CHECK_MSG(n_rows >= 0 && n_rows <= capacity_, "a call's rows do not fit the row mirror");
  if (capacity_ - next_free_ < n_rows) {
    slot_of_.clear();
    next_free_ = 0;
    ++n_flushes_;
  }
  call_rows_left_ = n_rows;
}

RowMirror::Place RowMirror::place(uint64_t stamp) {
  DI_CHECK_MSG(stamp != 0, "a mirrored row needs a stamp");
  DI_CHECK_MSG(call_rows_left_ > 0, "more rows placed than begin_call() made room for");
  --call_rows_left_;
  const auto [it, fresh] = slot_of_.try_emplace(stamp, next_free_);
  if (!fresh) return {it->second, false};
  return {next_free_++, true};
}

}  // namespace deepinfer
