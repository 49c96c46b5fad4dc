// Added tokens of an HF tokenizer.json ("added_tokens": special and control tokens such as <｜User｜>) and
// the matcher that finds them in text before pre-tokenization. Must not know about BPE or pre-tokenizers.
// Invariant: matching reproduces HF AddedVocabulary::find_matches: leftmost-longest (Aho-Corasick
// LeftmostLongest) non-overlapping matches, then the per-token single_word / lstrip / rstrip rules, and a
// match skipped for encode_special_tokens still consumes its span.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace deepinfer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of the input: an added token (id >= 0) or plain text to pre-tokenize (id == -1).
struct TextSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
  int32_t id = -1;
};

class UnicodeRegex;

class AddedTokenMatcher {
 public:
  // `tokens` must outlive the matcher. Tokens with empty content are ignored, as HF does.
  static Result<AddedTokenMatcher> build(const std::vector<const AddedToken*>& tokens);
  AddedTokenMatcher();  // matches nothing
  AddedTokenMatcher(AddedTokenMatcher&&) noexcept;
  AddedTokenMatcher& operator=(AddedTokenMatcher&&) noexcept;
  ~AddedTokenMatcher();

  // Appends a cover of `text` (offsets relative to `text` plus `base`) to `out`. With `skip_special`,
  // matches of tokens flagged special are dropped (their text stays plain).
  void split(std::string_view text, uint32_t base, bool skip_special, std::vector<TextSpan>* out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // Longest token starting at text[pos], or -1; *end receives its end offset.
  int32_t longest_at(std::string_view text, size_t pos, size_t* end) const;

  struct Node {
    int32_t token = -1;        // index into tokens_ of the token ending here
    uint32_t first_edge = 0;   // edges_[first_edge, first_edge + n_edges), sorted by byte
    uint32_t n_edges = 0;
  };
  std::vector<const AddedToken*> tokens_;
  std::vector<Node> nodes_;                                  // nodes_[0] is the root
  std::vector<std::pair<uint8_t, uint32_t>> edges_;          // (byte, child node)
  std::array<uint32_t, 256> root_child_{};                   // 0 = no token starts with this byte
  std::unique_ptr<UnicodeRegex> word_at_end_, word_at_start_, space_at_end_, space_at_start_;
};

}  // namespace deepinfer
