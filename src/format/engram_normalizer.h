// The text normalizer of Engram's compressed vocabulary (spec §7.6 step 1), as the reference builds it with
// HF `tokenizers`: Sequence[NFKC, NFD, StripAccents, Lowercase, Replace("[ \t\r\n]+" -> " "),
// Replace("^ $" -> U+E000), Strip, Replace(U+E000 -> " ")]. Unicode data comes from ICU, corrected by
// engram_unicode_delta.h to what HF's Rust crates answer where their Unicode versions differ (training saw
// the Rust answers). Input must be well-formed UTF-8 (a tokenizer decode always is). Thread-safe: no state.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer {

std::string engram_normalize(std::string_view utf8);

// ICU's own answers for one code point, before the delta (scripts/gen_engram_unicode_delta.py compares them
// with HF's): General_Category is a Mark; the canonical combining class; NFKC; NFD of that; the full
// lowercase mapping (UTF-8).
struct EngramIcuSteps {
  bool is_mark = false;
  int combining_class = 0;
  std::string nfkc, nfd_of_nfkc, lowercase;
};
EngramIcuSteps engram_icu_steps(char32_t c);
// The Unicode version of the linked ICU, "major.minor.micro".
std::string engram_icu_unicode_version();

}  // namespace deepinfer
