// FlatIndex: a map from 64-bit keys (row addresses, row stamps) to int32 values for the per-row lookups of a
// device call's planning, where std::unordered_map cost ~70 ns a row (a 256-sequence decode step looks up ~160k
// rows per layer). Open addressing with linear probing, at most half full, no erase; reset() empties it in O(1)
// by moving to a new generation (an entry of an older generation reads as empty). A key's home is its own low
// bits (after dropping `key_shift` bits that never vary, as an address's alignment): the keys of one call are
// mostly runs of nearby values (rows one after another in a page, stamps given in order), which then sit near
// each other in the table too, instead of a cache miss each (a scattering hash made SlotGather slower than
// std::unordered_map, whose identity hash keeps that order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"

namespace deepinfer {

class FlatIndex {
 public:
  explicit FlatIndex(int key_shift = 0) : key_shift_(key_shift) { reset(8); }

  // Empties the map, with room for `max_keys` keys.
  void reset(int64_t max_keys) {
    int bits = 4;
    while ((int64_t(1) << bits) < 2 * max_keys) ++bits;
    if (size_t(1) << bits > entries_.size() || ++generation_ == 0) {  // grow, or a generation counter wrapped
      entries_.assign(std::max(entries_.size(), size_t(1) << bits), Entry{});
      generation_ = 1;
    }
    mask_ = entries_.size() - 1;
    max_keys_ = int64_t(entries_.size() / 2);
    n_keys_ = 0;
  }

  // key's value, or -1. Reads only: several threads may look up at once.
  int64_t find(uint64_t key) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.generation != generation_) return -1;
      if (e.key == key) return e.value;
    }
  }

  // key's value, inserting `value` when the key is absent (second: whether it was). At most max_keys() keys.
  std::pair<int64_t, bool> try_emplace(uint64_t key, int32_t value) {
    size_t i = home(key);
    for (; entries_[i].generation == generation_; i = (i + 1) & mask_) {
      if (entries_[i].key == key) return {entries_[i].value, false};
    }
    DI_CHECK_MSG(n_keys_ < max_keys_, "FlatIndex: more keys than reset() made room for");
    entries_[i] = {key, value, generation_};
    ++n_keys_;
    return {value, true};
  }

  int64_t size() const { return n_keys_; }
  int64_t max_keys() const { return max_keys_; }

 private:
  struct Entry {
    uint64_t key = 0;
    int32_t value = 0;
    uint32_t generation = 0;  // live when equal to generation_
  };
  size_t home(uint64_t key) const { return size_t(key >> key_shift_) & mask_; }

  int key_shift_;
  std::vector<Entry> entries_;
  size_t mask_ = 0;
  uint32_t generation_ = 0;
  int64_t max_keys_ = 0, n_keys_ = 0;
};

}  // namespace deepinfer
