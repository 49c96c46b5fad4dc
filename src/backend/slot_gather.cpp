// SlotGather: see slot_gather.h.
#include "backend/slot_gather.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <string>
#include <utility>

#include "core/status.h"

namespace deepinfer {

namespace {

// Token p's rows in the order a gather places them: sink.row(j, row, packed) for slot j's own row (a float row or a
// packed one; not for an empty slot), where p is rows_unshared with a window ring sink.ring(ring, format) before the
// first slot naming a row of it and sink.ring_row(j, i) for slot j naming its row i, then sink.kept_run(run, n,
// format) for the first n rows of each run of its kept selection (whose slots are the device's: left out).
template <class Sink>
void walk_token(const SparseAttentionParams& p, Sink& sink) {
  const KeptSelectionSlots* kept = p.kept_selection;
  DI_CHECK_MSG(!kept || (kept->at >= 0 && kept->n >= 0 && kept->at + kept->n <= p.n_slots),
               "sparse attention: a kept selection's slots lie outside the token's slot list");
  const PackedRowRun* ring = p.rows_unshared ? p.window_ring : nullptr;
  bool ring_placed = false;
  for (int64_t j = 0; j < p.n_slots; ++j) {
    if (kept && j >= kept->at && j < kept->at + kept->n) continue;
    const PackedSlot packed = p.packed ? p.packed[j] : PackedSlot{};
    if (ring && packed.row && packed.row >= ring->rows && packed.row < ring->rows + ring->n_rows * packed.format->row_bytes) {
      if (!ring_placed) sink.ring(*ring, *packed.format);
      ring_placed = true;
      sink.ring_row(j, (packed.row - ring->rows) / packed.format->row_bytes);
    } else if (p.slots[j] || packed.row) {
      sink.row(j, p.slots[j], packed);
    }
  }
  if (!kept) return;
  int64_t left = kept->n_rows;
  for (const PackedRowRun& run : kept->runs) {
    if (left == 0) break;
    const int64_t n = std::min(run.n_rows, left);
    if (n <= 0) continue;
    sink.kept_run(run, n, *kept->format);
    left -= n;
  }
  DI_CHECK_MSG(left == 0, "sparse attention: a kept selection's runs hold fewer rows than n_rows");
}

void check_run(const PackedRowRun& run, int64_t n) {
  DI_CHECK_MSG(n > 0 && n < (int64_t(1) << 16), "sparse attention: a kept selection's page run of " + std::to_string(n) + " rows");
  DI_CHECK_MSG(run.stamps && std::find(run.stamps, run.stamps + n, uint64_t(0)) == run.stamps + n,
               "sparse attention: a kept selection's row without a write stamp");
}

// A page run's key in a FlatIndex: an address of the run (its rows or its stamps) and its length (< 2^16, check_run).
uint64_t run_key(const void* address, int64_t n) {
  return reinterpret_cast<uintptr_t>(address) | uint64_t(n) << 48;  // user-space addresses are < 2^48
}

void check_width(const KvRowFormat& format, int64_t head_dim) {
  DI_CHECK_MSG(format.n_values == head_dim, "packed attention slot: a row of " + std::to_string(format.n_values) +
                                                " values for head_dim " + std::to_string(head_dim));
}

}  // namespace

void SlotGather::gather(std::span<const SparseAttentionParams> batch, Backend* threads) {
  const bool unshared = std::all_of(batch.begin(), batch.end(), [](const SparseAttentionParams& p) { return p.rows_unshared; });
  if (threads && int64_t(batch.size()) >= kThreadedTokens && unshared && gather_threaded(batch, threads)) return;
  gather_alone(batch);
}

void SlotGather::drop_groups() {
  for (PackedGroup& g : groups_) {  // kept with their capacity: a long context's groups hold ~10^4-10^5 rows
    g.rows.clear();
    g.stamps.clear();
    g.runs.clear();
    spare_groups_.push_back(std::move(g));
  }
  groups_.clear();
  last_format_ = nullptr;
}

void SlotGather::lay_out_groups() {
  n_rows_ = int64_t(float_rows_.size());
  packed_bytes_ = 0;
  for (PackedGroup& g : groups_) {
    g.first_row = n_rows_;
    g.first_byte = packed_bytes_;
    n_rows_ += int64_t(g.rows.size());
    packed_bytes_ += int64_t(g.rows.size()) * g.format.row_bytes;
  }
  DI_CHECK_MSG(n_rows_ <= INT32_MAX, "sparse attention: too many rows for one launch");
}

// gather_alone's token: each row placed as it comes (a packed row's index is -2 - k until the groups are laid out),
// a shared token's looked up among those placed; the kept selection's table holds places in its group for now.
struct SlotGather::AloneSink {
  SlotGather& gather;
  int64_t head_dim = 0;
  int32_t* slot_row = nullptr;  // the token's
  bool unshared = false;
  int32_t ring_k0 = -1;     // the k of the ring's first row
  int32_t kept_group = -1;  // the kept selection's group
  void row(int64_t j, const float* row, const PackedSlot& packed) {
    slot_row[j] = unshared ? gather.place_row(row, packed, head_dim) : gather.add_row(row, packed, head_dim);
  }
  void ring(const PackedRowRun& ring, const KvRowFormat& format) { ring_k0 = gather.place_ring(ring, format, head_dim); }
  void ring_row(int64_t j, int64_t i) { slot_row[j] = -2 - (ring_k0 + int32_t(i)); }
  void kept_run(const PackedRowRun& run, int64_t n, const KvRowFormat& format) {
    const auto [group, first] = gather.add_run(run, n, format, head_dim);
    DI_CHECK_MSG(kept_group < 0 || group == kept_group, "sparse attention: a kept selection's runs in two row groups");
    kept_group = group;
    std::vector<int32_t>& tables = gather.selection_tables_;
    const size_t at = tables.size();
    tables.resize(at + size_t(n));
    std::iota(tables.begin() + long(at), tables.end(), first);
  }
};

void SlotGather::gather_alone(std::span<const SparseAttentionParams> batch) {
  n_tokens_ = int64_t(batch.size());
  n_slots_ = 0;
  for (const SparseAttentionParams& p : batch) n_slots_ = std::max(n_slots_, p.n_slots);
  const int64_t head_dim = batch.empty() ? 0 : batch[0].head_dim;
  slot_rows_.assign(size_t(n_tokens_ * n_slots_), -1);
  float_rows_.clear();
  drop_groups();
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
    AloneSink sink{*this, head_dim, slot_rows_.data() + t * n_slots_, p.rows_unshared};
    if (p.kept_selection) selection_table_at_[size_t(t)] = int64_t(selection_tables_.size());
    walk_token(p, sink);
    if (sink.kept_group >= 0) {
      table_groups_.push_back({selection_table_at_[size_t(t)], int64_t(selection_tables_.size()), sink.kept_group});
    }
  }
  lay_out_groups();
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

// gather_threaded's first pass over a token: its float rows, and its packed rows and runs by format (nullptr where it
// has more than kMaxTokenFormats).
struct SlotGather::CountSink {
  TokenPlan& plan;
  int64_t head_dim = 0;
  TokenPlan::Format* of(const KvRowFormat& format) {
    for (int i = 0; i < plan.n_formats; ++i) {
      if (plan.formats[i].format == &format || *plan.formats[i].format == format) return &plan.formats[i];
    }
    check_width(format, head_dim);
    if (plan.n_formats == kMaxTokenFormats) {
      plan.too_many_formats = true;
      return nullptr;
    }
    plan.formats[plan.n_formats].format = &format;
    return &plan.formats[plan.n_formats++];
  }
  void row(int64_t, const float* row, const PackedSlot& packed) {
    if (row) {
      ++plan.n_float;
    } else if (TokenPlan::Format* f = of(*packed.format)) {
      ++f->n_rows;
    }
  }
  void ring(const PackedRowRun& ring, const KvRowFormat& format) {
    check_run(ring, ring.n_rows);
    if (TokenPlan::Format* f = of(format)) {
      f->n_rows += ring.n_rows;
      ++f->n_runs;
    }
  }
  void ring_row(int64_t, int64_t) {}
  void kept_run(const PackedRowRun& run, int64_t n, const KvRowFormat& format) {
    check_run(run, n);
    if (TokenPlan::Format* f = of(format)) {
      f->n_rows += n;
      ++f->n_runs;
    }
  }
};

// gather_threaded's second pass over a token: its rows written from the places its plan gives, with their indices.
struct SlotGather::PlaceSink {
  SlotGather& gather;
  const TokenPlan& plan;
  int32_t* slot_row = nullptr;  // the token's, all -1
  int32_t* table = nullptr;     // the token's kept selection's table
  int64_t next_float = 0;
  int64_t next_row[kMaxTokenFormats] = {}, next_run[kMaxTokenFormats] = {};
  int32_t ring_first = 0;       // the row index of the ring's first row
  int format_index(const KvRowFormat& format) const {
    int i = 0;
    while (plan.formats[i].format != &format && !(*plan.formats[i].format == format)) ++i;  // counted: it is there
    return i;
  }
  // n rows placed from the format's next row on: the row index of the first.
  int32_t place(int i, const PackedRowRun& run, int64_t n) {
    PackedGroup& g = gather.groups_[size_t(plan.formats[i].group)];
    const int64_t k = next_row[i];
    g.write_run(k, run, n);
    g.runs[size_t(next_run[i]++)] = {run.stamps, n, k};
    next_row[i] += n;
    return int32_t(g.first_row + k);
  }
  void row(int64_t j, const float* row, const PackedSlot& packed) {
    if (row) {
      gather.float_rows_[size_t(next_float)] = row;
      slot_row[j] = int32_t(next_float++);
      return;
    }
    const int i = format_index(*packed.format);
    PackedGroup& g = gather.groups_[size_t(plan.formats[i].group)];
    const int64_t k = next_row[i]++;
    g.rows[size_t(k)] = packed.row;
    g.stamps[size_t(k)] = packed.stamp;
    slot_row[j] = int32_t(g.first_row + k);
  }
  void ring(const PackedRowRun& ring, const KvRowFormat& format) { ring_first = place(format_index(format), ring, ring.n_rows); }
  void ring_row(int64_t j, int64_t i) { slot_row[j] = ring_first + int32_t(i); }
  void kept_run(const PackedRowRun& run, int64_t n, const KvRowFormat& format) {
    const int32_t first = place(format_index(format), run, n);
    for (int64_t r = 0; r < n; ++r) *table++ = first + int32_t(r);
  }
};

// A batch of unshared tokens on the threads: each token's rows counted (CountSink), the groups laid out in the order
// one gather makes them (by each token's formats in its first-use order, token after token) with every token's place
// in each, then each token's rows, slot rows and table written there (PlaceSink). A token's rows of a group follow
// the earlier tokens', in the order one gather places them, so the result is one gather's, but for a run two tokens
// hold (placed for each: no run is looked up among the others'). False where a token has rows of more than
// kMaxTokenFormats formats: nothing is gathered then.
bool SlotGather::gather_threaded(std::span<const SparseAttentionParams> batch, Backend* threads) {
  const int64_t T = int64_t(batch.size()), head_dim = batch[0].head_dim;
  plans_.assign(size_t(T), TokenPlan{});
  threads->for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const SparseAttentionParams& p = batch[size_t(t)];
      DI_CHECK(p.head_dim == head_dim);
      CountSink sink{plans_[size_t(t)], head_dim};
      walk_token(p, sink);
    }
  });
  if (std::any_of(plans_.begin(), plans_.end(), [](const TokenPlan& plan) { return plan.too_many_formats; })) return false;
  n_tokens_ = T;
  n_slots_ = 0;
  for (const SparseAttentionParams& p : batch) n_slots_ = std::max(n_slots_, p.n_slots);
  drop_groups();
  selection_table_at_.assign(size_t(T), -1);
  std::vector<int64_t> group_rows, group_runs;  // each group's rows and runs so far
  int64_t n_float = 0, n_table = 0;
  for (int64_t t = 0; t < T; ++t) {
    TokenPlan& plan = plans_[size_t(t)];
    plan.float_at = n_float;
    n_float += plan.n_float;
    const KeptSelectionSlots* kept = batch[size_t(t)].kept_selection;
    if (kept) {
      selection_table_at_[size_t(t)] = n_table;
      n_table += kept->n_rows;
    }
    for (int i = 0; i < plan.n_formats; ++i) {
      TokenPlan::Format& f = plan.formats[i];
      f.group = group_with(*f.format);
      group_rows.resize(groups_.size());
      group_runs.resize(groups_.size());
      f.row_at = group_rows[size_t(f.group)];
      f.run_at = group_runs[size_t(f.group)];
      group_rows[size_t(f.group)] += f.n_rows;
      group_runs[size_t(f.group)] += f.n_runs;
    }
  }
  float_rows_.resize(size_t(n_float));
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].rows.resize(size_t(group_rows[g]));
    groups_[g].stamps.resize(size_t(group_rows[g]));
    groups_[g].runs.resize(size_t(group_runs[g]));
  }
  lay_out_groups();
  slot_rows_.resize(size_t(T * n_slots_));
  selection_tables_.resize(size_t(n_table));
  threads->for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const TokenPlan& plan = plans_[size_t(t)];
      int32_t* slot_row = slot_rows_.data() + t * n_slots_;
      std::fill(slot_row, slot_row + n_slots_, -1);
      const int64_t table_at = selection_table_at_[size_t(t)];
      PlaceSink sink{*this, plan, slot_row, table_at < 0 ? nullptr : selection_tables_.data() + table_at, plan.float_at};
      for (int i = 0; i < plan.n_formats; ++i) {
        sink.next_row[i] = plan.formats[i].row_at;
        sink.next_run[i] = plan.formats[i].run_at;
      }
      walk_token(batch[size_t(t)], sink);
    }
  });
  return true;
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
  const auto [placed, inserted] = run_index_.try_emplace(run_key(run.rows, n), int32_t(placed_runs_.size()));
  if (!inserted) return placed_runs_[size_t(placed)];
  check_run(run, n);
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
  check_width(*format, head_dim);
  last_format_ = format;
  last_group_ = group_with(*format);
  return int32_t(last_group_);
}

int32_t SlotGather::group_with(const KvRowFormat& format) {
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const PackedGroup& g) { return g.format == format; });
  if (it == groups_.end()) {
    if (spare_groups_.empty()) spare_groups_.emplace_back();
    groups_.push_back(std::move(spare_groups_.back()));
    spare_groups_.pop_back();
    groups_.back().format = format;
    it = groups_.end() - 1;
  }
  return int32_t(it - groups_.begin());
}

int64_t SlotGather::PackedGroup::append_run(const PackedRowRun& run, int64_t n) {
  const int64_t first = int64_t(rows.size());
  rows.resize(size_t(first + n));
  stamps.resize(size_t(first + n));
  write_run(first, run, n);
  runs.push_back({run.stamps, n, first});
  return first;
}

void SlotGather::PackedGroup::write_run(int64_t at, const PackedRowRun& run, int64_t n) {
  for (int64_t k = 0; k < n; ++k) rows[size_t(at + k)] = run.rows + k * format.row_bytes;
  std::copy(run.stamps, run.stamps + n, stamps.begin() + at);
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
  for_rows_on(threads, int64_t(g.runs.size()), find_runs);
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
  for_rows_on(threads, n, look_up);
  copies.clear();
  bool flushed = false;  // every run's slots are new then, and none is remembered
  if (missing) {
    const int64_t flushes = mirror.n_flushes();
    mirror.place_missing(g.stamps, slots, by_row, copies);  // only by_row's rows may be missing
    flushed = mirror.n_flushes() != flushes;
  }
  // The runs not found whole remembered anew: those remembered before (a window ring with its newest row rewritten,
  // 256 of them in a batch-256 step) updated in place on the threads, the others added here. A run the group holds
  // twice (a gather on threads places a run for each token holding it) is updated once: both would write the same.
  std::vector<char> handled(g.runs.size(), 0);  // a repeat, or updated in place
  FlatIndex seen(3);
  seen.reset(std::max<int64_t>(int64_t(g.runs.size()), 1));
  for (size_t i = 0; i < g.runs.size(); ++i) {
    if (!seen.try_emplace(run_key(g.runs[i].stamps, g.runs[i].n), 0).second) handled[i] = 1;
  }
  for_rows_on(threads, int64_t(g.runs.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const SlotGather::PackedGroup::Run& run = g.runs[size_t(i)];
      if ((flushed || !whole[size_t(i)]) && !handled[size_t(i)]) handled[size_t(i)] = mirror.update_run(run.stamps, run.n, &slots[size_t(run.first)]);
    }
  });
  for (size_t i = 0; i < g.runs.size(); ++i) {
    const SlotGather::PackedGroup::Run& run = g.runs[i];
    if ((flushed || !whole[i]) && !handled[i]) mirror.remember_run(run.stamps, run.n, &slots[size_t(run.first)]);
  }
}

}  // namespace deepinfer
