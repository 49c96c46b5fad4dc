// Bytes of per-sequence cache state as a function of the sequence length, derived from the model config:
// the fixed part (packed window rings, fp32 compressor rings) plus compressed rows / index keys that grow by one row per
// `ratio` tokens. Pure data; the scheduler plans memory with it without touching a SequenceState.
// Invariant: bytes_at(n) == SequenceState::cache_bytes() of a sequence after n main-model tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct ModelConfig;

struct CacheFootprint {
  struct Growth {
    int ratio = 0;          // tokens per row
    int64_t row_bytes = 0;  // bytes added per row
  };
  int64_t fixed_bytes = 0;
  std::vector<Growth> growth;

  int64_t bytes_at(int64_t n_tokens) const {
    int64_t bytes = fixed_bytes;
    for (const Growth& g : growth) bytes += (n_tokens / g.ratio) * g.row_bytes;
    return bytes;
  }
  // Bytes per token of the parts that grow with the sequence (the "global" cache), averaged over groups.
  double bytes_per_token() const {
    double bytes = 0;
    for (const Growth& g : growth) bytes += double(g.row_bytes) / g.ratio;
    return bytes;
  }
};

// `fresh_bytes`: cache_bytes() of Model::new_sequence() (the fixed part, MTP rings included).
CacheFootprint cache_footprint_of(const ModelConfig& config, int64_t fresh_bytes);

}  // namespace deepinfer
