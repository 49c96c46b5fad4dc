#include "backend/index_key_arrays.h"

#include <algorithm>

#include "core/status.h"
#include "model/kv_format.h"

namespace deepinfer {

void IndexKeyArrays::plan(std::span<const IndexScoreParams> batch) {
  arrays_.clear();
  token_array_.resize(batch.size());
  index_.reset(int64_t(batch.size()));
  max_keys_ = total_keys_ = 0;
  // A batch at decode has one array per sequence (256 at batch 256): found by address, not by a scan.
  for (size_t t = 0; t < batch.size(); ++t) {
    const IndexScoreParams& p = batch[t];
    DI_CHECK_MSG(!p.key_format || p.key_format->n_values == p.dim, "index keys: the packed format's width is not the op's dim");
    const void* address = p.key_format ? static_cast<const void*>(p.key_runs.data()) : static_cast<const void*>(p.keys);
    const auto [a, fresh] = index_.try_emplace(reinterpret_cast<uintptr_t>(address), int32_t(arrays_.size()));
    if (fresh) arrays_.push_back({p.key_format ? nullptr : p.keys, p.key_format, p.key_runs});
    Array& array = arrays_[size_t(a)];
    DI_CHECK_MSG(array.format == p.key_format, "index keys: one key array under two formats");
    array.n_keys = std::max(array.n_keys, p.n_keys);
    token_array_[t] = a;
    max_keys_ = std::max(max_keys_, p.n_keys);
    total_keys_ += p.n_keys;
  }
  n_rows_ = packed_bytes_ = 0;
  for (bool packed : {false, true}) {
    for (Array& a : arrays_) {
      if ((a.format != nullptr) != packed) continue;
      a.first_row = n_rows_;
      n_rows_ += a.n_keys;
      if (packed) {
        a.first_byte = packed_bytes_;
        packed_bytes_ += a.n_keys * a.format->row_bytes;
      }
    }
    if (!packed) n_float_rows_ = n_rows_;
  }
}

}  // namespace deepinfer
