// BPE model of an HF tokenizer.json ("model": {"type": "BPE"}): the vocabulary, the ranked merges and the
// word -> ids step. Must not know about added tokens, pre-tokenizers or decoding.
// Invariants: merges are applied in HF `tokenizers`' exact order (a min-heap on (rank, position) with its
// stale-entry rule), so ids equal the Rust implementation's; a word's result depends only on its bytes,
// which is what makes the word cache sound. Thread-safe: encode_word is const; the cache has its own lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace deepinfer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The 256 printable code points that HF's ByteLevel uses for bytes 0..255 (GPT-2's bytes_to_unicode).
const std::vector<char32_t>& byte_level_chars();

class BpeModel {
 public:
  // Parses `model` (the tokenizer.json "model" object); `where` names the file in error messages.
  static Result<BpeModel> from_json(const nlohmann::json& model, const std::string& where);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-tokenized word. With `byte_level`, `word` is raw bytes and each byte is the
  // symbol ByteLevel maps it to; otherwise `word` is UTF-8 and each code point is a symbol.
  void encode_word(std::string_view word, bool byte_level, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const TokenIdMap& vocab() const { return vocab_; }
  size_t n_merges() const;

 private:
  struct MergeTable;
  struct WordCache;
  BpeModel();
  void encode_word_uncached(std::string_view word, bool byte_level, std::vector<int32_t>* out) const;

  TokenIdMap vocab_;
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<WordCache> cache_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t byte_symbol_id_[256];  // byte-level fast path: id of each byte's symbol, -1 if absent
  bool byte_fast_path_ = false;  // true when no prefix/suffix and all 256 byte symbols are in the vocab
};

}  // namespace deepinfer
