// `response_format: json_object` as constrained decoding: which vocabulary tokens may come next so that the
// answer stays a valid prefix of one JSON object (format/json_prefix.h), and end-of-sequence only once the object
// is complete. JsonTokenTable holds every token's decoded bytes, grouped by first (non-whitespace) byte, computed
// once per model; json_token_mask() then tries only the groups whose first byte the validator accepts, and inside
// a string (the common case) takes the precomputed "plain string text" tokens as allowed without trying them.
// Cost per call on the V4 vocabulary: bench/json_mask_bench.cpp.
// Added tokens (control tokens such as <｜User｜>, </think>, DSML markers) are never allowed in the answer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/json_prefix.h"
#include "format/tokenizer.h"

namespace deepinfer {

struct JsonTokenTable {
  int32_t n_vocab = 0;                                   // the model's vocabulary (logits row length)
  std::string bytes;                                     // every token's decoded bytes, concatenated
  std::vector<uint32_t> offset;                          // [n_vocab + 1]: token i is bytes[offset[i], offset[i+1])
  // Candidate tokens (non-empty, not added tokens). Outside strings every whitespace byte acts alike and a second
  // one changes nothing, so tokens that start with whitespace are grouped by their first other byte.
  std::array<std::vector<int32_t>, 256> by_first_byte;   // tokens that do not start with whitespace
  std::array<std::vector<int32_t>, 256> ws_by_rest_byte; // tokens that do, by their first non-whitespace byte
  std::vector<int32_t> ws_only;                          // tokens of whitespace only
  std::vector<uint16_t> n_leading_ws;                    // [n_vocab]
  std::vector<uint8_t> plain_string;                     // [n_vocab] 1: allowed anywhere inside a string, unchanged state
  std::vector<int32_t> not_plain;                        // the candidates that are not plain_string

  std::string_view token(int32_t id) const { return std::string_view(bytes).substr(offset[size_t(id)], offset[size_t(id) + 1] - offset[size_t(id)]); }
};

JsonTokenTable build_json_token_table(const Tokenizer& tokenizer, int32_t n_vocab);

// allowed[i] = 1 when token i may come next (allowed is resized to n_vocab). `eos_id` is allowed only when the
// object is complete, and then it is the only token allowed.
// `scratch` is working state (reused, so that after warm-up nothing is allocated per token).
void json_token_mask(const JsonTokenTable& table, const JsonPrefixValidator& validator, int32_t eos_id,
                     std::vector<uint8_t>& allowed, JsonPrefixValidator& scratch);

}  // namespace deepinfer
