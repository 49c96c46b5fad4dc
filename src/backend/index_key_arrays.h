// The key arrays of one index_scores_batch on a device (the host side of the CUDA backend's index scores, free
// of any device API so that the CPU tests cover it). A batched decode step's tokens each read their own
// sequence's keys and a prefill block's tokens read prefixes of one array: each distinct array is sent once,
// up to the most keys any of its tokens reads. Rows are numbered as the device holds them: the float arrays'
// rows first, then the packed arrays' (whose bytes a kernel decodes into the rows behind the float ones).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/flat_index.h"

namespace deepinfer {

class IndexKeyArrays {
 public:
  struct Array {
    const float* keys = nullptr;           // float keys, or
    const KvRowFormat* format = nullptr;   // packed keys: their format, and the rows in runs
    std::span<const PackedRowRun> runs;
    int64_t n_keys = 0;                    // the most any of the batch's tokens reads
    int64_t first_row = 0;                 // where its rows sit among the device's decoded keys
    int64_t first_byte = 0;                // packed: where its bytes sit among the packed bytes sent
  };

  // Plans `batch` (ops of one n_heads and dim); the previous plan is dropped.
  void plan(std::span<const IndexScoreParams> batch);

  const std::vector<Array>& arrays() const { return arrays_; }  // in first-use order
  int64_t array_of(int64_t token) const { return token_array_[size_t(token)]; }
  int64_t n_rows() const { return n_rows_; }              // every array's rows
  int64_t n_float_rows() const { return n_float_rows_; }  // rows [0, n_float_rows) come from float arrays
  int64_t packed_bytes() const { return packed_bytes_; }
  int64_t max_keys() const { return max_keys_; }          // the most keys a token reads
  int64_t total_keys() const { return total_keys_; }      // the scores the batch writes

 private:
  FlatIndex index_{4};  // an array's address (keys, or runs.data()) -> its index in arrays_
  std::vector<Array> arrays_;
  std::vector<int64_t> token_array_;
  int64_t n_rows_ = 0, n_float_rows_ = 0, packed_bytes_ = 0, max_keys_ = 0, total_keys_ = 0;
};

}  // namespace deepinfer
