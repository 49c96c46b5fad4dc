// Engram's compressed vocabulary derived from a tokenizer (spec §7.6 step 1, the reference's
// build_compressed_token_map): each id is decoded alone (special tokens kept), the text is normalized
// (engram_normalizer.h) and ids whose keys are equal share one compressed id, numbered in order of first
// appearance. A decode that contains U+FFFD (a partial UTF-8 byte token) is keyed by the raw token string
// instead, and a text that normalizes to "" by the decoded text itself. Does not know model configs.
#pragma once

#include <cstdint>
#include <vector>

#include "format/tokenizer.h"

namespace deepinfer {

struct EngramTokenMap {
  std::vector<int32_t> token_map;  // [tokenizer.vocab_size()] raw id -> compressed id
  int32_t n_compressed = 0;        // number of distinct keys (the compressed vocab size)
};

// Covers ids 0 .. tokenizer.vocab_size()-1, the reference's range(len(tokenizer)).
EngramTokenMap build_engram_token_map(const Tokenizer& tokenizer);

}  // namespace deepinfer
