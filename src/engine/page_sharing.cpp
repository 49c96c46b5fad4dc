#include "engine/page_sharing.h"

#include <algorithm>

namespace deepinfer {

template <typename Fn>
void SharedPageCounter::for_each_full_page(const SequenceState& state, Fn fn) {
  for (const auto* group : {&state.layers, &state.mtp_layers}) {
    for (const LayerState& l : *group) {
      for (const PagedRows* rows : {&l.compressor.rows, &l.index_compressor.rows}) {
        const int64_t n_full = rows->rows_per_page() > 0 ? rows->n_rows() / rows->rows_per_page() : 0;
        for (int64_t i = 0; i < n_full; ++i) fn(rows->page_ids()[size_t(i)]);
      }
    }
  }
}

void SharedPageCounter::begin_step() {
  if (++step_ == 0) {  // wrapped: old stamps could alias the new step
    std::fill(stamp_.begin(), stamp_.end(), 0u);
    step_ = 1;
  }
}

int64_t SharedPageCounter::see(const SequenceState& state) {
  int64_t shared = 0;
  for_each_full_page(state, [&](int32_t page) {
    if (size_t(page) >= stamp_.size()) stamp_.resize(size_t(page) + 1, 0u);
    if (stamp_[size_t(page)] == step_) shared += 1;
    stamp_[size_t(page)] = step_;
  });
  return shared;
}

int64_t SharedPageCounter::count(const SequenceState& state) const {
  int64_t shared = 0;
  for_each_full_page(state, [&](int32_t page) { shared += size_t(page) < stamp_.size() && stamp_[size_t(page)] == step_; });
  return shared;
}

}  // namespace deepinfer
