// UTF-8 helpers: validation, lossy repair and code-point iteration. Owns no state.
// The lossy conversions replace each "maximal subpart" of an ill-formed sequence with one U+FFFD, the
// Unicode-recommended policy that Rust's String::from_utf8_lossy and Python's errors="replace" both follow,
// so text repaired here is byte-identical to what HF `tokenizers` (Rust) produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at the start of `bytes`, or 0 if the first bytes are not one.
size_t utf8_sequence_length(std::string_view bytes);

// True when `bytes` is entirely well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool utf8_is_valid(std::string_view bytes);

// Appends `bytes` to `out`, each maximal ill-formed subpart replaced by U+FFFD (String::from_utf8_lossy).
void append_utf8_lossy(std::string_view bytes, std::string* out);

// Streaming variant: appends the repaired text of the longest prefix of `bytes` whose repair cannot change
// when more bytes arrive, and returns that prefix's length. A trailing incomplete-but-so-far-valid
// sequence (at most 3 bytes) is left unconsumed. With `at_end`, everything is consumed (an incomplete tail
// becomes one U+FFFD, as append_utf8_lossy does).
size_t append_utf8_lossy_prefix(std::string_view bytes, bool at_end, std::string* out);

// Appends the UTF-8 encoding of code point `cp` (must be <= U+10FFFF and not a surrogate).
void append_utf8(char32_t cp, std::string* out);

// Decodes the code point of the well-formed sequence at `bytes[0..n)` where n = utf8_sequence_length.
char32_t utf8_decode(std::string_view bytes, size_t n);

}  // namespace deepinfer
