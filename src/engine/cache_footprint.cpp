#include "engine/cache_footprint.h"

#include "model/config.h"
#include "model/kv_format.h"

namespace deepinfer {

CacheFootprint cache_footprint_of(const ModelConfig& c, int64_t fresh_bytes, int64_t page_bytes) {
  CacheFootprint f;
  f.fixed_bytes = fresh_bytes;
  f.page_bytes = page_bytes;
  const KvFormats formats = kv_formats_of(c);  // the packed rows SequenceState holds (spec §4.4, §8.3)
  auto add = [&](int ratio, int64_t row_bytes) { f.streams.push_back({ratio, row_bytes, page_bytes / row_bytes}); };
  for (int l = 0; l < c.n_layers; ++l) {  // MTP layers gain rows only through forward_mtp, which serving does not run
    const int ratio = c.compress_ratio(l);
    if (ratio == 0) continue;
    if (c.is_v41()) {
      // spec §5.1: only KV sources own rows: one compressed row and one index key per group.
      if (c.is_kv_source(l)) {
        add(ratio, formats.compressed.row_bytes);
        add(ratio, formats.index_key.row_bytes);
      }
    } else {
      add(ratio, formats.compressed.row_bytes);
      if (ratio == 4) add(ratio, formats.index_key.row_bytes);
    }
  }
  return f;
}

}  // namespace deepinfer
