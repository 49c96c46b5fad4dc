#include "format/json_schema_prefix.h"

namespace deepinfer {

namespace {

using Mode = JsonSchemaLexState::Mode;

// The validator's stack as a vector (feed).
struct VectorFrames {
  std::vector<JsonSchemaFrame>& v;
  int depth() const { return int(v.size()); }
  const JsonSchemaFrame& top() const { return v.back(); }
  JsonSchemaFrame& top_mut() { return v.back(); }
  void pop() { v.pop_back(); }
  void push(const JsonSchemaFrame& f) { v.push_back(f); }
};

// A read-only base stack with a small overlay (accepts): a changed or pushed frame lives in `local`, so trying a
// token never copies the stack.
struct OverlayFrames {
  OverlayFrames(const JsonSchemaFrame* base_in, int n_base_in) : base(base_in), n_base(n_base_in) {}
  const JsonSchemaFrame* base;
  int n_base;
  int n_local = 0;
  JsonSchemaFrame local[JsonSchemaPrefixValidator::kMaxDepth + 1];  // uninitialised until written
  int depth() const { return n_base + n_local; }
  const JsonSchemaFrame& top() const { return n_local > 0 ? local[n_local - 1] : base[n_base - 1]; }
  JsonSchemaFrame& top_mut() {
    if (n_local == 0) local[n_local++] = base[--n_base];
    return local[n_local - 1];
  }
  void pop() { n_local > 0 ? --n_local : --n_base; }
  void push(const JsonSchemaFrame& f) { local[n_local++] = f; }
};

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_number_text(const std::string& s) { return !s.empty() && (s[0] == '-' || is_digit(uint8_t(s[0]))); }

// UTF-8 lead bytes as format/json_prefix.cpp takes them (RFC 3629: no overlongs, surrogates or > U+10FFFF):
// false for a byte that cannot start a multi-byte character.
bool utf8_lead(JsonSchemaLexState& s, uint8_t c) {
  auto set = [&](uint8_t n, uint8_t lo, uint8_t hi) {
    s.n_pending = n, s.utf8_lo = lo, s.utf8_hi = hi;
    return true;
  };
  if (c >= 0xC2 && c <= 0xDF) return set(1, 0x80, 0xBF);
  if (c == 0xE0) return set(2, 0xA0, 0xBF);
  if (c == 0xED) return set(2, 0x80, 0x9F);
  if (c >= 0xE1 && c <= 0xEF) return set(2, 0x80, 0xBF);
  if (c == 0xF0) return set(3, 0x90, 0xBF);
  if (c >= 0xF1 && c <= 0xF3) return set(3, 0x80, 0xBF);
  if (c == 0xF4) return set(3, 0x80, 0x8F);
  return false;
}

int kind_of_first_byte(uint8_t c) {
  switch (c) {
    case 'n': return int(JsonKind::kNull);
    case 't': case 'f': return int(JsonKind::kBool);
    case '"': return int(JsonKind::kString);
    case '[': return int(JsonKind::kArray);
    case '{': return int(JsonKind::kObject);
    default: return c == '-' || is_digit(c) ? int(JsonKind::kNumber) : -1;
  }
}

uint64_t all_bits(size_t n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

// The candidates (bit i: names[i]) whose byte at `pos` is `c`.
uint64_t filter(const std::vector<std::string>& names, uint64_t cand, uint32_t pos, uint8_t c) {
  uint64_t out = 0;
  for (uint64_t m = cand; m != 0; m &= m - 1) {
    const int i = __builtin_ctzll(m);
    const std::string& name = names[size_t(i)];
    if (name.size() > pos && uint8_t(name[pos]) == c) out |= uint64_t(1) << i;
  }
  return out;
}

// One byte of the automaton. The stack is changed only on paths that return true, right before returning;
// `s` is the caller's copy (it commits it only on true).
template <class Stack>
bool step(const CompiledJsonSchema& schema, JsonSchemaLexState& s, Stack& st, uint8_t c) {
  const std::vector<JsonSchemaNode>& nodes = schema.nodes;
  if (!is_ws(c)) s.n_ws = 0;
  // Whitespace between tokens, up to the run limit.
  auto take_ws = [&] {
    if (s.n_ws >= JsonSchemaPrefixValidator::kMaxWhitespaceRun) return false;
    ++s.n_ws;
    return true;
  };
  auto after_value = [&] { s.mode = st.depth() == 0 ? Mode::kDone : Mode::kAfterValue; };
  // A key can still be added to the innermost object (a declared one not yet seen, or any other).
  auto key_possible = [&] {
    const JsonSchemaFrame& f = st.top();
    const JsonSchemaNode& n = nodes[size_t(f.node)];
    return n.additional >= 0 || (n.viable_properties & ~f.seen) != 0;
  };
  auto begin_key = [&] {
    if (!key_possible()) return false;
    s.mode = Mode::kKeyText;
    s.cand = all_bits(nodes[size_t(st.top().node)].property_names.size());
    s.pos = 0;
    return true;
  };
  auto close = [&](bool object) {
    if (st.depth() == 0 || st.top().is_object != object) return false;
    const JsonSchemaFrame& f = st.top();
    const JsonSchemaNode& n = nodes[size_t(f.node)];
    if (object ? (n.required & ~f.seen) != 0 : f.n_items < n.min_items) return false;
    st.pop();
    after_value();
    return true;
  };
  // The plain node a value starting with `c` would be governed by under `node`, or -1 if none may start so.
  auto target_of = [&](int32_t node) -> int32_t {
    const int kind = kind_of_first_byte(c);
    if (node < 0 || kind < 0) return -1;
    const int32_t t = nodes[size_t(node)].by_kind[size_t(kind)];
    if (t < 0) return -1;
    const JsonSchemaNode& n = nodes[size_t(t)];
    if (n.has_literals) return filter(n.literals, all_bits(n.literals.size()), 0, c) != 0 ? t : -1;
    if ((c == '{' || c == '[') && st.depth() >= JsonSchemaPrefixValidator::kMaxDepth) return -1;
    return t;
  };
  // Starts the value whose target_of() is t >= 0 (cannot fail).
  auto begin_value = [&](int32_t t) {
    const JsonSchemaNode& n = nodes[size_t(t)];
    if (n.has_literals) {
      s.mode = Mode::kLiteral;
      s.node = t;
      s.cand = filter(n.literals, all_bits(n.literals.size()), 0, c);
      s.pos = 1;
      return true;
    }
    switch (c) {
      case '{':
        st.push(JsonSchemaFrame{t, true, 0, 0});
        s.mode = Mode::kKeyOrClose;
        return true;
      case '[':
        st.push(JsonSchemaFrame{t, false, 0, 0});
        s.mode = Mode::kValueOrClose;
        s.node = n.items;
        return true;
      case '"': s.mode = Mode::kString; return true;
      case 't': case 'f': case 'n':
        s.mode = Mode::kWord;
        s.word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        s.n_pending = 1;
        return true;
      default:
        s.integer_only = n.integer_only;
        s.mode = c == '-' ? Mode::kNumMinus : c == '0' ? Mode::kNumZero : Mode::kNumInt;
        return true;
    }
  };
  // A byte that is not part of the number ends it; it is then read as what follows a value.
  auto end_number = [&] {
    after_value();
    return step(schema, s, st, c);
  };
  switch (s.mode) {
    case Mode::kValue: {
      if (is_ws(c)) return take_ws();
      const int32_t t = target_of(s.node);
      return t >= 0 && begin_value(t);
    }
    case Mode::kValueOrClose: {
      if (is_ws(c)) return take_ws();
      if (c == ']') return close(false);
      const int32_t t = target_of(s.node);
      if (t < 0 || nodes[size_t(st.top().node)].max_items < 1) return false;
      st.top_mut().n_items = 1;
      return begin_value(t);
    }
    case Mode::kKeyOrClose:
      if (is_ws(c)) return take_ws();
      if (c == '"') return begin_key();
      return c == '}' && close(true);
    case Mode::kKey:
      if (is_ws(c)) return take_ws();
      return c == '"' && begin_key();
    case Mode::kColon:
      if (is_ws(c)) return take_ws();
      if (c != ':') return false;
      s.mode = Mode::kValue;
      return true;
    case Mode::kAfterValue: {
      if (is_ws(c)) return take_ws();
      const JsonSchemaFrame& f = st.top();
      if (c == ',') {
        if (f.is_object) {
          if (!key_possible()) return false;
          s.mode = Mode::kKey;
          return true;
        }
        const JsonSchemaNode& n = nodes[size_t(f.node)];
        if (n.items < 0 || f.n_items >= n.max_items) return false;
        st.top_mut().n_items += 1;
        s.mode = Mode::kValue;
        s.node = n.items;
        return true;
      }
      if (c == '}') return close(true);
      return c == ']' && close(false);
    }
    case Mode::kKeyText: {
      const JsonSchemaFrame& f = st.top();
      const JsonSchemaNode& n = nodes[size_t(f.node)];
      if (c == '"') {
        int exact = -1;
        for (uint64_t m = s.cand; m != 0; m &= m - 1) {
          const int i = __builtin_ctzll(m);
          if (n.property_names[size_t(i)].size() == s.pos) exact = i;
        }
        int32_t value_node = n.additional;
        if (exact >= 0) {  // a declared key: once only, and only if its value can be completed
          const uint64_t bit = uint64_t(1) << exact;
          if ((f.seen & bit) != 0 || (n.viable_properties & bit) == 0) return false;
          value_node = n.property_nodes[size_t(exact)];
        }
        if (value_node < 0) return false;
        if (exact >= 0) st.top_mut().seen |= uint64_t(1) << exact;
        s.mode = Mode::kColon;
        s.node = value_node;
        return true;
      }
      if (c == '\\' || c < 0x20) return false;  // no escapes in keys: the raw bytes are the key
      const uint64_t cand = filter(n.property_names, s.cand, s.pos, c);
      if (n.additional < 0 && (cand & n.viable_properties & ~f.seen) == 0) return false;
      if (c >= 0x80) {
        if (!utf8_lead(s, c)) return false;
        s.mode = Mode::kUtf8;
        s.in_key = true;
      }
      s.cand = cand;
      if (s.pos < UINT32_MAX) s.pos += 1;
      return true;
    }
    case Mode::kUtf8: {
      if (c < s.utf8_lo || c > s.utf8_hi) return false;
      if (s.in_key) {
        const JsonSchemaFrame& f = st.top();
        const JsonSchemaNode& n = nodes[size_t(f.node)];
        const uint64_t cand = filter(n.property_names, s.cand, s.pos, c);
        if (n.additional < 0 && (cand & n.viable_properties & ~f.seen) == 0) return false;
        s.cand = cand;
        if (s.pos < UINT32_MAX) s.pos += 1;
      }
      s.utf8_lo = 0x80, s.utf8_hi = 0xBF;
      if (--s.n_pending == 0) s.mode = s.in_key ? Mode::kKeyText : Mode::kString;
      return true;
    }
    case Mode::kString:
      if (c == '"') {
        after_value();
        return true;
      }
      if (c == '\\') {
        s.mode = Mode::kEscape;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) return true;
      if (!utf8_lead(s, c)) return false;
      s.mode = Mode::kUtf8;
      s.in_key = false;
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
      if (c == '.' || c == 'e' || c == 'E') {
        if (s.integer_only) return false;
        s.mode = c == '.' ? Mode::kNumDot : Mode::kNumExp;
        return true;
      }
      return !is_digit(c) && end_number();  // "01" is not a number
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
    case Mode::kWord:
      if (c != uint8_t(s.word[s.n_pending])) return false;
      if (s.word[++s.n_pending] == '\0') after_value();
      return true;
    case Mode::kLiteral: {
      const std::vector<std::string>& literals = nodes[size_t(s.node)].literals;
      const uint64_t next = filter(literals, s.cand, s.pos, c);
      if (next != 0) {
        s.cand = next;
        s.pos += 1;
        // A complete string, array, object or word cannot be the start of another value: it ends here. A
        // complete number may go on (1 / 12), so it ends at the first byte that does not continue any candidate.
        for (uint64_t m = next; m != 0; m &= m - 1) {
          const std::string& lit = literals[size_t(__builtin_ctzll(m))];
          if (lit.size() == s.pos && !is_number_text(lit)) {
            after_value();
            break;
          }
        }
        return true;
      }
      for (uint64_t m = s.cand; m != 0; m &= m - 1) {
        if (literals[size_t(__builtin_ctzll(m))].size() == s.pos) return end_number();
      }
      return false;
    }
    case Mode::kDone:
      return is_ws(c) && take_ws();
  }
  return false;
}

}  // namespace

JsonSchemaPrefixValidator::JsonSchemaPrefixValidator(std::shared_ptr<const CompiledJsonSchema> schema) : schema_(std::move(schema)) {
  stack_.reserve(kMaxDepth);  // feeding never allocates
  lex_.node = schema_->root;
}

bool JsonSchemaPrefixValidator::feed(uint8_t byte) {
  JsonSchemaLexState next = lex_;
  VectorFrames st{stack_};
  if (!step(*schema_, next, st, byte)) return false;
  lex_ = next;
  return true;
}

bool JsonSchemaPrefixValidator::feed(std::string_view bytes) {
  if (!accepts(bytes)) return false;
  for (char c : bytes) feed(uint8_t(c));
  return true;
}

bool JsonSchemaPrefixValidator::accepts(std::string_view bytes) const {
  JsonSchemaLexState s = lex_;
  OverlayFrames st{stack_.data(), int(stack_.size())};
  for (char c : bytes) {
    if (!step(*schema_, s, st, uint8_t(c))) return false;
  }
  return true;
}

namespace {

// A number literal (of node) complete at pos among the candidates.
bool literal_number_complete(const CompiledJsonSchema& schema, const JsonSchemaLexState& s) {
  const std::vector<std::string>& literals = schema.nodes[size_t(s.node)].literals;
  for (uint64_t m = s.cand; m != 0; m &= m - 1) {
    if (literals[size_t(__builtin_ctzll(m))].size() == s.pos) return true;
  }
  return false;
}

bool number_can_end(Mode m) { return m == Mode::kNumZero || m == Mode::kNumInt || m == Mode::kNumFrac || m == Mode::kNumExpDigits; }

}  // namespace

bool JsonSchemaPrefixValidator::can_end() const {
  if (complete()) return true;
  if (!stack_.empty()) return false;
  if (number_can_end(lex_.mode)) return true;
  return lex_.mode == Mode::kLiteral && literal_number_complete(*schema_, lex_);
}

bool JsonSchemaPrefixValidator::in_free_string() const {
  if (lex_.mode == Mode::kString) return true;
  // Inside a key when other keys are allowed: any plain text keeps a key possible (it can always end as an
  // undeclared key), and a clash with a declared key is caught at the closing quote.
  return lex_.mode == Mode::kKeyText && schema_->nodes[size_t(stack_.back().node)].additional >= 0;
}

bool JsonSchemaPrefixValidator::whitespace_collapses() const {
  switch (lex_.mode) {
    case Mode::kValue: case Mode::kValueOrClose: case Mode::kKeyOrClose: case Mode::kKey: case Mode::kColon:
    case Mode::kAfterValue: case Mode::kDone:
      return true;
    case Mode::kLiteral:
      return literal_number_complete(*schema_, lex_);
    default:
      return number_can_end(lex_.mode);
  }
}

}  // namespace deepinfer
