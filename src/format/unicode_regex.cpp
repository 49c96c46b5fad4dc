// PCRE2 wrapper and the Oniguruma -> PCRE2 pattern translation (see unicode_regex.h for the table).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "format/unicode_regex.h"

#include <pcre2.h>

#include <algorithm>

#include "core/utf8.h"

namespace deepinfer {

namespace {

constexpr std::string_view kWhiteSpace = "\\p{White_Space}";
constexpr std::string_view kNotWhiteSpace = "\\P{White_Space}";
// Oniguruma's \w, measured against HF tokenizers 0.23.3 over every Unicode 14.0 code point: Alphabetic, M,
// Nd, Pc, plus the Latin-1 superscripts and fractions its ISO-8859-1 ctype table marks as word characters
// (and unlike Rust's regex, not Join_Control).
constexpr std::string_view kWordChars = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr std::string_view kHexChars = "0-9a-fA-F";

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

Result<std::string> onig_pattern_to_pcre2(std::string_view p) {
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
      const char e = p[++i];
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's': out += kWhiteSpace; break;
        case 'S': out += kNotWhiteSpace; break;
        case 'd': out += "\\p{Nd}"; break;
        case 'D': out += "\\P{Nd}"; break;
        case 'w':
          if (in_class) out += kWordChars; else (out += "[") += std::string(kWordChars) + "]";
          break;
        case 'W':
          if (in_class) return unsupported(i, "\\W inside a character class");
          (out += "[^") += std::string(kWordChars) + "]";
          break;
        case 'b':  // word boundary on onig's \w (PCRE2's own \b uses its different \w); backspace in a class
        case 'B':
          if (in_class) {
            out += "\\x{08}";
          } else {
            const std::string w = "[" + std::string(kWordChars) + "]";
            const std::string boundary = "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
            const std::string not_boundary = "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
            out += e == 'b' ? boundary : not_boundary;
          }
          break;
        case 'h':
          if (in_class) out += kHexChars; else (out += "[") += std::string(kHexChars) + "]";
          break;
        case 'H':
          if (in_class) return unsupported(i, "\\H inside a character class");
          (out += "[^") += std::string(kHexChars) + "]";
          break;
        case 'u':
          if (i + 4 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4])) {
            out += "\\x{" + std::string(p.substr(i + 1, 4)) + "}";
            i += 4;
          } else {
            return unsupported(i, "\\u without 4 hex digits");
          }
          break;
        default:
          out += '\\';
          out += e;
      }
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
  ~Code() { pcre2_code_free(code); }
};

UnicodeRegex::~UnicodeRegex() = default;

Result<std::unique_ptr<UnicodeRegex>> UnicodeRegex::compile_pcre2(std::string_view pattern) {
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
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter is used
  auto regex = std::unique_ptr<UnicodeRegex>(new UnicodeRegex());
  regex->code_ = std::make_unique<Code>();
  regex->code_->code = code;
  regex->code_->jit = jit;
  return regex;
}

Result<std::unique_ptr<UnicodeRegex>> UnicodeRegex::compile_onig(std::string_view pattern) {
  auto translated = onig_pattern_to_pcre2(pattern);
  if (!translated.ok()) return translated.status();
  auto regex = compile_pcre2(*translated);
  if (!regex.ok()) {
    return Status::error("Oniguruma pattern '" + std::string(pattern) + "' as PCRE2: " + regex.status().message());
  }
  return regex;
}

std::optional<std::pair<size_t, size_t>> UnicodeRegex::find(std::string_view s, size_t start) const {
  MatchScratch& scratch = match_scratch();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const int rc = code_->jit ? pcre2_jit_match(code_->code, subject, s.size(), start, 0, scratch.data, scratch.context)
                            : pcre2_match(code_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, scratch.data,
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

void UnicodeRegex::find_all(std::string_view s, std::vector<std::pair<uint32_t, uint32_t>>* matches) const {
  size_t last_end = 0;
  std::optional<size_t> last_match_end;
  while (last_end <= s.size()) {
    const auto m = find(s, last_end);
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
