// Tokenizer: an HF tokenizer.json (byte-level BPE, as DeepSeek V3/V4/V4.1 ship) loaded into an immutable
// object that encodes text to ids and decodes ids to text, plus StreamDecoder for token-by-token output.
// Must not know about chat templates or models. Supported: a BPE model, no normalizer (or an empty
// Sequence), Split/ByteLevel pre-tokenizers in a Sequence, the ByteLevel decoder; anything else is a load
// error that names it. Invariants: encode(text, kAll) equals HF `tokenizers` 0.23
// Tokenizer.encode(text, add_special_tokens=False).ids for any input (ill-formed UTF-8 is first repaired
// the way Rust's String::from_utf8_lossy does); decode(ids, skip) equals Tokenizer.decode(ids,
// skip_special_tokens=skip); a Tokenizer is immutable after load and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace deepinfer {

// Which added tokens (tokenizer.json "added_tokens") are recognised in the input text.
enum class AddedTokenMatching {
  kAll,          // every added token's spelling becomes its id (HF default)
  kNonSpecial,   // tokens flagged "special" are encoded as plain text (HF encode_special_tokens=True)
  kNone,         // no added token is recognised: the text is pre-tokenized and BPE-encoded as is
};

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a directory that contains one.
  [[nodiscard]] static Result<Tokenizer> load(const std::string& path);
  // Parses tokenizer.json content; `source_name` names it in error messages.
  [[nodiscard]] static Result<Tokenizer> from_json_text(std::string_view json_text, const std::string& source_name);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // allow_special=false recognises no added token at all (kNone): use it for untrusted text, so that a
  // user typing "<｜User｜>" cannot produce the control token.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  std::vector<int32_t> encode(std::string_view text, AddedTokenMatching matching) const;
  // Appends to `ids` instead of returning a new vector.
  void encode_into(std::string_view text, AddedTokenMatching matching, std::vector<int32_t>* ids) const;

  // Unknown ids are skipped, as HF does. skip_special drops tokens flagged "special" in added_tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's vocabulary string (byte-level form for BPE tokens), or nullopt for an unknown id.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // The raw bytes the decoder produces for `id` (possibly a partial UTF-8 sequence); empty if unknown.
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // Ids of the added_tokens entries (control tokens such as <｜User｜> and </think>, special-flagged or not).
  std::vector<int32_t> added_token_ids() const;
  // Number of distinct tokens, model vocabulary plus added tokens (HF get_vocab_size(with_added_tokens=True)).
  int32_t vocab_size() const;
  // One past the largest id (the embedding table needs at least this many rows).
  int32_t id_limit() const;

  struct Impl;  // opaque; defined in tokenizer.cpp

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A token's decoded bytes for display (deepinfer tokenize): well-formed UTF-8 is kept, control characters
// and backslash are escaped (\n \t \r \\ \xNN), and bytes of partial or ill-formed sequences become \xNN.
std::string printable_token_bytes(std::string_view bytes);

// Turns a stream of ids into text that is always whole, well-formed UTF-8: bytes of a character split
// across tokens are held back until the character completes. Invariant: the concatenation of every push()
// result and flush() equals tokenizer.decode(all ids) byte for byte (ill-formed bytes become U+FFFD exactly
// where decode puts them). After warm-up, push() does not allocate. Not thread-safe; one per sequence.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // Text completed by `id` (possibly empty). The view is valid until the next call on this decoder.
  std::string_view push(int32_t id);
  // Whatever is still held back (an incomplete sequence becomes U+FFFD); the decoder is then reset.
  std::string_view flush();
  void reset();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
  std::string text_;
};

}  // namespace deepinfer
