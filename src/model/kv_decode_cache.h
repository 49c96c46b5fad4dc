// Per-call float copies of packed cache rows (sequence_state.h), for the backend ops that take floats.
// RowDecodeCache decodes a row the first time a token asks for it and keeps it at the same address until
// clear(), so the slot pointer lists handed to sparse_attention stay valid and a row several tokens select
// is decoded once; binding another chunk's rows keeps the rows decoded so far, so the tokens of several
// chunks can go to the backend in one call. KeyDecodeCache decodes index keys contiguously ([n_keys, dim], what index_scores
// reads), growing as later tokens of a chunk see more keys: once per chunk, not once per query token.
// Neither owns or changes the packed rows; bind after the call has appended its rows. Rows come either from a
// contiguous array (window rings) or from PagedRows (compressed rows, index keys). AttentionSlotRows collects
// the slot lists an attention call hands to the backend, cache rows decoded or packed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/flat_index.h"
#include "model/kv_format.h"
#include "model/paged_rows.h"
#include "model/sequence_state.h"

namespace deepinfer {

class RowDecodeCache {
 public:
  // rows: [n_rows, format.row_bytes]. Rows decoded under an earlier binding stay valid; a binding of another
  // row width needs an empty cache.
  void bind(const KvRowFormat& format, const uint8_t* rows, int64_t n_rows);
  // rows.row_bytes() == format.row_bytes; the rows are read in place, page by page.
  void bind(const KvRowFormat& format, const PagedRows& rows);
  const float* row(int64_t j);  // [format.n_values]
  // row(j)'s address, its decode left to decode_reserved() (a batched decode step's rows then decode on the
  // backend's threads): the row must not be read before that.
  const float* reserve(int64_t j);
  // Decodes every row reserve() left undecoded, on the backend's threads (Backend::for_rows).
  void decode_reserved(Backend& backend);
  // Drops every decoded row (their storage is reused); the binding stays. No reserved row may be pending.
  void clear();
  int64_t n_decoded() const { return n_decoded_; }

 private:
  static constexpr int64_t kRowsPerBlock = 32;
  float* row_at(int64_t slot);
  int32_t assign_slot(int64_t j);  // a new slot for row j of the binding (-1 in slot_of_row_ before)
  const uint8_t* source(int64_t j) const { return paged_ ? paged_->row(j) : rows_ + j * format_.row_bytes; }
  struct Reserved {
    const uint8_t* row;  // the packed row (bindings change between reserve() and its decode)
    KvRowFormat format;
    int32_t slot;
  };
  std::vector<Reserved> reserved_;
  KvRowFormat format_;
  const uint8_t* rows_ = nullptr;       // contiguous rows, or
  const PagedRows* paged_ = nullptr;    // paged rows
  std::vector<int32_t> slot_of_row_;              // [n_rows] decoded slot, -1 = not yet
  std::vector<std::unique_ptr<float[]>> blocks_;  // [kRowsPerBlock, n_values] each, kept across binds
  int64_t n_decoded_ = 0;
};

// The slot rows of pending attention tokens, one list after another: rows computed in the call (floats, or
// nullptr for an empty slot) and cache rows, either decoded by a RowDecodeCache or, for a backend that takes
// cache rows packed (Backend::takes_packed_rows), handed over as their bytes (packed() beside rows()).
class AttentionSlotRows {
 public:
  explicit AttentionSlotRows(bool packed) : packed_(packed) {}
  void push(const float* row) {
    rows_.push_back(row);
    if (packed_) packed_rows_.push_back({});
  }
  // Row j of the cache bound to `cache`, whose bytes are `row` in `format` (which must outlive the slots) and
  // whose write stamp is `stamp`; as floats, call cache.decode_reserved() before the rows are read.
  void push_cached(RowDecodeCache& cache, int64_t j, const uint8_t* row, const KvRowFormat& format, uint64_t stamp) {
    if (packed_) {
      rows_.push_back(nullptr);
      packed_rows_.push_back({row, &format, stamp});
    } else {
      rows_.push_back(cache.reserve(j));  // decoded by the cache's decode_reserved() before the rows are read
    }
  }
  size_t size() const { return rows_.size(); }
  std::span<const float* const> rows() const { return rows_; }
  std::span<const PackedSlot> packed() const { return packed_rows_; }  // empty unless packed
  void clear() {
    rows_.clear();
    packed_rows_.clear();
  }

 private:
  bool packed_;
  std::vector<const float*> rows_;
  std::vector<PackedSlot> packed_rows_;
};

// Rows [0, n_rows) of `rows` as runs of consecutive rows, one per page (IndexScoreParams::key_runs).
std::vector<PackedRowRun> packed_row_runs(const PagedRows& rows, int64_t n_rows);

// A layer's window ring as one run of packed rows (SparseAttentionParams::window_ring) once every slot of it has been
// written, else an empty run (n_rows 0).
PackedRowRun whole_window_ring(const LayerState& ls);

class KeyDecodeCache {
 public:
  // Rebinds (dropping what was decoded) only when `rows` / `owner` differ from the bound ones.
  void bind(const KvRowFormat& format, const PagedRows& rows, const void* owner);
  const float* keys(int64_t n_keys);  // [n_keys, format.n_values]; valid until the next keys() / bind()

 private:
  KvRowFormat format_;
  const PagedRows* rows_ = nullptr;
  const void* owner_ = nullptr;
  std::unique_ptr<float[]> decoded_;  // [capacity_, format_.n_values]
  int64_t capacity_ = 0;
  int64_t n_decoded_ = 0;
};

// One query token's index scores (spec I7-I9) against rows [0, n_keys) of a key cache (`rows` in `format`, the cache
// of `owner`), and for IndexKeySet::select its top-k selection. select.score's q [n_heads, dim], weights [n_heads],
// n_keys, scores [n_keys] and q_kept are the query's (IndexKeySet sets the heads, the dim and the keys); the rest of
// select is backend.h's IndexSelectParams.
struct IndexQuery {
  const KvRowFormat* format = nullptr;
  const PagedRows* rows = nullptr;
  const void* owner = nullptr;
  IndexSelectParams select;
};

// The index keys that a block of query tokens scores against, for one index_scores_batch over the whole block
// (a batched decode step's sequences: one wait on a GPU, not one per sequence). Each distinct key cache is
// decoded once, up to the most keys any token of the block reads of it, or handed over as packed row runs
// (Backend::takes_packed_rows).
class IndexKeySet {
 public:
  explicit IndexKeySet(bool packed) : packed_(packed) {}
  // Scores the block's queries (those with n_keys > 0) in one index_scores_batch. Decoded keys stay for a later
  // block that reads the same cache (a prefill's blocks); the queries' formats must outlive the set.
  void score(Backend& backend, std::span<const IndexQuery> queries, int64_t n_heads, int64_t dim);
  // The same with each query's selection made by the backend (Backend::index_select_batch), where it can: true
  // when it did (the scores are then unwritten), false when it scored the queries only and the caller selects.
  bool select(Backend& backend, std::span<const IndexQuery> queries, int64_t n_heads, int64_t dim);

 private:
  // A token reads rows [0, n_keys) of `rows`, the key cache of `owner`; returns the cache's index in needs_.
  size_t need(const KvRowFormat& format, const PagedRows& rows, const void* owner, int64_t n_keys);
  // Decodes (or lists the packed runs of) every needed cache; call after the last need().
  void prepare();
  // Sets p.keys, or p.key_format and p.key_runs, to cache `handle`'s keys, valid until the next prepare().
  void set_keys(size_t handle, IndexScoreParams& p) const;

  struct Need {
    const KvRowFormat* format;
    const PagedRows* rows;
    const void* owner;
    int64_t n_keys;
  };
  bool packed_;
  std::vector<Need> needs_;
  std::vector<KeyDecodeCache> decoded_;  // [i] holds needs_[i]'s keys (not packed)
  std::vector<const float*> keys_;
  std::vector<std::vector<PackedRowRun>> runs_;  // [i] needs_[i]'s runs (packed)
  FlatIndex cache_index_{4};                      // a cache's address -> its index in needs_
  std::vector<size_t> handles_;                   // score(): query i's cache in needs_
  // Lists the queries' keys (prepare) and makes the score ops of those with keys into ops_, in query order.
  void make_ops(std::span<const IndexQuery> queries, int64_t n_heads, int64_t dim);

  std::vector<IndexScoreParams> ops_;
  std::vector<IndexSelectParams> selects_;
};

}  // namespace deepinfer
