#include "format/engram_token_map.h"

#include <string>
#include <unordered_map>

#include "format/engram_normalizer.h"

namespace deepinfer {

EngramTokenMap build_engram_token_map(const Tokenizer& tokenizer) {
  static const std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  EngramTokenMap out;
  const int32_t n_ids = tokenizer.vocab_size();
  out.token_map.resize(size_t(n_ids));
  std::unordered_map<std::string, int32_t> key_to_id;
  key_to_id.reserve(size_t(n_ids));
  for (int32_t id = 0; id < n_ids; ++id) {
    // Tokenizer.decode([id], skip_special_tokens=False); an id missing from the vocabulary decodes to "".
    const std::string text = tokenizer.decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
    std::string key;
    if (text.find(kReplacement) != std::string::npos) {
      key = std::string(tokenizer.id_to_token(id).value_or(""));
    } else {
      key = engram_normalize(text);
      if (key.empty()) key = text;
    }
    const auto [it, inserted] = key_to_id.try_emplace(std::move(key), int32_t(key_to_id.size()));
    out.token_map[size_t(id)] = it->second;
  }
  out.n_compressed = int32_t(key_to_id.size());
  return out;
}

}  // namespace deepinfer
