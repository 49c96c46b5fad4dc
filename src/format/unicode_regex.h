// UnicodeRegex: a compiled PCRE2 pattern (UTF + UCP, JIT) for the Unicode regexes of tokenizer.json.
// Owns the translation from Oniguruma syntax (what HF `tokenizers` runs them with) to PCRE2 and the
// onig crate's rule for iterating matches. Must not know about tokenizer semantics.
// Invariants: subjects are valid UTF-8 (callers repair input first); matching is thread-safe (match state
// is per thread); there are no match/depth limits, so a match never fails for resource reasons short of
// the 8 MiB JIT stack, which these patterns (no nested quantified groups) never approach.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace deepinfer {

// Translates an Oniguruma (Ruby syntax, UTF-8) pattern to an equivalent PCRE2 pattern:
//   \s \S   onig: Unicode White_Space               PCRE2+UCP: Z + \h + \v (adds U+180E)
//   \d \D   onig: General_Category Nd               PCRE2: same, spelled \p{Nd}
//   \w \W   onig: Alphabetic|M|Nd|Pc + ²³¹¼½¾       PCRE2+UCP (10.42): L|N|_
//   \b \B   onig: boundary on its own \w            PCRE2+UCP: boundary on PCRE2's \w
//   \h \H   onig (Ruby syntax): hex digit            PCRE2: horizontal space
//   \uHHHH  onig: a code point                       PCRE2: unsupported (becomes \x{HHHH})
//   ^ $     onig (Ruby syntax): line anchors         PCRE2: needs PCRE2_MULTILINE (set by compile)
// Nested classes and && intersections (onig only) are rejected with an error naming the pattern.
// Checked code point by code point against HF tokenizers 0.23.3 for \w \s \d \h \p{L,N,P,S,M}: identical
// on every code point assigned in Unicode 14.0 (PCRE2 10.42's version; onig there knows Unicode 16.0).
// Not verified against onig: POSIX brackets, case-insensitive matching, \X, \R, backreferences.
Result<std::string> onig_pattern_to_pcre2(std::string_view pattern);

class UnicodeRegex {
 public:
  // Compiles an Oniguruma-syntax pattern (translated as above).
  static Result<std::unique_ptr<UnicodeRegex>> compile_onig(std::string_view pattern);
  // Compiles a pattern already in PCRE2 syntax.
  static Result<std::unique_ptr<UnicodeRegex>> compile_pcre2(std::string_view pattern);
  ~UnicodeRegex();

  // First match at or after byte `start` (lookbehind may see text before it), as [begin, end).
  std::optional<std::pair<size_t, size_t>> find(std::string_view subject, size_t start = 0) const;
  // All matches as [begin, end), iterated like the onig crate's find_iter: an empty match exactly where
  // the previous match ended is skipped by advancing one character.
  void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>* matches) const;

 private:
  UnicodeRegex() = default;
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace deepinfer
