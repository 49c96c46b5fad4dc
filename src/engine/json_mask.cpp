#include "engine/json_mask.h"

#include <algorithm>
#include <cstring>

namespace deepinfer {

JsonTokenTable build_json_token_table(const Tokenizer& tokenizer, int32_t n_vocab) {
  JsonTokenTable t;
  t.n_vocab = n_vocab;
  t.offset.assign(size_t(n_vocab) + 1, 0);
  t.plain_string.assign(size_t(n_vocab), 0);
  t.n_leading_ws.assign(size_t(n_vocab), 0);
  std::vector<uint8_t> added(size_t(n_vocab), 0);
  for (int32_t id : tokenizer.added_token_ids()) {
    if (id >= 0 && id < n_vocab) added[size_t(id)] = 1;
  }
  // A clean in-string state: a token that keeps it clean after its last byte (no quote, backslash or control
  // byte, whole UTF-8 characters only) is allowed there whatever the rest of the state.
  JsonPrefixValidator in_string;
  in_string.feed(std::string_view("{\"", 2));
  for (int32_t id = 0; id < n_vocab; ++id) {
    const std::string_view b = tokenizer.token_bytes(id);
    t.offset[size_t(id)] = uint32_t(t.bytes.size());
    t.bytes.append(b);
    t.offset[size_t(id) + 1] = uint32_t(t.bytes.size());
    if (b.empty() || added[size_t(id)]) continue;
    const size_t n_ws = std::min(b.find_first_not_of(" \t\n\r"), b.size());
    t.n_leading_ws[size_t(id)] = uint16_t(std::min<size_t>(n_ws, 0xffff));
    if (n_ws == 0) t.by_first_byte[uint8_t(b[0])].push_back(id);
    else if (n_ws == b.size()) t.ws_only.push_back(id);
    else if (n_ws <= 0xffff) t.ws_by_rest_byte[uint8_t(b[n_ws])].push_back(id);
    JsonPrefixValidator v = in_string;
    const bool plain = b.find_first_of("\"\\") == std::string_view::npos && v.feed(b) &&
                       v.lex().mode == JsonLexState::Mode::kString;
    t.plain_string[size_t(id)] = plain ? 1 : 0;
    if (!plain) t.not_plain.push_back(id);
  }
  return t;
}

void json_token_mask(const JsonTokenTable& table, const JsonPrefixValidator& v, int32_t eos_id, std::vector<uint8_t>& allowed,
                     JsonPrefixValidator& after_ws) {
  allowed.resize(size_t(table.n_vocab));
  if (v.complete()) {  // the object is closed: end here (trailing whitespace would only delay the end)
    std::fill(allowed.begin(), allowed.end(), 0);
    if (eos_id >= 0 && eos_id < table.n_vocab) allowed[size_t(eos_id)] = 1;
    return;
  }
  if (v.lex().mode == JsonLexState::Mode::kString) {
    std::memcpy(allowed.data(), table.plain_string.data(), allowed.size());
    for (int32_t id : table.not_plain) allowed[size_t(id)] = v.accepts(table.token(id)) ? 1 : 0;
    return;
  }
  std::fill(allowed.begin(), allowed.end(), 0);
  for (int first = 0; first < 256; ++first) {
    const std::vector<int32_t>& group = table.by_first_byte[size_t(first)];
    if (group.empty()) continue;
    const char byte = char(first);
    if (!v.accepts(std::string_view(&byte, 1))) continue;
    for (int32_t id : group) allowed[size_t(id)] = v.accepts(table.token(id)) ? 1 : 0;
  }
  // Tokens with leading whitespace: outside a string the first whitespace byte takes every state to the same
  // state whichever it is (a finished number ends), the others leave that state unchanged; the rest of the token
  // is tried from there.
  if (!v.accepts(" ")) return;
  after_ws = v;  // copy-assignment keeps the scratch stack's capacity
  after_ws.feed(uint8_t(' '));
  for (int32_t id : table.ws_only) allowed[size_t(id)] = 1;
  for (int first = 0; first < 256; ++first) {
    const std::vector<int32_t>& group = table.ws_by_rest_byte[size_t(first)];
    if (group.empty()) continue;
    const char byte = char(first);
    if (!after_ws.accepts(std::string_view(&byte, 1))) continue;
    for (int32_t id : group) allowed[size_t(id)] = after_ws.accepts(table.token(id).substr(table.n_leading_ws[size_t(id)])) ? 1 : 0;
  }
}

}  // namespace deepinfer
