#include "format/json_prefix.h"

namespace deepinfer {

namespace {

using Mode = JsonLexState::Mode;

// The validator's stack as a vector (feed).
struct VectorStack {
  std::vector<uint8_t>& v;
  int depth() const { return int(v.size()); }
  uint8_t top() const { return v.back(); }
  void pop() { v.pop_back(); }
  void push(uint8_t c) { v.push_back(c); }
};

// A read-only base stack with a small overlay of pushes (accepts): trying a token never copies the stack.
struct OverlayStack {
  OverlayStack(const uint8_t* base_in, int n_base_in) : base(base_in), n_base(n_base_in) {}  // `local` left uninitialised
  const uint8_t* base;
  int n_base;
  int n_local = 0;
  uint8_t local[JsonPrefixValidator::kMaxDepth];
  int depth() const { return n_base + n_local; }
  uint8_t top() const { return n_local > 0 ? local[n_local - 1] : base[n_base - 1]; }
  void pop() { n_local > 0 ? --n_local : --n_base; }
  void push(uint8_t c) { local[n_local++] = c; }
};

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// One byte of the automaton. The stack is changed only on the paths that return true, right before returning;
// `s` is the caller's copy (it commits it only on true).
template <class Stack>
bool step(JsonLexState& s, Stack& st, uint8_t c) {
  auto after_value = [&] { s.mode = st.depth() == 0 ? Mode::kDone : Mode::kAfterValue; };
  auto open = [&](uint8_t opener, Mode next) {
    if (st.depth() >= JsonPrefixValidator::kMaxDepth) return false;
    st.push(opener);
    s.mode = next;
    return true;
  };
  auto close = [&](uint8_t opener) {
    if (st.depth() == 0 || st.top() != opener) return false;
    st.pop();
    after_value();
    return true;
  };
  auto literal = [&](const char* word) {
    s.mode = Mode::kLiteral;
    s.literal = word;
    s.n_pending = 1;
    return true;
  };
  auto begin_value = [&] {
    switch (c) {
      case '{': return open('{', Mode::kKeyOrClose);
      case '[': return open('[', Mode::kValueOrClose);
      case '"': s.mode = Mode::kString, s.is_key = false; return true;
      case '-': s.mode = Mode::kNumMinus; return true;
      case '0': s.mode = Mode::kNumZero; return true;
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default:
        if (c >= '1' && c <= '9') {
          s.mode = Mode::kNumInt;
          return true;
        }
        return false;
    }
  };
  auto begin_key = [&] {
    s.mode = Mode::kString;
    s.is_key = true;
    return true;
  };
  auto utf8_lead = [&](uint8_t n, uint8_t lo, uint8_t hi) {
    s.mode = Mode::kUtf8;
    s.n_pending = n;
    s.utf8_lo = lo;
    s.utf8_hi = hi;
    return true;
  };
  // A byte that is not part of the number ends it; it is then read as what follows a value.
  auto end_number = [&] {
    after_value();
    return step(s, st, c);
  };
  switch (s.mode) {
    case Mode::kStart:
      if (is_ws(c)) return true;
      return c == '{' && open('{', Mode::kKeyOrClose);
    case Mode::kKeyOrClose:
      if (is_ws(c)) return true;
      if (c == '"') return begin_key();
      return c == '}' && close('{');
    case Mode::kKey:
      if (is_ws(c)) return true;
      return c == '"' && begin_key();
    case Mode::kColon:
      if (is_ws(c)) return true;
      if (c != ':') return false;
      s.mode = Mode::kValue;
      return true;
    case Mode::kValue:
      if (is_ws(c)) return true;
      return begin_value();
    case Mode::kValueOrClose:
      if (is_ws(c)) return true;
      if (c == ']') return close('[');
      return begin_value();
    case Mode::kAfterValue:
      if (is_ws(c)) return true;
      if (c == ',') {
        s.mode = st.top() == '{' ? Mode::kKey : Mode::kValue;
        return true;
      }
      if (c == '}') return close('{');
      return c == ']' && close('[');
    case Mode::kString:
      if (c == '"') {
        if (s.is_key) s.mode = Mode::kColon;
        else after_value();
        return true;
      }
      if (c == '\\') {
        s.mode = Mode::kEscape;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped
      if (c < 0x80) return true;
      // UTF-8 lead bytes (RFC 3629 table: no overlongs, no surrogates, nothing above U+10FFFF).
      if (c >= 0xC2 && c <= 0xDF) return utf8_lead(1, 0x80, 0xBF);
      if (c == 0xE0) return utf8_lead(2, 0xA0, 0xBF);
      if (c == 0xED) return utf8_lead(2, 0x80, 0x9F);
      if (c >= 0xE1 && c <= 0xEF) return utf8_lead(2, 0x80, 0xBF);
      if (c == 0xF0) return utf8_lead(3, 0x90, 0xBF);
      if (c >= 0xF1 && c <= 0xF3) return utf8_lead(3, 0x80, 0xBF);
      if (c == 0xF4) return utf8_lead(3, 0x80, 0x8F);
      return false;
    case Mode::kUtf8:
      if (c < s.utf8_lo || c > s.utf8_hi) return false;
      s.utf8_lo = 0x80, s.utf8_hi = 0xBF;
      if (--s.n_pending == 0) s.mode = Mode::kString;
      return true;
    case Mode::kEscape:
      if (c == 'u') {
        s.mode = Mode::kHex;
        s.n_pending = 4;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        s.mode = Mode::kString;
        return true;
      }
      return false;
    case Mode::kHex:
      if (!is_hex(c)) return false;
      if (--s.n_pending == 0) s.mode = Mode::kString;
      return true;
    case Mode::kNumMinus:
      if (c == '0') s.mode = Mode::kNumZero;
      else if (c >= '1' && c <= '9') s.mode = Mode::kNumInt;
      else return false;
      return true;
    case Mode::kNumZero:
    case Mode::kNumInt:
      if (is_digit(c) && s.mode == Mode::kNumInt) return true;
      if (c == '.') s.mode = Mode::kNumDot;
      else if (c == 'e' || c == 'E') s.mode = Mode::kNumExp;
      else return !is_digit(c) && end_number();  // "01" is not a number
      return true;
    case Mode::kNumDot:
      if (!is_digit(c)) return false;
      s.mode = Mode::kNumFrac;
      return true;
    case Mode::kNumFrac:
      if (is_digit(c)) return true;
      if (c == 'e' || c == 'E') {
        s.mode = Mode::kNumExp;
        return true;
      }
      return end_number();
    case Mode::kNumExp:
      if (c == '+' || c == '-') s.mode = Mode::kNumExpSign;
      else if (is_digit(c)) s.mode = Mode::kNumExpDigits;
      else return false;
      return true;
    case Mode::kNumExpSign:
      if (!is_digit(c)) return false;
      s.mode = Mode::kNumExpDigits;
      return true;
    case Mode::kNumExpDigits:
      if (is_digit(c)) return true;
      return end_number();
    case Mode::kLiteral:
      if (c != uint8_t(s.literal[s.n_pending])) return false;
      if (s.literal[++s.n_pending] == '\0') after_value();
      return true;
    case Mode::kDone:
      return is_ws(c);
  }
  return false;
}

}  // namespace

bool JsonPrefixValidator::feed(uint8_t byte) {
  JsonLexState next = lex_;
  VectorStack st{stack_};
  if (!step(next, st, byte)) return false;
  lex_ = next;
  return true;
}

bool JsonPrefixValidator::feed(std::string_view bytes) {
  if (!accepts(bytes)) return false;  // all or nothing, without a copy of the stack
  for (char c : bytes) feed(uint8_t(c));
  return true;
}

bool JsonPrefixValidator::accepts(std::string_view bytes) const {
  JsonLexState s = lex_;
  OverlayStack st{stack_.data(), int(stack_.size())};
  for (char c : bytes) {
    if (!step(s, st, uint8_t(c))) return false;
  }
  return true;
}

bool is_json_object_prefix(std::string_view text) {
  JsonPrefixValidator v;
  return v.feed(text);
}

}  // namespace deepinfer
