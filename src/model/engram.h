// V4.1 Engram (spec §7.6): the token map into the compressed vocabulary, the per-layer n-gram hash
// (int64 multipliers, primes, offsets) and the table-row lookup. Integer-exact; no floating point here.
// The token map and multipliers come from `engram_token_map.safetensors` in the model folder (the golden
// models ship it); deriving them from tokenizer.json and numpy's PCG64 is not implemented yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace deepinfer {

struct EngramHashing {
  std::vector<int32_t> token_map;              // [vocab] raw id -> compressed id
  int32_t pad = 0;                             // token_map[engram_pad_token_id]
  int max_ngram = 0;                           // n-gram sizes 2..max_ngram
  int n_heads = 0;
  std::vector<std::vector<int64_t>> multipliers;  // [engram layer][max_ngram]
  std::vector<std::vector<int64_t>> primes;       // [engram layer][(max_ngram - 1) * n_heads], (n-gram, head) order
  std::vector<std::vector<int64_t>> offsets;      // same shape: exclusive prefix sums of the layer's primes

  int n_rows_per_token() const { return (max_ngram - 1) * n_heads; }
  // Table rows of one position: `history[n]` is the compressed id at position p - n (n < max_ngram),
  // already padded (pad from the first missing position on). rows: [n_rows_per_token()].
  void rows(int engram_layer, const int32_t* history, int64_t* rows) const;
};

// The primes rule (spec §7.6 step 8): per layer, per n-gram size, the smallest unused primes above
// engram_vocab_size - 1, never reused across layers and heads.
std::vector<std::vector<int64_t>> engram_primes(const ModelConfig& config);

Result<EngramHashing> load_engram_hashing(const ModelConfig& config, const std::string& model_dir);

// Writes table row `row` as exact values (e4m3 x e8m0 per 32), [table.dim].
void engram_table_row(const EngramTable& table, int64_t row, float* out);

}  // namespace deepinfer
