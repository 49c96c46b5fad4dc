// Incremental byte matchers for the output parser (output_parser.cpp), fed one byte at a time so that
// results never depend on how the input was chunked.
//  - MarkerSet: several markers scanned at once with KMP; the first (in priority order) to complete on a byte
//    wins. A marker may absorb the newlines right before it (`\n*</think>`), or be "a newline as the first
//    byte" (leading-newline stripping). These are deepseek-recipe's stream-parser matching rules.
//  - TagMatcher: one DSML tag against several spellings at once; a spelling may capture one quoted value.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::stream_match {

enum class MarkerKind { kLiteral, kAfterNewlines, kLeadingNewline };

class MarkerSet {
 public:
  struct Hit {
    int id;
    size_t len;  // bytes of the match, ending at the byte just fed (newlines included)
  };

  // Adds a marker with lower priority than those already added. Empty literals are ignored.
  void add(MarkerKind kind, std::string_view pattern, int id);
  void clear() { markers_.clear(); }
  std::optional<Hit> feed(unsigned char b);
  // The most bytes, ending at the last byte fed, that some marker has matched so far (must be held back).
  size_t longest_partial() const;

 private:
  struct Marker {
    MarkerKind kind = MarkerKind::kLiteral;
    std::string pattern;
    std::vector<size_t> fail;  // KMP failure table
    int id = 0;
    size_t matched = 0;
    size_t newlines = 0;  // kAfterNewlines: newlines right before the pattern's first byte
    bool first_byte = true;
    bool leading_matched = false;

    size_t match_len() const;
    size_t kmp_next(unsigned char b) const;
    bool feed(unsigned char b);  // true when the marker completes on this byte
  };
  std::vector<Marker> markers_;
};

struct TagPart {
  std::string literal;   // bytes that must follow exactly
  bool capture = false;  // any bytes up to the next '"' (the next part starts with '"'), captured
};

struct TagSpelling {
  std::vector<TagPart> parts;
  int id = 0;
};

TagSpelling literal_tag(std::string text, int id);
TagSpelling captured_tag(std::string before, std::string after, int id);

class TagMatcher {
 public:
  enum class Step { kPending, kMatched, kFailed };
  static constexpr size_t kMaxCapture = 512;  // longest tool / parameter name accepted inside a tag

  void reset(std::vector<TagSpelling> spellings);
  Step feed(unsigned char b);
  int matched_id() const { return alternatives_[matched_].spelling.id; }
  const std::string& captured() const { return alternatives_[matched_].captured; }

 private:
  struct Alternative {
    TagSpelling spelling;
    size_t part = 0;
    size_t offset = 0;
    std::string captured;
    bool dead = false;
  };
  static bool advance(Alternative& alt, unsigned char b);

  std::vector<Alternative> alternatives_;
  size_t matched_ = 0;
};

}  // namespace deepinfer::stream_match
