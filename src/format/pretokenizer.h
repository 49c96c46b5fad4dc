// Pre-tokenizers of an HF tokenizer.json: Sequence, Split (regex or literal pattern, the five split
// behaviours, invert) and ByteLevel (optional GPT-2 regex, add_prefix_space). Must not know about added
// tokens or the BPE model. Patterns are Oniguruma syntax (HF's engine), compiled once at load through
// UnicodeRegex. ByteLevel, if present, must be the last step (it turns text into bytes for the model).
// Invariant: input segments are valid UTF-8; pieces are views into the segment (never copies).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace deepinfer {

// One pre-tokenized word: a view into the encoded text, possibly preceded by the ' ' that ByteLevel's
// add_prefix_space inserts.
struct PreToken {
  std::string_view text;
  bool prefix_space = false;
};

class PreTokenizer {
 public:
  // `j` is the tokenizer.json "pre_tokenizer" value (null means: the whole segment is one word).
  static Result<PreTokenizer> from_json(const nlohmann::json& j, const std::string& where);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Splits one segment of text (between added tokens) into words, appended to `out`. Empty words are dropped.
  // may_have_new_code_points: see has_code_points_new_to_pcre2 (false allows the faster plain patterns).
  void split(std::string_view segment, bool may_have_new_code_points, std::vector<PreToken>* out) const;

  // True when a ByteLevel pre-tokenizer ends the sequence, so words are byte strings for the model.
  bool byte_level() const { return byte_level_; }

 private:
  struct Step;
  PreTokenizer();
  std::vector<std::unique_ptr<Step>> steps_;
  bool byte_level_ = false;
};

}  // namespace deepinfer
