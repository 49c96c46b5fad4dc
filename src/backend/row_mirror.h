// RowMirror: which packed cache rows a device already holds, by write stamp (PackedSlot::stamp: one stamp, one
// row content), in an arena of `capacity` fixed-size slots (one arena per row size). A call places its rows
// first: each gets a slot, and only the rows the arena did not hold are copied. Window rows are rewritten every
// step, compressed rows and index keys once per 4 or 128 positions, and a decode step's attention reads the same
// rows again and again: at decode batch 256 with 2048 tokens of context, the rows a V4 layer reads are ~95 MB of
// packed bytes, of which a step writes a few hundred KB. Free of any device API so that the CPU tests cover it.
// When a call needs more free slots than are left, the arena is emptied first (every later row is copied again):
// a call's own rows are never evicted while it places them.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace deepinfer {

class RowMirror {
 public:
  explicit RowMirror(int64_t capacity) : capacity_(capacity) {}

  int64_t capacity() const { return capacity_; }
  // Starts placing a call's `n_rows` rows (at most capacity()): empties the arena unless that many slots are
  // free (the call may need a new slot for each of them).
  void begin_call(int64_t n_rows);
  struct Place {
    int64_t slot = 0;   // where the row sits in the arena
    bool copy = false;  // its bytes must be copied there first
  };
  // The slot of the row with `stamp` (nonzero): held already, or a new one to copy into.
  Place place(uint64_t stamp);

  int64_t n_held() const { return next_free_; }
  int64_t n_flushes() const { return n_flushes_; }

 private:
  int64_t capacity_;
  int64_t next_free_ = 0;  // slots [0, next_free_) hold rows
  int64_t n_flushes_ = 0;
  int64_t call_rows_left_ = 0;  // rows begin_call() made room for that place() has not placed yet
  std::unordered_map<uint64_t, int64_t> slot_of_;
};

}  // namespace deepinfer
