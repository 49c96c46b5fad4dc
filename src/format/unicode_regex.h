// UnicodeRegex: a compiled PCRE2 pattern (UTF + UCP, JIT) for the Unicode regexes of tokenizer.json.
// Owns the translation from Oniguruma syntax (what HF `tokenizers` runs them with) to PCRE2 and the
// onig crate's rule for iterating matches. Must not know about tokenizer semantics.
// Invariants: subjects are valid UTF-8 (callers repair input first); matching is thread-safe (match state
// is per thread); there are no match/depth limits, so a match never fails for resource reasons short of
// the 8 MiB JIT stack, which these patterns (no nested quantified groups) never approach.
#pragma once

#include <cstdint>
#include <initializer_list>
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
// PCRE2 10.42 knows Unicode 14.0, HF's Oniguruma 16.0: with add_unicode_delta, each General_Category set
// (\p{..}, \d, \w) also gets the code points 16.0 added to it (unicode_delta.h). Checked code point by code
// point, U+0001..U+10FFFF, against HF tokenizers 0.23.3 for \w \s \d \h \p{L,N,P,S,M}: identical.
// Not adjusted: scripts (\p{Han}), binary properties, \p{C*}; U+1171E moved Mn -> Mc.
// Not verified against onig: POSIX brackets, case-insensitive matching, \X, \R, backreferences.
Result<std::string> onig_pattern_to_pcre2(std::string_view pattern, bool add_unicode_delta = true);

// Class items for the code points Unicode 16.0 added to the given two-letter General_Categories.
std::string unicode_delta_class_items(std::initializer_list<std::string_view> categories);

// True when `text` has a code point that PCRE2's tables leave unassigned but a later category claims;
// only then do the (slower) delta-adjusted patterns need to run.
bool has_code_points_new_to_pcre2(std::string_view text);

class UnicodeRegex {
 public:
  // Compiles an Oniguruma-syntax pattern (translated as above), plus a plain variant without the Unicode
  // delta when that differs: equivalent on text without new code points, and faster.
  static Result<std::unique_ptr<UnicodeRegex>> compile_onig(std::string_view pattern);
  // Compiles a pattern already in PCRE2 syntax.
  static Result<std::unique_ptr<UnicodeRegex>> compile_pcre2(std::string_view pattern);
  ~UnicodeRegex();

  // First match at or after byte `start` (lookbehind may see text before it), as [begin, end).
  // may_have_new_code_points=false (has_code_points_new_to_pcre2 said so) selects the plain variant.
  std::optional<std::pair<size_t, size_t>> find(std::string_view subject, size_t start = 0,
                                                bool may_have_new_code_points = true) const;
  // All matches as [begin, end), iterated like the onig crate's find_iter: an empty match exactly where
  // the previous match ended is skipped by advancing one character.
  void find_all(std::string_view subject, bool may_have_new_code_points,
                std::vector<std::pair<uint32_t, uint32_t>>* matches) const;

 private:
  UnicodeRegex() = default;
  struct Code;
  std::unique_ptr<Code> code_;        // with the Unicode delta
  std::unique_ptr<Code> code_plain_;  // without it; null when identical
};

}  // namespace deepinfer
