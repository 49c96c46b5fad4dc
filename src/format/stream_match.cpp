// Incremental byte matchers (see stream_match.h).
#include "format/stream_match.h"

#include <algorithm>

namespace deepinfer::stream_match {

void MarkerSet::add(MarkerKind kind, std::string_view pattern, int id) {
  if (kind != MarkerKind::kLeadingNewline && pattern.empty()) return;
  Marker m;
  m.kind = kind;
  m.pattern = std::string(pattern);
  m.id = id;
  m.fail.assign(m.pattern.size(), 0);
  for (size_t i = 1, len = 0; i < m.pattern.size();) {
    if (m.pattern[i] == m.pattern[len]) {
      m.fail[i++] = ++len;
    } else if (len != 0) {
      len = m.fail[len - 1];
    } else {
      m.fail[i++] = 0;
    }
  }
  markers_.push_back(std::move(m));
}

std::optional<MarkerSet::Hit> MarkerSet::feed(unsigned char b) {
  for (Marker& m : markers_) {
    if (m.feed(b)) return Hit{m.id, m.match_len()};
  }
  return std::nullopt;
}

size_t MarkerSet::longest_partial() const {
  size_t n = 0;
  for (const Marker& m : markers_) n = std::max(n, m.match_len());
  return n;
}

size_t MarkerSet::Marker::match_len() const {
  switch (kind) {
    case MarkerKind::kLiteral: return matched;
    case MarkerKind::kAfterNewlines: return matched + newlines;
    case MarkerKind::kLeadingNewline: return leading_matched ? 1 : 0;
  }
  return 0;
}

size_t MarkerSet::Marker::kmp_next(unsigned char b) const {
  size_t len = matched;
  while (len > 0 && static_cast<unsigned char>(pattern[len]) != b) len = fail[len - 1];
  if (static_cast<unsigned char>(pattern[len]) == b) ++len;
  return len;
}

bool MarkerSet::Marker::feed(unsigned char b) {
  switch (kind) {
    case MarkerKind::kLiteral:
      matched = kmp_next(b);
      return matched == pattern.size();
    case MarkerKind::kAfterNewlines:
      if (matched == 0 && b == '\n') {
        ++newlines;
      } else {
        const size_t next = kmp_next(b);
        if (next <= matched) newlines = 0;  // no progress: the newlines no longer precede a match
        matched = next;
      }
      return matched == pattern.size();
    case MarkerKind::kLeadingNewline:
      if (first_byte) leading_matched = b == '\n';
      first_byte = false;
      return leading_matched;
  }
  return false;
}

TagSpelling literal_tag(std::string text, int id) {
  TagSpelling s;
  s.parts.push_back({std::move(text), false});
  s.id = id;
  return s;
}

TagSpelling captured_tag(std::string before, std::string after, int id) {
  TagSpelling s;
  s.parts.push_back({std::move(before), false});
  s.parts.push_back({"", true});
  s.parts.push_back({std::move(after), false});
  s.id = id;
  return s;
}

void TagMatcher::reset(std::vector<TagSpelling> spellings) {
  alternatives_.clear();
  for (TagSpelling& s : spellings) {
    Alternative alt;
    alt.spelling = std::move(s);
    alternatives_.push_back(std::move(alt));
  }
  matched_ = 0;
}

TagMatcher::Step TagMatcher::feed(unsigned char b) {
  bool alive = false;
  for (size_t i = 0; i < alternatives_.size(); ++i) {
    Alternative& alt = alternatives_[i];
    if (alt.dead) continue;
    if (advance(alt, b)) {
      matched_ = i;
      return Step::kMatched;
    }
    alive = alive || !alt.dead;
  }
  return alive ? Step::kPending : Step::kFailed;
}

bool TagMatcher::advance(Alternative& alt, unsigned char b) {
  const std::vector<TagPart>& parts = alt.spelling.parts;
  const TagPart* part = &parts[alt.part];
  if (part->capture) {
    if (b != '"') {
      if (alt.captured.size() >= kMaxCapture) {
        alt.dead = true;
      } else {
        alt.captured += static_cast<char>(b);
      }
      return false;
    }
    ++alt.part;  // the closing quote belongs to the next literal
    alt.offset = 0;
    part = &parts[alt.part];
  }
  if (static_cast<unsigned char>(part->literal[alt.offset]) != b) {
    alt.dead = true;
    return false;
  }
  if (++alt.offset == part->literal.size()) {
    ++alt.part;
    alt.offset = 0;
  }
  return alt.part == parts.size();
}

}  // namespace deepinfer::stream_match
