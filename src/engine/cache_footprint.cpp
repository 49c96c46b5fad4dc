#include "engine/cache_footprint.h"

#include "model/config.h"

namespace deepinfer {

CacheFootprint cache_footprint_of(const ModelConfig& c, int64_t fresh_bytes) {
  CacheFootprint f;
  f.fixed_bytes = fresh_bytes;
  const int64_t kFloat = int64_t(sizeof(float));
  for (int l = 0; l < c.n_layers; ++l) {  // MTP layers gain rows only through forward_mtp, which serving does not run
    const int ratio = c.compress_ratio(l);
    if (ratio == 0) continue;
    if (c.is_v41()) {
      // spec §5.1: only KV sources own rows: one compressed row and one index key per group.
      if (c.is_kv_source(l)) f.growth.push_back({ratio, (int64_t(c.head_dim) + c.index_head_dim) * kFloat});
    } else {
      f.growth.push_back({ratio, int64_t(c.head_dim) * kFloat});
      if (ratio == 4) f.growth.push_back({ratio, int64_t(c.index_head_dim) * kFloat});
    }
  }
  return f;
}

}  // namespace deepinfer
