// `response_format: json_schema` as constrained decoding: which vocabulary tokens may come next so that the
// answer stays a valid prefix of a document valid against the schema (format/json_schema_prefix.h), and when
// end-of-sequence is allowed. It reuses json_object's per-model JsonTokenTable (engine/json_mask.h): tokens are
// tried by first-byte group (a group whose first byte is refused costs one check), tokens with leading whitespace
// by their first other byte where whitespace collapses, and inside a free string the plain-text tokens are taken
// without trying them. Cost per call on the V4 vocabulary: bench/json_mask_bench.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/json_mask.h"
#include "format/json_schema_prefix.h"

namespace deepinfer {

// allowed[i] = 1 when token i may come next (allowed is resized to n_vocab). `eos_id` is allowed when the
// document may end here; once it is complete it is the only token allowed. `scratch` is working state.
void json_schema_token_mask(const JsonTokenTable& table, const JsonSchemaPrefixValidator& validator, int32_t eos_id,
                            std::vector<uint8_t>& allowed, JsonSchemaPrefixValidator& scratch);

}  // namespace deepinfer
