// Added-token matching: a byte trie searched leftmost-longest, with a first-byte table so that text with no
// candidate byte is skipped quickly. HF's helper regexes (Rust `regex`: \w is Alphabetic|M|Nd|Pc|
// Join_Control, \s is White_Space) are reproduced with PCRE2 properties.
#include "format/added_tokens.h"

#include <algorithm>
#include <map>

#include "core/utf8.h"
#include "format/unicode_regex.h"

namespace deepinfer {

namespace {

bool is_white_space(char32_t c) {  // Unicode White_Space (PropList.txt; unchanged since Unicode 6.3)
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// HF space_leftmost_at_end: start of the run of White_Space that ends `s`.
size_t leading_edge_of_trailing_space(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t start = i - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const size_t n = i - start;
    if (utf8_sequence_length(s.substr(start)) != n || !is_white_space(utf8_decode(s.substr(start), n))) break;
    i = start;
  }
  return i;
}

// HF space_rightmost_at_start: length of the run of White_Space that starts `s`.
size_t length_of_leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence_length(s.substr(i));
    if (n == 0 || !is_white_space(utf8_decode(s.substr(i), n))) break;
    i += n;
  }
  return i;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher() = default;
AddedTokenMatcher::AddedTokenMatcher(AddedTokenMatcher&&) noexcept = default;
AddedTokenMatcher& AddedTokenMatcher::operator=(AddedTokenMatcher&&) noexcept = default;
AddedTokenMatcher::~AddedTokenMatcher() = default;

Result<AddedTokenMatcher> AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens) {
  AddedTokenMatcher m;
  // Build a map-based trie, then flatten it so each node's edges are contiguous and sorted.
  std::vector<std::map<uint8_t, uint32_t>> children(1);
  std::vector<int32_t> token_at(1, -1);
  bool needs_word_regex = false;
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    uint32_t node = 0;
    for (char c : t->content) {
      const uint8_t b = static_cast<uint8_t>(c);
      auto it = children[node].find(b);
      if (it == children[node].end()) {
        children.emplace_back();
        token_at.push_back(-1);
        it = children[node].emplace(b, static_cast<uint32_t>(children.size() - 1)).first;
      }
      node = it->second;
    }
    if (token_at[node] != -1) continue;  // duplicate spelling: the first one wins
    token_at[node] = static_cast<int32_t>(m.tokens_.size());
    m.tokens_.push_back(t);
    needs_word_regex = needs_word_regex || t->single_word;
  }
  m.nodes_.resize(children.size());
  for (size_t n = 0; n < children.size(); ++n) {
    m.nodes_[n].token = token_at[n];
    m.nodes_[n].first_edge = static_cast<uint32_t>(m.edges_.size());
    m.nodes_[n].n_edges = static_cast<uint32_t>(children[n].size());
    for (auto [b, child] : children[n]) m.edges_.emplace_back(b, child);
  }
  m.root_child_.fill(0);
  for (auto [b, child] : children[0]) m.root_child_[b] = child;
  if (needs_word_regex) {  // Rust regex's \w (Unicode 16.0 there): Alphabetic, M, Nd, Pc, Join_Control
    const std::string word = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}" +
        unicode_delta_class_items({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Me", "Nd", "Pc"}) + "]";
    auto at_end = UnicodeRegex::compile_pcre2(word + "\\z");
    auto at_start = UnicodeRegex::compile_pcre2("\\A" + word);
    if (!at_end.ok()) return at_end.status();
    if (!at_start.ok()) return at_start.status();
    m.word_at_end_ = std::move(*at_end);
    m.word_at_start_ = std::move(*at_start);
  }
  return m;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t* end) const {
  uint32_t node = root_child_[static_cast<uint8_t>(text[pos])];
  int32_t best = -1;
  size_t i = pos + 1;
  while (true) {
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *end = i;
    }
    if (i >= text.size() || nodes_[node].n_edges == 0) break;
    const uint8_t b = static_cast<uint8_t>(text[i]);
    const auto* first = edges_.data() + nodes_[node].first_edge;
    const auto* last = first + nodes_[node].n_edges;
    const auto* e = std::lower_bound(first, last, b, [](const auto& edge, uint8_t v) { return edge.first < v; });
    if (e == last || e->first != b) break;
    node = e->second;
    ++i;
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, uint32_t base, bool skip_special,
                              std::vector<TextSpan>* out) const {
  if (text.empty()) return;
  size_t start_offset = 0;  // end of the previous emitted token
  size_t pos = 0;           // where the leftmost-longest search resumes (end of the previous match)
  while (pos < text.size()) {
    // Leftmost-longest: the first position with any match, the longest token there.
    int32_t found = -1;
    size_t begin = pos, stop = pos;
    for (; begin < text.size(); ++begin) {
      if (root_child_[static_cast<uint8_t>(text[begin])] == 0) continue;
      found = longest_at(text, begin, &stop);
      if (found >= 0) break;
    }
    if (found < 0) break;
    pos = stop;
    const AddedToken& token = *tokens_[found];
    if (skip_special && token.special) continue;
    if (token.single_word) {
      const bool start_space = begin == 0 || !word_at_end_->find(text.substr(0, begin)).has_value();
      const bool stop_space = stop == text.size() || !word_at_start_->find(text.substr(stop)).has_value();
      if (!start_space || !stop_space) continue;
    }
    size_t tok_begin = begin, tok_end = stop;
    if (token.lstrip) tok_begin = std::max(leading_edge_of_trailing_space(text.substr(0, begin)), start_offset);
    if (token.rstrip) tok_end += length_of_leading_space(text.substr(stop));
    if (start_offset < tok_begin) {
      out->push_back({base + static_cast<uint32_t>(start_offset), base + static_cast<uint32_t>(tok_begin), -1});
    }
    out->push_back({base + static_cast<uint32_t>(tok_begin), base + static_cast<uint32_t>(tok_end), token.id});
    start_offset = tok_end;
  }
  if (start_offset < text.size()) {
    out->push_back({base + static_cast<uint32_t>(start_offset), base + static_cast<uint32_t>(text.size()), -1});
  }
}

}  // namespace deepinfer
