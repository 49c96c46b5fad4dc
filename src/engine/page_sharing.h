// SharedPageCounter: per step, how many full pages of a sequence's rows an older resident sequence already holds
// (SchedSequence::n_shared_pages), so the scheduler charges a page shared by several sequences once. Only full
// pages count, on both sides: a full page is never written again, while a partly filled tail page is copied away
// by the next append of whoever shares it (copy-on-write), so sharing one would not last. Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "model/sequence_state.h"

namespace deepinfer {

class SharedPageCounter {
 public:
  void begin_step();  // forgets every sequence seen before
  // Full pages of `state` seen in an earlier see(); then marks its own full pages as seen.
  int64_t see(const SequenceState& state);
  // Full pages of `state` seen so far, without marking (a waiting sequence's prefix-cache match).
  int64_t count(const SequenceState& state) const;

 private:
  template <typename Fn>
  static void for_each_full_page(const SequenceState& state, Fn fn);
  std::vector<uint32_t> stamp_;  // [page id] the step that last saw the page
  uint32_t step_ = 0;
};

}  // namespace deepinfer
