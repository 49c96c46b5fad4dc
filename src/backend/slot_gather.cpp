// SlotGather: see slot_gather.h.
#include "backend/slot_gather.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/status.h"

namespace deepinfer {

void SlotGather::gather(std::span<const SparseAttentionParams> batch) {
  n_tokens_ = int64_t(batch.size());
  n_slots_ = 0;
  for (const SparseAttentionParams& p : batch) n_slots_ = std::max(n_slots_, p.n_slots);
  const int64_t head_dim = batch.empty() ? 0 : batch[0].head_dim;
  slot_rows_.assign(size_t(n_tokens_ * n_slots_), -1);
  float_rows_.clear();
  groups_.clear();
  index_.reset(n_tokens_ * n_slots_);
  packed_at_.clear();
  for (int64_t t = 0; t < n_tokens_; ++t) {
    const SparseAttentionParams& p = batch[size_t(t)];
    DI_CHECK(p.head_dim == head_dim);
    for (int64_t j = 0; j < p.n_slots; ++j) {
      const float* row = p.slots[j];
      const PackedSlot packed = p.packed ? p.packed[j] : PackedSlot{};
      int32_t& at = slot_rows_[size_t(t * n_slots_ + j)];
      if (row) {
        const auto [index, inserted] = index_.try_emplace(reinterpret_cast<uintptr_t>(row), int32_t(float_rows_.size()));
        if (inserted) float_rows_.push_back(row);
        at = int32_t(index);
      } else if (packed.row) {  // -2 - k for the k-th packed row, made a row index below
        const auto [index, inserted] = index_.try_emplace(reinterpret_cast<uintptr_t>(packed.row), -2 - int32_t(packed_at_.size()));
        if (inserted) packed_at_.push_back(add_packed(packed, head_dim));
        at = int32_t(index);
      }
    }
  }
  const int64_t n_float = int64_t(float_rows_.size());
  n_rows_ = n_float;
  packed_bytes_ = 0;
  for (PackedGroup& g : groups_) {
    g.first_row = n_rows_;
    g.first_byte = packed_bytes_;
    n_rows_ += int64_t(g.rows.size());
    packed_bytes_ += int64_t(g.rows.size()) * g.format.row_bytes;
  }
  DI_CHECK_MSG(n_rows_ <= INT32_MAX, "sparse attention: too many rows for one launch");
  if (packed_at_.empty()) return;
  for (int32_t& at : slot_rows_) {
    if (at <= -2) {
      const auto [group, k] = packed_at_[size_t(-2 - at)];
      at = int32_t(groups_[size_t(group)].first_row + k);
    }
  }
}

// The group of the packed row's format (made on its first use) and the row's place in it.
std::pair<int32_t, int32_t> SlotGather::add_packed(const PackedSlot& packed, int64_t head_dim) {
  const KvRowFormat& f = *packed.format;
  DI_CHECK_MSG(f.n_values == head_dim, "packed attention slot: a row of " + std::to_string(f.n_values) +
                                           " values for head_dim " + std::to_string(head_dim));
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const PackedGroup& g) { return g.format == f; });
  if (it == groups_.end()) {
    PackedGroup group;
    group.format = f;
    groups_.push_back(std::move(group));
    it = groups_.end() - 1;
  }
  it->rows.push_back(packed.row);
  it->stamps.push_back(packed.stamp);
  return {int32_t(it - groups_.begin()), int32_t(it->rows.size() - 1)};
}

}  // namespace deepinfer
