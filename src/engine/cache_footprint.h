// Cache state of one sequence as a function of its length, derived from the model config: the fixed part
// (packed window rings, fp32 compressor rings: per-sequence allocations) plus the paged streams (compressed
// rows, index keys: one row per `ratio` tokens, rows_per_page rows per pool page). Pure data; the scheduler
// plans memory with it without touching a SequenceState or the pool.
// The budget is counted in pages: a resident sequence is charged fixed_pages() for its fixed part (the same
// budget pays for it, rounded up to whole pages) plus the pages its streams hold.
// Invariant: bytes_at(n) == SequenceState::cache_bytes() of a sequence after n main-model tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct ModelConfig;

struct CacheFootprint {
  struct Stream {
    int ratio = 0;              // tokens per row
    int64_t row_bytes = 0;      // packed bytes per row
    int64_t rows_per_page = 0;  // page_bytes / row_bytes
  };
  int64_t fixed_bytes = 0;
  int64_t page_bytes = 0;
  std::vector<Stream> streams;

  // Pool pages the streams hold after n tokens (whole pages: a partly filled tail page counts).
  int64_t pages_at(int64_t n_tokens) const {
    int64_t pages = 0;
    for (const Stream& s : streams) pages += (n_tokens / s.ratio + s.rows_per_page - 1) / s.rows_per_page;
    return pages;
  }
  int64_t fixed_pages() const { return (fixed_bytes + page_bytes - 1) / page_bytes; }
  // What one resident sequence of n tokens is charged against a budget of pages.
  int64_t charge_pages(int64_t n_tokens) const { return fixed_pages() + pages_at(n_tokens); }
  int64_t bytes_at(int64_t n_tokens) const { return fixed_bytes + pages_at(n_tokens) * page_bytes; }
  // Packed bytes per token of the streams (the "global" cache), averaged over groups, page slack left out.
  double bytes_per_token() const {
    double bytes = 0;
    for (const Stream& s : streams) bytes += double(s.row_bytes) / s.ratio;
    return bytes;
  }
};

// `fresh_bytes`: SequenceState::fixed_bytes() of Model::new_sequence() (MTP rings included); `page_bytes`: the
// page size of the pool the sequences' rows live in.
CacheFootprint cache_footprint_of(const ModelConfig& config, int64_t fresh_bytes, int64_t page_bytes);

}  // namespace deepinfer
