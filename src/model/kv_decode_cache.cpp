// RowDecodeCache / KeyDecodeCache: decode on demand into storage that outlives one token's pointer list.
#include "model/kv_decode_cache.h"

#include <algorithm>

#include "core/status.h"

namespace deepinfer {

void RowDecodeCache::bind(const KvRowFormat& format, const uint8_t* rows, int64_t n_rows) {
  if (format.n_values != format_.n_values) {
    DI_CHECK_MSG(n_decoded_ == 0, "RowDecodeCache: a new row width while rows of the old one are in use (clear first)");
    blocks_.clear();
  }
  format_ = format;
  rows_ = rows;
  paged_ = nullptr;
  slot_of_row_.assign(size_t(n_rows), -1);
}

void RowDecodeCache::clear() {
  DI_CHECK_MSG(reserved_.empty(), "RowDecodeCache::clear with reserved rows not yet decoded");
  std::fill(slot_of_row_.begin(), slot_of_row_.end(), -1);
  n_decoded_ = 0;
}

void RowDecodeCache::bind(const KvRowFormat& format, const PagedRows& rows) {
  DI_CHECK(rows.row_bytes() == format.row_bytes);
  bind(format, nullptr, rows.n_rows());
  paged_ = &rows;
}

int32_t RowDecodeCache::assign_slot(int64_t j) {
  const int32_t slot = int32_t(n_decoded_++);
  if (size_t(slot / kRowsPerBlock) == blocks_.size()) {
    blocks_.push_back(std::make_unique_for_overwrite<float[]>(size_t(kRowsPerBlock * format_.n_values)));  // not zeroed
  }
  slot_of_row_[size_t(j)] = slot;
  return slot;
}

const float* RowDecodeCache::row(int64_t j) {
  DI_CHECK(j >= 0 && j < int64_t(slot_of_row_.size()));
  int32_t slot = slot_of_row_[size_t(j)];
  if (slot < 0) {
    slot = assign_slot(j);
    unpack_kv_row(format_, source(j), row_at(slot));
  }
  return row_at(slot);
}

const float* RowDecodeCache::reserve(int64_t j) {
  DI_CHECK(j >= 0 && j < int64_t(slot_of_row_.size()));
  int32_t slot = slot_of_row_[size_t(j)];
  if (slot < 0) {
    slot = assign_slot(j);
    reserved_.push_back({source(j), format_, slot});
  }
  return row_at(slot);
}

void RowDecodeCache::decode_reserved(Backend& backend) {
  backend.for_rows(int64_t(reserved_.size()), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Reserved& rs = reserved_[size_t(r)];
      unpack_kv_row(rs.format, rs.row, row_at(rs.slot));
    }
  });
  reserved_.clear();
}

float* RowDecodeCache::row_at(int64_t slot) {
  return blocks_[size_t(slot / kRowsPerBlock)].get() + (slot % kRowsPerBlock) * format_.n_values;
}

std::vector<PackedRowRun> packed_row_runs(const PagedRows& rows, int64_t n_rows) {
  DI_CHECK(n_rows <= rows.n_rows());
  std::vector<PackedRowRun> runs;
  for (int64_t j = 0; j < n_rows;) {
    const int64_t n = std::min(rows.contiguous_rows(j), n_rows - j);
    runs.push_back({rows.row(j), n, rows.stamps(j)});
    j += n;
  }
  return runs;
}

PackedRowRun whole_window_ring(const LayerState& ls) {
  if (std::find(ls.window_stamps.begin(), ls.window_stamps.end(), uint64_t(0)) != ls.window_stamps.end()) return {};
  return {ls.window.data(), ls.ring_slots, ls.window_stamps.data()};
}

void KeyDecodeCache::bind(const KvRowFormat& format, const PagedRows& rows, const void* owner) {
  if (&rows == rows_ && owner == owner_) return;
  DI_CHECK(rows.row_bytes() == format.row_bytes);
  if (format.n_values != format_.n_values) {  // capacity_ counts rows of the old width
    decoded_.reset();
    capacity_ = 0;
  }
  format_ = format;
  rows_ = &rows;
  owner_ = owner;
  n_decoded_ = 0;
}

const float* KeyDecodeCache::keys(int64_t n_keys) {
  if (n_keys > n_decoded_) {
    if (capacity_ < n_keys) {  // grown without zeroing: every row below n_keys is written before it is read
      const int64_t capacity = std::max(n_keys, 2 * capacity_);
      auto grown = std::make_unique_for_overwrite<float[]>(size_t(capacity * format_.n_values));
      if (n_decoded_) std::copy_n(decoded_.get(), n_decoded_ * format_.n_values, grown.get());
      decoded_ = std::move(grown);
      capacity_ = capacity;
    }
    DI_CHECK(n_keys <= rows_->n_rows());
    while (n_decoded_ < n_keys) {  // one run of rows per page
      const int64_t n = std::min(rows_->contiguous_rows(n_decoded_), n_keys - n_decoded_);
      unpack_kv_rows(format_, rows_->row(n_decoded_), n, decoded_.get() + n_decoded_ * format_.n_values);
      n_decoded_ += n;
    }
  }
  return decoded_.get();
}

void IndexKeySet::score(Backend& backend, std::span<const IndexQuery> queries, int64_t n_heads, int64_t dim) {
  make_ops(queries, n_heads, dim);
  if (!ops_.empty()) backend.index_scores_batch(ops_);
}

bool IndexKeySet::select(Backend& backend, std::span<const IndexQuery> queries, int64_t n_heads, int64_t dim) {
  make_ops(queries, n_heads, dim);
  if (ops_.empty()) return true;  // no query has a key, and so none selects one
  selects_.clear();
  size_t op = 0;
  for (const IndexQuery& q : queries) {
    if (q.select.score.n_keys == 0) continue;
    selects_.push_back(q.select);
    selects_.back().score = ops_[op++];
  }
  if (backend.index_select_batch(selects_)) return true;
  backend.index_scores_batch(ops_);
  return false;
}

void IndexKeySet::make_ops(std::span<const IndexQuery> queries, int64_t n_heads, int64_t dim) {
  needs_.clear();
  cache_index_.reset(int64_t(queries.size()));
  handles_.resize(queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    const IndexQuery& q = queries[i];
    if (q.select.score.n_keys > 0) handles_[i] = need(*q.format, *q.rows, q.owner, q.select.score.n_keys);
  }
  prepare();
  ops_.clear();
  for (size_t i = 0; i < queries.size(); ++i) {
    const IndexQuery& q = queries[i];
    if (q.select.score.n_keys == 0) continue;
    IndexScoreParams& op = ops_.emplace_back(q.select.score);
    op.n_heads = n_heads;
    op.dim = dim;
    set_keys(handles_[i], op);
  }
}

size_t IndexKeySet::need(const KvRowFormat& format, const PagedRows& rows, const void* owner, int64_t n_keys) {
  // A decode step at batch 256 has 256 caches: looked up by address, not by a scan of those seen before.
  const auto [i, fresh] = cache_index_.try_emplace(reinterpret_cast<uintptr_t>(&rows), int32_t(needs_.size()));
  if (fresh) {
    needs_.push_back({&format, &rows, owner, n_keys});
    return needs_.size() - 1;
  }
  Need& n = needs_[size_t(i)];
  DI_CHECK_MSG(n.owner == owner, "IndexKeySet: one key cache under two owners");
  n.n_keys = std::max(n.n_keys, n_keys);
  return size_t(i);
}

void IndexKeySet::prepare() {
  const size_t n = needs_.size();
  if (packed_) {
    runs_.resize(std::max(runs_.size(), n));
    for (size_t i = 0; i < n; ++i) runs_[i] = packed_row_runs(*needs_[i].rows, needs_[i].n_keys);
    return;
  }
  // Cache i binds to the block's i-th key cache: in a prefill that is the same cache block after block, and
  // bind() keeps what it decoded.
  if (decoded_.size() < n) decoded_.resize(n);
  keys_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    decoded_[i].bind(*needs_[i].format, *needs_[i].rows, needs_[i].owner);
    keys_[i] = decoded_[i].keys(needs_[i].n_keys);
  }
}

void IndexKeySet::set_keys(size_t handle, IndexScoreParams& p) const {
  if (packed_) {
    p.keys = nullptr;
    p.key_format = needs_[handle].format;
    p.key_runs = runs_[handle];
  } else {
    p.keys = keys_[handle];
    p.key_format = nullptr;
    p.key_runs = {};
  }
}

}  // namespace deepinfer
