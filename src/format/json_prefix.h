// Incremental JSON-object prefix validator: fed bytes one at a time, it says whether the text so far can still be
// extended into one valid JSON document whose top-level value is an object (RFC 8259: objects, arrays, strings with
// escapes and \uXXXX, numbers, true/false/null, whitespace; strings must be well-formed UTF-8, with multi-byte
// sequences allowed to be split across feeds). It is a pushdown automaton: a small lexer state plus a stack of the
// open containers. Used for `response_format: json_object` (engine/json_mask.h); it knows nothing about tokens.
// Invariant: after a rejected byte the state is unchanged (a caller can try another byte).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace deepinfer {

// The lexer part of the state (everything but the container stack). Plain data, cheap to copy.
struct JsonLexState {
  enum class Mode : uint8_t {
    kStart,        // before the top-level object: whitespace or '{'
    kKeyOrClose,   // after '{': whitespace, '"' (a key) or '}'
    kKey,          // after ',' in an object: whitespace or '"'
    kColon,        // after a key: whitespace or ':'
    kValue,        // after ':' or ',' in an array: whitespace or a value
    kValueOrClose, // after '[': whitespace, a value or ']'
    kAfterValue,   // after a value in a container: whitespace, ',' or the closer
    kString,       // in a string (is_key says which kind)
    kEscape,       // after '\' in a string
    kHex,          // in \uXXXX: n_pending hex digits left
    kUtf8,         // in a multi-byte UTF-8 sequence: n_pending continuation bytes left, the next in [lo, hi]
    kNumMinus,     // after '-': a digit
    kNumZero,      // a leading 0: '.', 'e'/'E' or the end
    kNumInt,       // integer digits
    kNumDot,       // after '.': a digit
    kNumFrac,      // fraction digits
    kNumExp,       // after 'e': a sign or a digit
    kNumExpSign,   // after the exponent's sign: a digit
    kNumExpDigits, // exponent digits
    kLiteral,      // in true / false / null: literal[n_pending] is the next byte
    kDone,         // the top-level object is closed: only whitespace
  };
  Mode mode = Mode::kStart;
  bool is_key = false;          // kString / kEscape / kHex / kUtf8: the string is an object key
  uint8_t n_pending = 0;        // kHex, kUtf8: bytes left; kLiteral: index into literal
  uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // kUtf8: the range of the next continuation byte
  const char* literal = nullptr;           // kLiteral: "true", "false" or "null"
};

class JsonPrefixValidator {
 public:
  static constexpr int kMaxDepth = 64;  // deeper nesting is refused (a bound on the stack, not JSON's)

  JsonPrefixValidator() { stack_.reserve(kMaxDepth); }  // feeding never allocates

  // Feeds one byte; false (state unchanged) if no valid document starts with the bytes fed so far plus this one.
  bool feed(uint8_t byte);
  // Feeds bytes until one is refused; false then, and the state is the one before `bytes` (all or nothing).
  bool feed(std::string_view bytes);
  // True when the bytes so far are a complete document (the object is closed; trailing whitespace allowed).
  bool complete() const { return lex_.mode == JsonLexState::Mode::kDone; }
  // True when `bytes` could follow the current state, without changing it. Allocates nothing.
  bool accepts(std::string_view bytes) const;

  const JsonLexState& lex() const { return lex_; }
  const std::vector<uint8_t>& stack() const { return stack_; }  // '{' or '[' per open container, outermost first

 private:
  JsonLexState lex_;
  std::vector<uint8_t> stack_;
};

// True when `text` is a valid prefix of a JSON-object document (a convenience over JsonPrefixValidator).
bool is_json_object_prefix(std::string_view text);

}  // namespace deepinfer
