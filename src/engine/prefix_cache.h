// Prefix cache for the V4 family's per-sequence (hybrid) cache: whole SequenceState snapshots taken at prefix
// boundaries (window rings, compressor rings, compressed rows and index keys are all inside one state, so a
// copy taken after token n is exactly the state a cold run has after token n), keyed by the token prefix, LRU
// under a byte budget. A snapshot shares the sequence's row pages (PagedRows copies retain pages, no bytes are
// copied) and copies only the fixed-size rings: its budget counts those copies; the shared pages are counted
// once, in the page pool, and the engine evicts snapshots (evict_lru) when a step needs their pages.
// The engine thread owns it; not thread-safe.
// Invariant: a snapshot is handed out only for a prompt whose first n tokens equal the snapshot's tokens and
// whose prefill layout gives those tokens the same attention layout (LayoutClass), so warm == cold bit for bit.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/sequence_state.h"

namespace deepinfer {

// The attention layout a token was computed with: prompt tokens get their prompt's class, generated (decode)
// tokens get kDecodeLayout. Two tokens with equal classes at the same position are computed identically.
struct LayoutClass {
  int64_t prompt_class = 0;  // class of the prompt tokens
  int64_t n_prompt = 0;      // tokens [0, n_prompt) have prompt_class, the rest the decode class
  int64_t decode_class = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(int64_t budget_bytes) : budget_bytes_(budget_bytes) {}

  struct Match {
    int64_t n_tokens = 0;                  // 0: no hit
    const SequenceState* state = nullptr;  // valid until the next insert()
  };
  // The longest snapshot over tokens[0, n) with n <= max_tokens whose tokens match and whose layout is that of
  // a sequence laid out as `layout`.
  Match lookup(std::span<const int32_t> tokens, int64_t max_tokens, const LayoutClass& layout);
  // Stores a copy of `state` (which has processed exactly tokens) unless an equal snapshot exists or it
  // cannot fit the budget; evicts least recently used snapshots to make room.
  void insert(std::span<const int32_t> tokens, const LayoutClass& layout, const SequenceState& state);

  // Drops the least recently used snapshot (its pages go back to the pool unless someone else holds them);
  // false when there is none.
  bool evict_lru();

  int64_t bytes_used() const { return bytes_used_; }  // fixed-size copies and token lists, not the shared pages
  int64_t n_entries() const { return int64_t(lru_.size()); }

 private:
  struct Entry {
    uint64_t hash = 0;
    std::vector<int32_t> tokens;
    LayoutClass layout;
    SequenceState state;
    int64_t bytes = 0;
  };
  using EntryList = std::list<Entry>;
  static bool compatible(const LayoutClass& cached, const LayoutClass& query, int64_t n_tokens);
  void evict_one();

  int64_t budget_bytes_ = 0;
  int64_t bytes_used_ = 0;
  EntryList lru_;                                                  // most recently used first
  std::unordered_multimap<uint64_t, EntryList::iterator> by_hash_;  // prefix hash (length mixed in) → entry
  std::map<int64_t, int> lengths_;                                  // snapshot lengths present → count
  std::vector<uint64_t> hashes_;                                    // lookup scratch
};

// Hash of tokens[0, n) for every n (out[n]), length mixed in.
void prefix_hashes(std::span<const int32_t> tokens, int64_t max_tokens, std::vector<uint64_t>& out);

}  // namespace deepinfer
