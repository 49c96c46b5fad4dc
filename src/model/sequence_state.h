// Per-sequence state of the V4 forward pass: per layer a 128-slot window ring, the compressor rings,
// the compressed KV rows and the indexer keys; the MTP layer has its own window ring. A fresh
// SequenceState is the golden "fresh sequence state" (empty ring, compressor kv 0 / score -inf, no rows).
// Window rings, compressed rows and index keys are held packed in their serving formats (kv_format.h:
// lossless for the QDQ'd values the model stores); the compressor rings stay fp32 (small, fixed size).
// The rows that grow with the sequence (compressed rows, index keys) live in PagePool pages (paged_rows.h), so a
// copy of a state shares them; the fixed-size parts (rings, Engram history) are plain per-sequence vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv_format.h"
#include "model/paged_rows.h"

namespace deepinfer {

// Rings keep this many slots beyond what the maths needs, so a speculative block of up to this many
// tokens can be verified in one forward and rolled back by truncation (Model::rollback): no slot that an
// accepted position still needs is overwritten by a rejected one.
constexpr int kSpecSlots = 16;

struct CompressorState {
  int ratio = 0;
  int64_t width = 0;               // coff * d
  std::vector<float> kv;           // [ring_rows, width] fp32 C1 outputs, slot = pos mod ring_rows
  std::vector<float> score;        // [ring_rows, width] fp32 C2 outputs (ape included)
  KvRowFormat row_format;          // compressed rows (V4 584 B, V4.1 288 B) or index keys (68 B)
  PagedRows rows;                  // [n_rows, row_format.row_bytes] finished rows, packed, in pool pages
  int64_t n_rows() const { return rows.n_rows(); }
  // V4 ratio 4 pools the previous group too; every ring leaves kSpecSlots for rollback.
  int ring_rows() const { return (ratio == 4 ? 2 * ratio : ratio) + kSpecSlots; }
  const uint8_t* row(int64_t j) const { return rows.row(j); }
  // Packs and appends row n_rows ([row_format.n_values] QDQ'd floats). A value the format cannot hold exactly
  // is a bug and stops the process; so is an exhausted page pool (the engine reserves a step's pages before
  // its forward, evicting prefix-cache snapshots or preempting sequences first).
  void append_row(const float* values);
  void truncate_rows(int64_t n);
};

struct LayerState {
  KvRowFormat window_format;
  std::vector<uint8_t> window;     // [ring_slots, window_format.row_bytes], slot = pos mod ring_slots
  std::vector<uint64_t> window_stamps;  // [ring_slots] each slot's write stamp (PagedRows); 0: never written
  int64_t ring_slots = 0;          // window_size + kSpecSlots
  int64_t slot(int64_t pos) const { return pos % ring_slots; }
  // Positions below this were never written (an SWA bounded replay skipped them, spec §7.10): attention
  // over the window leaves them out. 0 on the exact path.
  int64_t window_valid_from = 0;
  // Packs [window_format.n_values] QDQ'd floats into the slot of `pos`, with a new stamp.
  void store_window_row(int64_t pos, const float* values);
  CompressorState compressor;      // V4 ratio != 0 / V4.1 KV sources: compressed KV rows
  CompressorState index_compressor;  // V4 ratio 4: indexer keys; V4.1 KV sources: index keys in `rows`
};

struct SequenceState {
  int64_t n_tokens = 0;            // main positions already processed
  std::vector<LayerState> layers;
  int64_t n_mtp_tokens = 0;        // MTP positions already processed
  std::vector<LayerState> mtp_layers;  // V4: MTP layer; V4.1: DSpark stage rings
  // V4.1: compressed ids of the latest positions (Engram n-grams; most recent last; max_ngram - 1 +
  // kSpecSlots of them, so a rollback keeps what the next n-grams need).
  std::vector<int32_t> engram_history;
  // Bytes held by this sequence's caches: fixed_bytes() plus n_pages() whole pages (a page shared with a
  // snapshot or another sequence counts here too: this is what the sequence holds, not what it alone owns).
  int64_t cache_bytes() const;
  int64_t fixed_bytes() const;  // packed window rings and their stamps, fp32 compressor rings (not Engram ids: a few ints)
  int64_t n_pages() const;      // pool pages of the rows and keys
  int64_t page_bytes() const;   // 0 when the state has no paged rows
  // Pool pages the main model takes processing n_new more tokens (rows of finished groups; copies of shared
  // tail pages): what the engine makes sure the pool has before a forward.
  int64_t pages_to_grow(int64_t n_new) const;
};

// The fresh state of one sequence (what Model::new_sequence returns), from the config alone. Rows go to `pool`;
// null: a pool of its own with no capacity limit (tests, tools).
SequenceState new_sequence_state(const ModelConfig& config, std::shared_ptr<PagePool> pool = nullptr);

}  // namespace deepinfer
