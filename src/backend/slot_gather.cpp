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
  int64_t n_runs = 0;  // the kept selections' runs
  for (const SparseAttentionParams& p : batch) n_runs += p.kept_selection ? int64_t(p.kept_selection->runs.size()) : 0;
  index_.reset(n_tokens_ * n_slots_);
  run_index_.reset(std::max<int64_t>(n_runs, 1));
  packed_at_.clear();
  selection_tables_.clear();
  selection_table_at_.assign(size_t(n_tokens_), -1);
  for (int64_t t = 0; t < n_tokens_; ++t) {
    const SparseAttentionParams& p = batch[size_t(t)];
    DI_CHECK(p.head_dim == head_dim);
    const KeptSelectionSlots* kept = p.kept_selection;
    DI_CHECK_MSG(!kept || (kept->at >= 0 && kept->n >= 0 && kept->at + kept->n <= p.n_slots),
                 "sparse attention: a kept selection's slots lie outside the token's slot list");
    for (int64_t j = 0; j < p.n_slots; ++j) {
      if (kept && j >= kept->at && j < kept->at + kept->n) continue;  // the device's (left empty here)
      slot_rows_[size_t(t * n_slots_ + j)] = add_row(p.slots[j], p.packed ? p.packed[j] : PackedSlot{}, head_dim);
    }
    if (!kept) continue;
    selection_table_at_[size_t(t)] = int64_t(selection_tables_.size());
    int64_t left = kept->n_rows;
    for (const PackedRowRun& run : kept->runs) {
      if (left == 0) break;
      const int64_t n = std::min(run.n_rows, left);
      if (n <= 0) continue;
      const int32_t k0 = add_run(run, n, *kept->format, head_dim);
      for (int64_t k = 0; k < n; ++k) selection_tables_.push_back(-2 - (k0 + int32_t(k)));
      left -= n;
    }
    DI_CHECK_MSG(left == 0, "sparse attention: a kept selection's runs hold fewer rows than n_rows");
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
  for (std::vector<int32_t>* rows : {&slot_rows_, &selection_tables_}) {
    for (int32_t& at : *rows) {
      if (at <= -2) {
        const auto [group, k] = packed_at_[size_t(-2 - at)];
        at = int32_t(groups_[size_t(group)].first_row + k);
      }
    }
  }
}

// A slot's row placed once: a float row's index, a packed row's -2 - k (made a row index once the groups are
// laid out), or -1 for an empty slot.
int32_t SlotGather::add_row(const float* row, const PackedSlot& packed, int64_t head_dim) {
  if (row) {
    const auto [index, inserted] = index_.try_emplace(reinterpret_cast<uintptr_t>(row), int32_t(float_rows_.size()));
    if (inserted) float_rows_.push_back(row);
    return int32_t(index);
  }
  if (!packed.row) return -1;
  const auto [index, inserted] = index_.try_emplace(reinterpret_cast<uintptr_t>(packed.row), -2 - int32_t(packed_at_.size()));
  if (inserted) packed_at_.push_back(add_packed(packed, head_dim));
  return int32_t(index);
}

// The first n (> 0) rows of `run` as packed rows k0 .. k0 + n - 1, placed once per run start and length; returns k0.
int32_t SlotGather::add_run(const PackedRowRun& run, int64_t n, const KvRowFormat& format, int64_t head_dim) {
  DI_CHECK_MSG(n > 0 && n < (int64_t(1) << 16), "sparse attention: a kept selection's page run of " + std::to_string(n) + " rows");
  const uint64_t key = reinterpret_cast<uintptr_t>(run.rows) | uint64_t(n) << 48;  // user-space addresses are < 2^48
  const auto [k0, inserted] = run_index_.try_emplace(key, int32_t(packed_at_.size()));
  if (!inserted) return int32_t(k0);
  for (int64_t k = 0; k < n; ++k) {
    DI_CHECK_MSG(run.stamps && run.stamps[k], "sparse attention: a kept selection's row without a write stamp");
  }
  const auto [group, first] = add_packed({run.rows, &format, run.stamps[0]}, head_dim);
  PackedGroup& g = groups_[size_t(group)];
  for (int64_t k = 0; k < n; ++k) {
    if (k > 0) {
      g.rows.push_back(run.rows + k * format.row_bytes);
      g.stamps.push_back(run.stamps[k]);
    }
    packed_at_.push_back({group, first + int32_t(k)});
  }
  return int32_t(k0);
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
