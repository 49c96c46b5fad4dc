// Incremental JSON-Schema prefix validator: fed bytes one at a time, it says whether the text so far can still be
// extended into one JSON document that is valid against a compiled schema (format/json_schema.h). The grammar is
// RFC 8259's (as format/json_prefix.h, whose UTF-8 and number rules it follows); the schema is checked as the
// bytes come: a value may start only with a kind the schema allows, object keys must be declared properties
// unless other keys are allowed, '}' is refused while a required key is missing, ',' while no key (or no item under
// maxItems) can follow, ']' under minItems, enum/const values are matched byte for byte against their compact
// text. Output restrictions that keep it exact: object keys contain no escapes (raw bytes = the key), a declared
// key may not repeat, integers have no fraction or exponent, and a run of whitespace between tokens is at most
// kMaxWhitespaceRun bytes (a model can otherwise spend its whole budget on whitespace, which JSON allows anywhere
// between tokens). Used for `response_format: json_schema`
// (engine/json_schema_mask.h). Invariant: after a rejected byte the state is unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "format/json_schema.h"

namespace deepinfer {

struct JsonSchemaLexState {
  enum class Mode : uint8_t {
    kValue,         // whitespace or a value governed by `node`
    kValueOrClose,  // after '[': whitespace, a value (governed by `node`) or ']'
    kKeyOrClose,    // after '{': whitespace, '"' or '}'
    kKey,           // after ',' in an object: whitespace or '"'
    kColon,         // after a key: whitespace or ':' (then a value governed by `node`)
    kAfterValue,    // whitespace, ',' or the closer
    kKeyText,       // in a key: `cand` = the properties whose name starts with the bytes so far, `pos` bytes in
    kString,        // in a free string value
    kEscape,        // after '\' in a string
    kHex,           // in \uXXXX: n_pending digits left
    kUtf8,          // in a multi-byte UTF-8 sequence (of a key when in_key): n_pending bytes left, next in [lo, hi]
    kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits,
    kWord,          // in true / false / null: word[n_pending] is the next byte
    kLiteral,       // in an enum/const value of `node`: `cand` = literals that start with the bytes so far
    kDone,          // the top-level value is complete: only whitespace
  };
  Mode mode = Mode::kValue;
  bool in_key = false;     // kUtf8: the sequence is in a key
  uint8_t n_ws = 0;        // whitespace bytes since the last other byte (outside strings)
  bool integer_only = false;  // number modes: no fraction or exponent
  uint8_t n_pending = 0;
  uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;
  int32_t node = 0;        // kValue/kValueOrClose/kColon: the value's schema; kLiteral: the literal node
  uint32_t pos = 0;        // kKeyText, kLiteral: bytes matched
  uint64_t cand = 0;       // kKeyText, kLiteral: candidate set
  const char* word = nullptr;
};

// One open container: its (plain) schema node, and what has been seen in it. No member initialisers on purpose:
// accepts() keeps an uninitialised scratch array of these, and every frame is built with all four fields.
struct JsonSchemaFrame {
  int32_t node;
  bool is_object;
  uint64_t seen;     // objects: declared properties present so far
  int64_t n_items;   // arrays: items started so far
};

class JsonSchemaPrefixValidator {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxWhitespaceRun = 32;  // newline + indentation of pretty-printed JSON fits easily

  explicit JsonSchemaPrefixValidator(std::shared_ptr<const CompiledJsonSchema> schema);

  bool feed(uint8_t byte);                 // false (state unchanged) if no valid document starts so
  bool feed(std::string_view bytes);       // all or nothing
  bool accepts(std::string_view bytes) const;  // could `bytes` follow? Allocates nothing, changes nothing
  // The top-level value is finished: only whitespace may follow.
  bool complete() const { return lex_.mode == JsonSchemaLexState::Mode::kDone; }
  // The document may end here (complete, or a top-level number that could also go on).
  bool can_end() const;
  // Any string text without '"', '\\' or control bytes (whole UTF-8 characters) may follow, leaving the mode as is.
  bool in_free_string() const;
  // One whitespace byte leads to the same state whichever it is, and further whitespace changes nothing but the
  // count of whitespace_left().
  bool whitespace_collapses() const;
  // whitespace_collapses(): how many more whitespace bytes may come before another byte must.
  int whitespace_left() const { return kMaxWhitespaceRun - int(lex_.n_ws); }

  const JsonSchemaLexState& lex() const { return lex_; }

 private:
  std::shared_ptr<const CompiledJsonSchema> schema_;
  JsonSchemaLexState lex_;
  std::vector<JsonSchemaFrame> stack_;
};

}  // namespace deepinfer
