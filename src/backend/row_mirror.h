// RowMirror: which packed cache rows a device already holds, by write stamp (PackedSlot::stamp: one stamp, one
// row content), in an arena of `capacity` fixed-size slots (one arena per row size). Window rows are rewritten
// every step, compressed rows and index keys once per 4 or 128 positions, and a decode step's attention reads
// the same rows again and again: at decode batch 256 with 2048 tokens of context the rows a V4 layer reads are
// ~95 MB of packed bytes, of which a step writes a few hundred KB. A call looks its rows up (find(), read-only,
// so the lookups may run on several threads), then place_missing() gives the missing ones slots and says which
// to copy. When fewer slots are free than rows are missing, the arena is emptied first and every row of the call
// is copied: rows are never evicted one by one, and never while a call places its rows. A page run of rows (a kept
// selection's or a page of index keys, SlotGather::PackedGroup::Run) can be looked up whole: the mirror remembers the
// runs a call placed, by their stamps' address, until the arena is emptied (or the runs remembered hold more rows than
// the arena: then all are forgotten). The stamp index grows with the rows held, not with the capacity: a 2 GB arena
// of 68 B index keys has ~10M slots, whose index would take 0.5 GB of host memory from the first call on. Free of any
// device API so that the CPU tests cover it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/flat_index.h"

namespace deepinfer {

class RowMirror {
 public:
  explicit RowMirror(int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t n_held() const { return next_free_; }
  int64_t n_flushes() const { return n_flushes_; }

  // The slot holding the row with `stamp` (nonzero), or -1.
  int64_t find(uint64_t stamp) const;
  // A call's rows (at most capacity()) after find(): slots[k] is find(stamps[k]). Every row with slot -1 gets
  // one (the same for rows of one stamp); the indices of the rows whose bytes must be copied into their slots
  // go to `copies`. Empties the arena first when the missing rows do not fit its free slots.
  void place_missing(std::span<const uint64_t> stamps, std::span<int64_t> slots, std::vector<int64_t>& copies);
  // The same where only the rows in `ranges` ([begin, end), ascending, not overlapping) may be missing: every other
  // row of the call has its slot, and only the ranges are read (where the arena is emptied, every row is placed).
  using RowRange = std::pair<int64_t, int64_t>;
  void place_missing(std::span<const uint64_t> stamps, std::span<int64_t> slots, std::span<const RowRange> ranges,
                     std::vector<int64_t>& copies);

  // A run of n rows whose stamps are at `stamps`: where remember_run() saw a run there of n rows since the arena was
  // last emptied, each row whose stamp is still the one it saw (a rewritten row, or a page reused by another
  // sequence, has another) gets its slot in slots[i]; the others' are left as they are. Returns how many rows got one
  // (0 where no such run is remembered). A compare and a copy of n words instead of n lookups. Reads only: several
  // threads may look up at once.
  int64_t find_run(const uint64_t* stamps, int64_t n, int64_t* slots) const;
  // Remembers the run's slots (every one placed: find or place_missing gave it).
  void remember_run(const uint64_t* stamps, int64_t n, const int64_t* slots);
  // remember_run where the run is remembered with n rows already (false, nothing done, where not): its stamps and
  // slots rewritten in place, nothing added, so several threads may update distinct runs at once.
  bool update_run(const uint64_t* stamps, int64_t n, const int64_t* slots);
  int64_t n_remembered_runs() const { return int64_t(runs_.size()); }

 private:
  struct RememberedRun {
    std::vector<uint64_t> stamps;
    std::vector<int64_t> slots;
  };
  void forget_runs();
  void make_room_for(int64_t n_held);  // the stamp index grown (rebuilt from stamp_of_slot_) to index n_held rows
  int64_t capacity_;
  int64_t next_free_ = 0;  // slots [0, next_free_) hold rows
  int64_t n_flushes_ = 0;
  FlatIndex slot_of_;      // stamp -> slot
  std::vector<uint64_t> stamp_of_slot_;  // [next_free_]
  std::unordered_map<const uint64_t*, RememberedRun> runs_;  // by the run's stamps' address
  int64_t remembered_rows_ = 0;
};

}  // namespace deepinfer
