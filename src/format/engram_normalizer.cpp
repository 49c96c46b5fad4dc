#include "format/engram_normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <algorithm>

#include "core/status.h"
#include "format/engram_unicode_delta.h"

namespace deepinfer {

namespace {

template <size_t N>
bool contains(const std::array<char32_t, N>& sorted, UChar32 c) {
  return std::binary_search(sorted.begin(), sorted.end(), char32_t(c));
}

const icu::Normalizer2& normalizer(bool nfkc) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nfkc ? icu::Normalizer2::getNFKCInstance(err) : icu::Normalizer2::getNFDInstance(err);
  DI_CHECK_MSG(U_SUCCESS(err) && n != nullptr, std::string("ICU normalizer data missing: ") + u_errorName(err));
  return *n;
}

icu::UnicodeString nfd_of_nfkc(const icu::UnicodeString& text) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::UnicodeString nfkc = normalizer(true).normalize(text, err);
  icu::UnicodeString nfd = normalizer(false).normalize(nfkc, err);
  DI_CHECK_MSG(U_SUCCESS(err), std::string("ICU normalize: ") + u_errorName(err));
  return nfd;
}

// tokenizers' StripAccents drops every code point whose General_Category is a Mark (Mn, Mc, Me).
bool icu_is_mark(UChar32 c) { return (U_GET_GC_MASK(c) & U_GC_M_MASK) != 0; }
bool hf_is_mark(UChar32 c) {
  return icu_is_mark(c) ? !contains(kEngramHfKeepsMark, c) : contains(kEngramHfStripsNonMark, c);
}

// tokenizers' Lowercase maps each char alone with Rust's char::to_lowercase: the full, context-free
// mapping (U+0130 -> "i\u0307"; a capital sigma is always "σ", never the final "ς"). ICU's full mapping of
// a one-code-point string in the root locale is the same: no preceding cased letter, so no final sigma.
void icu_append_lowercase(UChar32 c, icu::UnicodeString* out) {
  if (c < 0x80) {
    out->append(UChar32(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  UChar src[2], dst[8];
  int32_t n_src = 0;
  U16_APPEND_UNSAFE(src, n_src, c);
  UErrorCode err = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dst, 8, src, n_src, "", &err);
  DI_CHECK_MSG(U_SUCCESS(err), std::string("u_strToLower: ") + u_errorName(err));
  out->append(dst, n);
}
void hf_append_lowercase(UChar32 c, icu::UnicodeString* out) {
  if (c >= 0x80) {
    const auto it = std::lower_bound(kEngramHfLowercase.begin(), kEngramHfLowercase.end(), char32_t(c),
                                     [](const EngramLowercaseDelta& d, char32_t v) { return d.code_point < v; });
    if (it != kEngramHfLowercase.end() && it->code_point == char32_t(c)) {
      for (char32_t l : it->lowercase) out->append(UChar32(l));
      return;
    }
  }
  icu_append_lowercase(c, out);
}

bool is_white_space(UChar32 c) { return u_isUWhiteSpace(c); }  // Rust char::is_whitespace = White_Space

std::string to_utf8(const icu::UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace

std::string engram_normalize(std::string_view utf8) {
  const icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), int32_t(utf8.size())));
  // NFKC then NFD. Code points HF's tables do not know (no decomposition, combining class 0) are starters
  // that compose with nothing and are never reordered there, so normalizing the runs between them
  // separately and keeping them verbatim is exactly HF's result.
  icu::UnicodeString decomposed;
  int32_t run_begin = 0;
  for (int32_t i = 0; i <= text.length();) {
    const UChar32 c = i < text.length() ? text.char32At(i) : -1;
    if (c >= 0 && !contains(kEngramHfPlainStarters, c)) {
      i += U16_LENGTH(c);
      continue;
    }
    decomposed.append(nfd_of_nfkc(text.tempSubStringBetween(run_begin, i)));
    if (c < 0) break;
    decomposed.append(c);
    i += U16_LENGTH(c);
    run_begin = i;
  }
  // StripAccents, Lowercase.
  icu::UnicodeString lower;
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    i += U16_LENGTH(c);
    if (!hf_is_mark(c)) hf_append_lowercase(c, &lower);
  }
  // Replace([ \t\r\n]+ -> " ").
  icu::UnicodeString collapsed;
  bool in_blank_run = false;
  for (int32_t i = 0; i < lower.length(); ++i) {
    const UChar u = lower.charAt(i);
    const bool blank = u == ' ' || u == '\t' || u == '\r' || u == '\n';
    if (!blank) collapsed.append(u);
    else if (!in_blank_run) collapsed.append(UChar(' '));
    in_blank_run = blank;
  }
  // Replace("^ $" -> sentinel), Strip, Replace(sentinel -> " "): a text that is exactly " " stays " ".
  if (collapsed == icu::UnicodeString(u" ")) return " ";
  int32_t begin = 0, end = collapsed.length();
  while (begin < end && is_white_space(collapsed.char32At(begin))) begin += U16_LENGTH(collapsed.char32At(begin));
  while (end > begin) {
    const int32_t last = collapsed.moveIndex32(end, -1);
    if (!is_white_space(collapsed.char32At(last))) break;
    end = last;
  }
  icu::UnicodeString stripped = collapsed.tempSubStringBetween(begin, end);
  stripped.findAndReplace(icu::UnicodeString(UChar(0xE000)), icu::UnicodeString(u" "));
  return to_utf8(stripped);
}

EngramIcuSteps engram_icu_steps(char32_t c) {
  EngramIcuSteps out;
  const icu::UnicodeString s{UChar32(c)};
  out.is_mark = icu_is_mark(UChar32(c));
  out.combining_class = u_getCombiningClass(UChar32(c));
  UErrorCode err = U_ZERO_ERROR;
  out.nfkc = to_utf8(normalizer(true).normalize(s, err));
  out.nfd_of_nfkc = to_utf8(nfd_of_nfkc(s));
  icu::UnicodeString lower;
  icu_append_lowercase(UChar32(c), &lower);
  out.lowercase = to_utf8(lower);
  return out;
}

std::string engram_icu_unicode_version() {
  UVersionInfo v;
  u_getUnicodeVersion(v);
  return std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]);
}

}  // namespace deepinfer
