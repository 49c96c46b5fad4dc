// PCRE2 wrapper and the Oniguruma -> PCRE2 pattern translation (see unicode_regex.h for the table).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "format/unicode_regex.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include "core/utf8.h"
#include "format/unicode_delta.h"

namespace deepinfer {

namespace {

// Oniguruma's \w, measured against HF tokenizers 0.23.3 over every assigned code point: Alphabetic, M, Nd, Pc,
// plus the Latin-1 superscripts and fractions its ISO-8859-1 ctype table marks as word characters (and,
// unlike Rust's regex, not Join_Control). Code points newer than PCRE2's tables are added by category.
constexpr std::string_view kWordItems = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr std::string_view kHexItems = "0-9a-fA-F";

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Code points some category gained after PCRE2's Unicode version, as a bitmap (all lie below U+40000).
struct NewCodePoints {
  static constexpr char32_t kLimit = 0x40000;
  std::vector<uint64_t> bits = std::vector<uint64_t>(kLimit / 64, 0);
  char32_t min_cp = kLimit;
  NewCodePoints() {
    for (const UnicodeCategoryDelta& d : kUnicodeCategoryDelta) {
      std::string_view r = d.pcre2_ranges;  // "\x{A}-\x{B}\x{C}..."
      size_t i = 0;
      while ((i = r.find("\\x{", i)) != std::string_view::npos) {
        const auto parse = [&](size_t at, size_t* end) {
          const size_t close = r.find('}', at);
          *end = close + 1;
          return static_cast<char32_t>(std::stoul(std::string(r.substr(at, close - at)), nullptr, 16));
        };
        size_t end = 0;
        const char32_t first = parse(i + 3, &end);
        char32_t last = first;
        if (end < r.size() && r[end] == '-') last = parse(end + 4, &end);
        DI_CHECK(last < kLimit);
        for (char32_t cp = first; cp <= last; ++cp) bits[cp / 64] |= 1ull << (cp % 64);
        min_cp = std::min(min_cp, first);
        i = end;
      }
    }
  }
};

const NewCodePoints& new_code_points() {
  static const NewCodePoints table;
  return table;
}

// General_Category property names (Oniguruma matches them loosely: case, spaces, '_' and '-' ignored) ->
// the PCRE2 name and its two-letter categories. Other properties (scripts, binary) pass through unchanged.
struct CategoryName {
  std::string_view loose_name;
  std::string_view pcre2_name;
  std::initializer_list<std::string_view> categories;
};
const CategoryName kCategoryNames[] = {
    {"l", "L", {"Lu", "Ll", "Lt", "Lm", "Lo"}}, {"letter", "L", {"Lu", "Ll", "Lt", "Lm", "Lo"}},
    {"lu", "Lu", {"Lu"}}, {"uppercaseletter", "Lu", {"Lu"}}, {"ll", "Ll", {"Ll"}}, {"lowercaseletter", "Ll", {"Ll"}},
    {"lt", "Lt", {"Lt"}}, {"titlecaseletter", "Lt", {"Lt"}}, {"lm", "Lm", {"Lm"}}, {"modifierletter", "Lm", {"Lm"}},
    {"lo", "Lo", {"Lo"}}, {"otherletter", "Lo", {"Lo"}}, {"l&", "L&", {"Lu", "Ll", "Lt"}},
    {"lc", "L&", {"Lu", "Ll", "Lt"}}, {"casedletter", "L&", {"Lu", "Ll", "Lt"}},
    {"m", "M", {"Mn", "Mc", "Me"}}, {"mark", "M", {"Mn", "Mc", "Me"}}, {"combiningmark", "M", {"Mn", "Mc", "Me"}},
    {"mn", "Mn", {"Mn"}}, {"nonspacingmark", "Mn", {"Mn"}}, {"mc", "Mc", {"Mc"}}, {"spacingmark", "Mc", {"Mc"}},
    {"me", "Me", {"Me"}}, {"enclosingmark", "Me", {"Me"}},
    {"n", "N", {"Nd", "Nl", "No"}}, {"number", "N", {"Nd", "Nl", "No"}}, {"nd", "Nd", {"Nd"}},
    {"decimalnumber", "Nd", {"Nd"}}, {"nl", "Nl", {"Nl"}}, {"letternumber", "Nl", {"Nl"}}, {"no", "No", {"No"}},
    {"othernumber", "No", {"No"}},
    {"p", "P", {"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"}}, {"punctuation", "P", {"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"}},
    {"pc", "Pc", {"Pc"}}, {"connectorpunctuation", "Pc", {"Pc"}}, {"pd", "Pd", {"Pd"}}, {"dashpunctuation", "Pd", {"Pd"}},
    {"ps", "Ps", {"Ps"}}, {"openpunctuation", "Ps", {"Ps"}}, {"pe", "Pe", {"Pe"}}, {"closepunctuation", "Pe", {"Pe"}},
    {"pi", "Pi", {"Pi"}}, {"initialpunctuation", "Pi", {"Pi"}}, {"pf", "Pf", {"Pf"}}, {"finalpunctuation", "Pf", {"Pf"}},
    {"po", "Po", {"Po"}}, {"otherpunctuation", "Po", {"Po"}},
    {"s", "S", {"Sm", "Sc", "Sk", "So"}}, {"symbol", "S", {"Sm", "Sc", "Sk", "So"}}, {"sm", "Sm", {"Sm"}},
    {"mathsymbol", "Sm", {"Sm"}}, {"sc", "Sc", {"Sc"}}, {"currencysymbol", "Sc", {"Sc"}}, {"sk", "Sk", {"Sk"}},
    {"modifiersymbol", "Sk", {"Sk"}}, {"so", "So", {"So"}}, {"othersymbol", "So", {"So"}},
    {"z", "Z", {"Zs", "Zl", "Zp"}}, {"separator", "Z", {"Zs", "Zl", "Zp"}}, {"zs", "Zs", {"Zs"}},
    {"spaceseparator", "Zs", {"Zs"}}, {"zl", "Zl", {"Zl"}}, {"lineseparator", "Zl", {"Zl"}}, {"zp", "Zp", {"Zp"}},
    {"paragraphseparator", "Zp", {"Zp"}},
};

const CategoryName* find_category(std::string_view name) {
  std::string loose;
  for (char ch : name) {
    if (ch == ' ' || ch == '_' || ch == '-') continue;
    loose.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  }
  for (const CategoryName& c : kCategoryNames) {
    if (c.loose_name == loose) return &c;
  }
  return nullptr;
}

// A set given as class items: the items inside a class, [items] or [^items] outside one. A negated set
// inside a class cannot be written as items, so it is an error there (unless it is one \P item).
bool emit_set(std::string_view items, bool negated, bool in_class, std::string* out) {
  if (in_class) {
    if (negated) return false;
    *out += items;
    return true;
  }
  *out += negated ? "[^" : "[";
  *out += items;
  *out += "]";
  return true;
}

}  // namespace

std::string unicode_delta_class_items(std::initializer_list<std::string_view> categories) {
  std::string items;
  for (std::string_view c : categories) {
    for (const UnicodeCategoryDelta& d : kUnicodeCategoryDelta) {
      if (d.category == c) items += d.pcre2_ranges;
    }
  }
  return items;
}

bool has_code_points_new_to_pcre2(std::string_view text) {
  const NewCodePoints& table = new_code_points();
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b < 0xE0) continue;  // every new code point is >= U+0800: a 3- or 4-byte sequence
    const size_t len = utf8_sequence_length(text.substr(i));
    if (len < 3) continue;
    const char32_t cp = utf8_decode(text.substr(i), len);
    if (cp >= table.min_cp && cp < NewCodePoints::kLimit && (table.bits[cp / 64] >> (cp % 64) & 1)) return true;
    i += len - 1;
  }
  return false;
}

Result<std::string> onig_pattern_to_pcre2(std::string_view p, bool add_unicode_delta) {
  static const std::string word_items_delta = std::string(kWordItems) +
      unicode_delta_class_items({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Me", "Nd", "Pc"});
  static const std::string digit_items_delta = "\\p{Nd}" + unicode_delta_class_items({"Nd"});
  const std::string word_items = add_unicode_delta ? word_items_delta : std::string(kWordItems);
  const std::string digit_items = add_unicode_delta ? digit_items_delta : std::string("\\p{Nd}");
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;
  const auto unsupported = [&](size_t i, const std::string& what) {
    return Status::error("regex '" + std::string(p) + "': " + what + " at byte " + std::to_string(i) +
                         " is not supported");
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return unsupported(i, "a trailing backslash");
      const size_t at = i;
      const char e = p[++i];
      const bool in_class = class_depth > 0;
      bool ok = true;
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;  // one item, valid in and out of a class
        case 'S': out += "\\P{White_Space}"; break;
        case 'd': ok = emit_set(digit_items, false, in_class, &out); break;
        case 'D': ok = emit_set(digit_items, true, in_class, &out); break;
        case 'w': ok = emit_set(word_items, false, in_class, &out); break;
        case 'W': ok = emit_set(word_items, true, in_class, &out); break;
        case 'h': ok = emit_set(kHexItems, false, in_class, &out); break;
        case 'H': ok = emit_set(kHexItems, true, in_class, &out); break;
        case 'b':  // word boundary on onig's \w (PCRE2's own \b uses its different \w); backspace in a class
        case 'B':
          if (in_class) {
            out += "\\x{08}";
          } else {
            const std::string w = "[" + word_items + "]";
            const std::string boundary = "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
            const std::string not_boundary = "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
            out += e == 'b' ? boundary : not_boundary;
          }
          break;
        case 'p':
        case 'P': {
          const size_t close = p.find('}', i + 1);
          if (i + 1 >= p.size() || p[i + 1] != '{' || close == std::string_view::npos) {
            out += '\\';  // \pL and the like: PCRE2's meaning, no Unicode-version adjustment
            out += e;
            break;
          }
          std::string_view name = p.substr(i + 2, close - i - 2);
          bool negated = e == 'P';
          if (!name.empty() && name[0] == '^') {
            negated = !negated;
            name.remove_prefix(1);
          }
          i = close;
          const CategoryName* category = find_category(name);
          const std::string delta = category != nullptr && add_unicode_delta
                                        ? unicode_delta_class_items(category->categories)
                                        : std::string();
          if (delta.empty()) {  // a single property item works in and out of a class
            out += negated ? "\\P{" : "\\p{";
            out += category != nullptr ? category->pcre2_name : name;
            out += "}";
            break;
          }
          ok = emit_set("\\p{" + std::string(category->pcre2_name) + "}" + delta, negated, in_class, &out);
          break;
        }
        case 'u':
          if (i + 4 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4])) {
            out += "\\x{" + std::string(p.substr(i + 1, 4)) + "}";
            i += 4;
          } else {
            return unsupported(at, "\\u without 4 hex digits");
          }
          break;
        default:
          out += '\\';
          out += e;
      }
      if (!ok) return unsupported(at, "the negated set \\" + std::string(1, e) + " inside a character class");
      continue;
    }
    if (class_depth > 0) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX bracket [:alpha:] inside a class
          const size_t close = p.find(":]", i + 2);
          if (close == std::string_view::npos) return unsupported(i, "an unterminated POSIX class");
          out += p.substr(i, close + 2 - i);
          i = close + 1;
          continue;
        }
        return unsupported(i, "a nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') return unsupported(i, "class intersection &&");
      if (c == ']') --class_depth;
      out += c;
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both engines.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    out += c;
  }
  if (class_depth != 0) return Status::error("regex '" + std::string(p) + "': unterminated character class");
  return out;
}

namespace {

// Per-thread PCRE2 match state (match data, JIT stack), shared by every compiled pattern.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(32, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    DI_CHECK(data != nullptr && context != nullptr && jit_stack != nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
    pcre2_set_match_limit(context, UINT32_MAX);
    pcre2_set_depth_limit(context, UINT32_MAX);
    pcre2_set_heap_limit(context, 1u << 20);  // KiB: 1 GiB, for the interpreter if JIT is unavailable
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

struct UnicodeRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;  // pcre2_jit_match (no per-call sanity checks) is usable
  explicit Code(pcre2_code* c) : code(c), jit(pcre2_jit_compile(c, PCRE2_JIT_COMPLETE) == 0) {}
  Code(const Code&) = delete;
  Code& operator=(const Code&) = delete;
  ~Code() { pcre2_code_free(code); }
};

UnicodeRegex::~UnicodeRegex() = default;

namespace {

Result<pcre2_code*> compile_code(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return Status::error("regex '" + std::string(pattern) + "': " + reinterpret_cast<const char*>(message) +
                         " at offset " + std::to_string(error_offset));
  }
  return code;
}

}  // namespace

Result<std::unique_ptr<UnicodeRegex>> UnicodeRegex::compile_pcre2(std::string_view pattern) {
  auto code = compile_code(pattern);
  if (!code.ok()) return code.status();
  auto regex = std::unique_ptr<UnicodeRegex>(new UnicodeRegex());
  regex->code_ = std::make_unique<Code>(*code);
  return regex;
}

Result<std::unique_ptr<UnicodeRegex>> UnicodeRegex::compile_onig(std::string_view pattern) {
  auto full = onig_pattern_to_pcre2(pattern, /*add_unicode_delta=*/true);
  if (!full.ok()) return full.status();
  auto plain = onig_pattern_to_pcre2(pattern, /*add_unicode_delta=*/false);
  if (!plain.ok()) return plain.status();
  auto regex = compile_pcre2(*full);
  if (!regex.ok()) {
    return Status::error("Oniguruma pattern '" + std::string(pattern) + "' as PCRE2: " + regex.status().message());
  }
  if (*plain != *full) {
    auto code = compile_code(*plain);
    if (!code.ok()) return code.status();
    (*regex)->code_plain_ = std::make_unique<Code>(*code);
  }
  return regex;
}

std::optional<std::pair<size_t, size_t>> UnicodeRegex::find(std::string_view s, size_t start,
                                                           bool may_have_new_code_points) const {
  MatchScratch& scratch = match_scratch();
  const Code& c = (may_have_new_code_points || code_plain_ == nullptr) ? *code_ : *code_plain_;
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const int rc = c.jit ? pcre2_jit_match(c.code, subject, s.size(), start, 0, scratch.data, scratch.context)
                       : pcre2_match(c.code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, scratch.data,
                                     scratch.context);
  if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    DI_CHECK_MSG(false, std::string("PCRE2 match failed: ") + reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
  return std::make_pair(static_cast<size_t>(ov[0]), static_cast<size_t>(ov[1]));
}

void UnicodeRegex::find_all(std::string_view s, bool may_have_new_code_points,
                            std::vector<std::pair<uint32_t, uint32_t>>* matches) const {
  size_t last_end = 0;
  std::optional<size_t> last_match_end;
  while (last_end <= s.size()) {
    const auto m = find(s, last_end, may_have_new_code_points);
    if (!m) return;
    const auto [begin, end] = *m;
    if (begin == end && last_match_end == end) {
      last_end += last_end < s.size() ? std::max<size_t>(1, utf8_sequence_length(s.substr(last_end))) : 1;
      continue;
    }
    last_end = end;
    last_match_end = end;
    matches->emplace_back(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
  }
}

}  // namespace deepinfer
