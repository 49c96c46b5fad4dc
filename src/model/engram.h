// V4.1 Engram (spec §7.6): the token map into the compressed vocabulary, the per-layer n-gram hash
// (int64 multipliers, primes, offsets) and the table-row lookup. Integer-exact; no floating point here.
// The token map comes from `engram_token_map.safetensors` when the model folder has it (the golden models
// ship one), else it is derived from the folder's tokenizer.json; the multipliers are always numpy's PCG64
// draws (a side file's must equal them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/tokenizer.h"
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

// From `model_dir`: the side file if present (used exactly as shipped), else tokenizer.json; neither is an error.
Result<EngramHashing> load_engram_hashing(const ModelConfig& config, const std::string& model_dir);
// Derives everything from `tokenizer` (named `tokenizer_name` in errors). The map spans config.vocab_size:
// ids past the tokenizer's last one map to pad. The compressed vocabulary must equal the config's.
Result<EngramHashing> derive_engram_hashing(const ModelConfig& config, const Tokenizer& tokenizer, const std::string& tokenizer_name);
// The hashing for a given token map ([vocab_size] compressed ids): pad, numpy's multipliers, primes and
// offsets (checked against engram_num_embeddings). `source` names the map's origin in errors.
Result<EngramHashing> engram_hashing_for_map(const ModelConfig& config, std::vector<int32_t> token_map, const std::string& source);
// Writes the side-file format (engram.token_map I32 [vocab], engram.multipliers I64 [layers, max_ngram],
// engram.primes / engram.offsets I64 [layers, rows per token]); `note` goes in the file's metadata.
Status write_engram_side_file(const ModelConfig& config, const EngramHashing& hashing, const std::string& path,
                              const std::string& note = "Engram token map derived by deepinfer engram-map (spec 7.6 steps 1-5)");

// Writes table row `row` as exact values (e4m3 x e8m0 per 32), [table.dim].
void engram_table_row(const EngramTable& table, int64_t row, float* out);
// Copies the stored bytes of rows[k] for k in [k0, k1), for a device that decodes them itself: row k's codes to
// codes + k * table.dim, its e8m0 scales to scales + k * (table.dim / 32). Each row must be < table.rows (checked).
void copy_engram_table_rows(const EngramTable& table, const int64_t* rows, int64_t k0, int64_t k1, uint8_t* codes,
                            uint8_t* scales);

}  // namespace deepinfer
