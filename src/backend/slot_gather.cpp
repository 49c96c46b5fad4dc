// SlotGather: see slot_gather.h.
#include "backend/slot_gather.h"

#include <algorithm>
#include <atomic>
#include <numeric>
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
  for (PackedGroup& g : groups_) {  // kept with their capacity: a long context's groups hold ~10^4-10^5 rows
    g.rows.clear();
    g.stamps.clear();
    g.runs.clear();
    spare_groups_.push_back(std::move(g));
  }
  groups_.clear();
  last_format_ = nullptr;
  int64_t n_runs = 0;  // the kept selections' runs and the window rings
  for (const SparseAttentionParams& p : batch) {
    n_runs += (p.kept_selection ? int64_t(p.kept_selection->runs.size()) : 0) + (p.rows_unshared && p.window_ring ? 1 : 0);
  }
  index_.reset(n_tokens_ * n_slots_);
  run_index_.reset(std::max<int64_t>(n_runs, 1));
  placed_runs_.clear();
  table_groups_.clear();
  packed_at_.clear();
  selection_tables_.clear();
  selection_table_at_.assign(size_t(n_tokens_), -1);
  for (int64_t t = 0; t < n_tokens_; ++t) {
    const SparseAttentionParams& p = batch[size_t(t)];
    DI_CHECK(p.head_dim == head_dim);
    const KeptSelectionSlots* kept = p.kept_selection;
    DI_CHECK_MSG(!kept || (kept->at >= 0 && kept->n >= 0 && kept->at + kept->n <= p.n_slots),
                 "sparse attention: a kept selection's slots lie outside the token's slot list");
    const PackedRowRun* ring = p.rows_unshared ? p.window_ring : nullptr;
    int32_t ring_k0 = -1;  // the k of the ring's first row, once placed
    for (int64_t j = 0; j < p.n_slots; ++j) {
      if (kept && j >= kept->at && j < kept->at + kept->n) continue;  // the device's (left empty here)
      const PackedSlot packed = p.packed ? p.packed[j] : PackedSlot{};
      int32_t& at = slot_rows_[size_t(t * n_slots_ + j)];
      if (ring && packed.row && packed.row >= ring->rows && packed.row < ring->rows + ring->n_rows * packed.format->row_bytes) {
        if (ring_k0 < 0) ring_k0 = place_ring(*ring, *packed.format, head_dim);
        at = -2 - (ring_k0 + int32_t((packed.row - ring->rows) / packed.format->row_bytes));
      } else {
        at = p.rows_unshared ? place_row(p.slots[j], packed, head_dim) : add_row(p.slots[j], packed, head_dim);
      }
    }
    if (!kept) continue;
    // The table holds places in the selection's group for now (every row a selection may name has its format), made
    // row indices once the groups are laid out.
    selection_table_at_[size_t(t)] = int64_t(selection_tables_.size());
    int64_t left = kept->n_rows;
    int32_t group = -1;
    for (const PackedRowRun& run : kept->runs) {
      if (left == 0) break;
      const int64_t n = std::min(run.n_rows, left);
      if (n <= 0) continue;
      const auto [run_group, first] = add_run(run, n, *kept->format, head_dim);
      DI_CHECK_MSG(group < 0 || run_group == group, "sparse attention: a kept selection's runs in two row groups");
      group = run_group;
      const size_t at = selection_tables_.size();
      selection_tables_.resize(at + size_t(n));
      std::iota(selection_tables_.begin() + long(at), selection_tables_.end(), first);
      left -= n;
    }
    DI_CHECK_MSG(left == 0, "sparse attention: a kept selection's runs hold fewer rows than n_rows");
    if (group >= 0) table_groups_.push_back({selection_table_at_[size_t(t)], int64_t(selection_tables_.size()), group});
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
  for (const TableGroup& tg : table_groups_) {
    const int32_t first_row = int32_t(groups_[size_t(tg.group)].first_row);
    for (int64_t i = tg.begin; i < tg.end; ++i) selection_tables_[size_t(i)] += first_row;
  }
  if (packed_at_.empty()) return;
  for (int32_t& at : slot_rows_) {
    if (at <= -2) {
      const auto [group, k] = packed_at_[size_t(-2 - at)];
      at = int32_t(groups_[size_t(group)].first_row + k);
    }
  }
}

// A slot's row placed once: a float row's index, a packed row's -2 - k (made a row index once the groups are
// laid out), or -1 for an empty slot.
int32_t SlotGather::add_row(const float* row, const PackedSlot& packed, int64_t head_dim) {
  if (!row && !packed.row) return -1;
  // The index place_row gives it, where it is new.
  const int32_t next = row ? int32_t(float_rows_.size()) : -2 - int32_t(packed_at_.size());
  const void* address = row ? static_cast<const void*>(row) : packed.row;
  const auto [index, inserted] = index_.try_emplace(reinterpret_cast<uintptr_t>(address), next);
  if (inserted) place_row(row, packed, head_dim);
  return int32_t(index);
}

// add_row without looking the row up among those placed (SparseAttentionParams::rows_unshared): placed anew.
int32_t SlotGather::place_row(const float* row, const PackedSlot& packed, int64_t head_dim) {
  if (row) {
    float_rows_.push_back(row);
    return int32_t(float_rows_.size() - 1);
  }
  if (!packed.row) return -1;
  packed_at_.push_back(add_packed(packed, head_dim));
  return -2 - int32_t(packed_at_.size() - 1);
}

// A window ring (SparseAttentionParams::window_ring) placed whole as a run, its rows packed rows k0 .. k0 + n - 1;
// returns k0.
int32_t SlotGather::place_ring(const PackedRowRun& ring, const KvRowFormat& format, int64_t head_dim) {
  const auto [group, first] = add_run(ring, ring.n_rows, format, head_dim);
  const int32_t k0 = int32_t(packed_at_.size());
  for (int64_t i = 0; i < ring.n_rows; ++i) packed_at_.push_back({group, first + int32_t(i)});
  return k0;
}

// The first n (> 0) rows of `run` in the group of `format`, placed once per run start and length: the group and
// the place of the run's first row there. Its rows follow one another, and its stamps are recorded as a run of the
// group (PackedGroup::runs).
std::pair<int32_t, int32_t> SlotGather::add_run(const PackedRowRun& run, int64_t n, const KvRowFormat& format, int64_t head_dim) {
  DI_CHECK_MSG(n > 0 && n < (int64_t(1) << 16), "sparse attention: a kept selection's page run of " + std::to_string(n) + " rows");
  const uint64_t key = reinterpret_cast<uintptr_t>(run.rows) | uint64_t(n) << 48;  // user-space addresses are < 2^48
  const auto [placed, inserted] = run_index_.try_emplace(key, int32_t(placed_runs_.size()));
  if (!inserted) return placed_runs_[size_t(placed)];
  DI_CHECK_MSG(run.stamps && std::find(run.stamps, run.stamps + n, uint64_t(0)) == run.stamps + n,
               "sparse attention: a kept selection's row without a write stamp");
  const int32_t group = group_of(&format, head_dim);
  const int32_t first = int32_t(groups_[size_t(group)].append_run(run, n));
  placed_runs_.push_back({group, first});
  return {group, first};
}

// The packed row placed in the group of its format: the group and the row's place in it.
std::pair<int32_t, int32_t> SlotGather::add_packed(const PackedSlot& packed, int64_t head_dim) {
  const int32_t group = group_of(packed.format, head_dim);
  PackedGroup& g = groups_[size_t(group)];
  g.rows.push_back(packed.row);
  g.stamps.push_back(packed.stamp);
  return {group, int32_t(g.rows.size() - 1)};
}

// The group of rows of *format (made on its first use).
int32_t SlotGather::group_of(const KvRowFormat* format, int64_t head_dim) {
  if (format == last_format_) return int32_t(last_group_);  // consecutive rows mostly share their format object
  const KvRowFormat& f = *format;
  DI_CHECK_MSG(f.n_values == head_dim, "packed attention slot: a row of " + std::to_string(f.n_values) +
                                           " values for head_dim " + std::to_string(head_dim));
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const PackedGroup& g) { return g.format == f; });
  if (it == groups_.end()) {
    if (spare_groups_.empty()) spare_groups_.emplace_back();
    groups_.push_back(std::move(spare_groups_.back()));
    spare_groups_.pop_back();
    groups_.back().format = f;
    it = groups_.end() - 1;
  }
  last_format_ = format;
  last_group_ = it - groups_.begin();
  return int32_t(last_group_);
}

int64_t SlotGather::PackedGroup::append_run(const PackedRowRun& run, int64_t n) {
  const size_t first = rows.size();
  rows.resize(first + size_t(n));
  for (int64_t k = 0; k < n; ++k) rows[first + size_t(k)] = run.rows + k * format.row_bytes;
  stamps.insert(stamps.end(), run.stamps, run.stamps + n);
  runs.push_back({run.stamps, n, int64_t(first)});
  return int64_t(first);
}

void mirror_group_slots(RowMirror& mirror, const SlotGather::PackedGroup& g, Backend* threads, std::vector<int64_t>& slots,
                        std::vector<int64_t>& copies) {
  constexpr int64_t kUnknown = -2;
  const int64_t n = int64_t(g.rows.size());
  slots.assign(size_t(n), kUnknown);
  // The runs lie in the group in the order they were placed, each a range of rows; the rows between them, and the
  // rows of a run the mirror does not give a slot (not remembered, or rewritten since: a window ring's newest row),
  // are looked up one by one. The runs are found on the host's threads where given (find_run only reads; a
  // 256-sequence decode step has ~5k runs a layer, ~160k rows).
  int64_t next = 0;
  for (const SlotGather::PackedGroup::Run& run : g.runs) {
    DI_CHECK(run.first >= next && run.first + run.n <= n);
    next = run.first + run.n;
  }
  std::vector<char> whole(g.runs.size());
  auto find_runs = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const SlotGather::PackedGroup::Run& run = g.runs[size_t(i)];
      whole[size_t(i)] = mirror.find_run(run.stamps, run.n, &slots[size_t(run.first)]) == run.n;
    }
  };
  if (threads && g.runs.size() > 1) {
    threads->for_rows(int64_t(g.runs.size()), find_runs);
  } else {
    find_runs(0, int64_t(g.runs.size()));
  }
  std::vector<RowMirror::RowRange> by_row;  // ranges with rows to look up
  next = 0;
  for (size_t i = 0; i < g.runs.size(); ++i) {
    const SlotGather::PackedGroup::Run& run = g.runs[i];
    if (run.first > next) by_row.push_back({next, run.first});
    if (!whole[i]) by_row.push_back({run.first, run.first + run.n});
    next = run.first + run.n;
  }
  if (next < n) by_row.push_back({next, n});
  // Rows [k0, k1) of the ranges, on the host's threads where given (a 256-sequence decode step reads ~160k rows a
  // layer).
  std::atomic<bool> missing = false;
  auto look_up = [&](int64_t k0, int64_t k1) {
    bool any = false;
    auto range = std::lower_bound(by_row.begin(), by_row.end(), k0, [](const auto& r, int64_t k) { return r.second <= k; });
    for (; range != by_row.end() && range->first < k1; ++range) {
      for (int64_t k = std::max(k0, range->first); k < std::min(k1, range->second); ++k) {
        if (slots[size_t(k)] != kUnknown) continue;
        slots[size_t(k)] = mirror.find(g.stamps[size_t(k)]);
        any |= slots[size_t(k)] < 0;
      }
    }
    if (any) missing = true;
  };
  if (threads) {
    threads->for_rows(n, look_up);
  } else {
    look_up(0, n);
  }
  copies.clear();
  bool flushed = false;  // every run's slots are new then, and none is remembered
  if (missing) {
    const int64_t flushes = mirror.n_flushes();
    mirror.place_missing(g.stamps, slots, by_row, copies);  // only by_row's rows may be missing
    flushed = mirror.n_flushes() != flushes;
  }
  for (size_t i = 0; i < g.runs.size(); ++i) {
    const SlotGather::PackedGroup::Run& run = g.runs[i];
    if (flushed || !whole[i]) mirror.remember_run(run.stamps, run.n, &slots[size_t(run.first)]);
  }
}

}  // namespace deepinfer
