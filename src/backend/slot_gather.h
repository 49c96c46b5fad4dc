// The rows a batch of sparse attentions reads, gathered once (the host side of a device backend's attention,
// free of any device API so that the CPU tests cover it). Consecutive prompt tokens share most of their
// window and compressed rows, and a batched decode step's tokens share nothing but are sent together: each
// distinct row is placed once (except a token's marked SparseAttentionParams::rows_unshared, placed without looking
// for them among the others'), float rows first in first-use order, then packed cache rows grouped by format
// (a device decodes each group with one launch) in first-use order within their group. Every token's slot
// list becomes row indices, padded with empty slots (-1) to the longest list. A token whose compressed slots the
// device builds from a kept selection (SparseAttentionParams::kept_selection) has every row the selection may name
// gathered too, as a table: the rows' r-th -> its row index, for the device to look the selection up in. Those rows
// are placed a page run at a time (a run seen before with as many rows is placed once), not looked up row by row:
// a row that a slot names too is then placed twice, which costs its bytes twice at most (the row mirror keeps one
// copy by its stamp). A decode token's window ring (SparseAttentionParams::window_ring) is placed the same way, whole,
// and its window slots by their places in it. A batched decode step (every token rows_unshared) may be gathered on
// host threads: at batch 256 a layer's ~168k rows take ~0.6 ms of one thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/row_mirror.h"
#include "core/flat_index.h"
#include "model/kv_format.h"

namespace deepinfer {

class SlotGather {
 public:
  struct PackedGroup {
    KvRowFormat format;
    std::vector<const uint8_t*> rows;       // in first-use order
    std::vector<uint64_t> stamps;           // rows[k]'s write stamp (PackedSlot::stamp)
    // The kept selections' page runs placed in the group: rows [first, first + n) are the run's, with the stamps
    // at `stamps` (PackedRowRun::stamps, the model's array), so that a row mirror can look the run up whole.
    struct Run {
      const uint64_t* stamps = nullptr;
      int64_t n = 0;
      int64_t first = 0;
    };
    std::vector<Run> runs;
    // Appends the first n rows of `run` (of this group's format) as one run; returns the place of its first row.
    int64_t append_run(const PackedRowRun& run, int64_t n);
    // The first n rows of `run` and their stamps written at rows [at, at + n) (no run recorded).
    void write_run(int64_t at, const PackedRowRun& run, int64_t n);
    int64_t first_row = 0;                  // the row index of rows[0]
    int64_t first_byte = 0;                 // its bytes' offset among all packed rows' bytes
  };

  // Gathers the rows of `batch` (tokens sharing head_dim); the previous gather is dropped. With `threads`, a batch of
  // at least kThreadedTokens tokens, every one rows_unshared, is gathered on the threads: each token's rows counted,
  // the groups laid out, then each token's rows, slot rows and table written where they go. The same rows, groups,
  // runs, slot rows and tables as on one thread, except that a run two tokens hold (a page two sequences share) is
  // placed for each.
  void gather(std::span<const SparseAttentionParams> batch, Backend* threads = nullptr);
  static constexpr int64_t kThreadedTokens = 32;

  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_slots() const { return n_slots_; }                      // the longest slot list
  const std::vector<int32_t>& slot_rows() const { return slot_rows_; }  // [n_tokens, n_slots], -1 = empty
  const std::vector<const float*>& float_rows() const { return float_rows_; }  // rows [0, n_float)
  const std::vector<PackedGroup>& packed_groups() const { return groups_; }    // rows [n_float, n_rows)
  // The kept selections' tables one after another, token t's (n_rows of its kept_selection) from
  // selection_table_at(t), which is -1 for a token without one.
  const std::vector<int32_t>& selection_tables() const { return selection_tables_; }
  int64_t selection_table_at(int64_t token) const { return selection_table_at_[size_t(token)]; }
  int64_t n_rows() const { return n_rows_; }
  int64_t packed_bytes() const { return packed_bytes_; }

 private:
  struct AloneSink;
  struct CountSink;
  struct PlaceSink;
  void gather_alone(std::span<const SparseAttentionParams> batch);
  bool gather_threaded(std::span<const SparseAttentionParams> batch, Backend* threads);  // false: nothing gathered
  void drop_groups();     // groups_ emptied into spare_groups_
  void lay_out_groups();  // each group's first_row and first_byte, n_rows_ and packed_bytes_
  int32_t group_with(const KvRowFormat& format);  // the group of rows of `format` (made on its first use)
  std::pair<int32_t, int32_t> add_packed(const PackedSlot& packed, int64_t head_dim);
  int32_t group_of(const KvRowFormat* format, int64_t head_dim);
  int32_t add_row(const float* row, const PackedSlot& packed, int64_t head_dim);  // -1, a row index, or -2 - k
  int32_t place_row(const float* row, const PackedSlot& packed, int64_t head_dim);  // the same, placed anew
  int32_t place_ring(const PackedRowRun& ring, const KvRowFormat& format, int64_t head_dim);
  std::pair<int32_t, int32_t> add_run(const PackedRowRun& run, int64_t n, const KvRowFormat& format, int64_t head_dim);

  int64_t n_tokens_ = 0, n_slots_ = 0, n_rows_ = 0, packed_bytes_ = 0;
  std::vector<int32_t> slot_rows_;
  std::vector<const float*> float_rows_;
  std::vector<PackedGroup> groups_;
  std::vector<PackedGroup> spare_groups_;  // emptied groups of earlier calls, their vectors' capacity kept
  const KvRowFormat* last_format_ = nullptr;  // the format object of the packed row placed last, and its group
  int64_t last_group_ = 0;
  FlatIndex index_{6};  // a row's address -> its index (a packed row's: -2 - k until placed); rows are >= 68 B apart
  std::vector<std::pair<int32_t, int32_t>> packed_at_;  // the k-th packed row: its group and place there
  FlatIndex run_index_{6};  // a run's first row address and its length -> its entry in placed_runs_
  std::vector<std::pair<int32_t, int32_t>> placed_runs_;  // a placed run's group and its first row's place there
  std::vector<int32_t> selection_tables_;
  // A token's table entries [begin, end) are places in `group` until the groups are laid out.
  struct TableGroup {
    int64_t begin = 0, end = 0;
    int32_t group = 0;
  };
  std::vector<TableGroup> table_groups_;
  std::vector<int64_t> selection_table_at_;
  // gather_threaded: what each token places, by the formats of its packed rows (in first-use order), and where.
  static constexpr int kMaxTokenFormats = 4;
  struct TokenPlan {
    int64_t n_float = 0, float_at = 0;
    struct Format {
      const KvRowFormat* format = nullptr;
      int64_t n_rows = 0, n_runs = 0;
      int32_t group = 0;
      int64_t row_at = 0, run_at = 0;  // where the token's rows and runs start in the group
    };
    Format formats[kMaxTokenFormats];
    int n_formats = 0;
    bool too_many_formats = false;
  };
  std::vector<TokenPlan> plans_;
};

// A gathered packed group's slots in a row mirror (a device backend's attention call with its rows mirrored): each of
// the group's runs that the mirror remembers whole (RowMirror::find_run), every other row by its stamp (find; both on
// `threads`' host threads where given), then place_missing over the rows looked up (the indices of the rows to copy go
// to `copies`), and the group's runs remembered for the next call.
void mirror_group_slots(RowMirror& mirror, const SlotGather::PackedGroup& g, Backend* threads, std::vector<int64_t>& slots,
                        std::vector<int64_t>& copies);

}  // namespace deepinfer
