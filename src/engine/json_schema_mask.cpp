#include "engine/json_schema_mask.h"

#include <algorithm>
#include <cstring>

namespace deepinfer {

namespace {

// Tries each group whose first byte `v` accepts. With `ws_left` >= 0 every token starts with whitespace that `v`
// stands after: the token needs at most ws_left leading whitespace bytes, and the rest is tried.
void try_groups(const JsonTokenTable& table, const std::array<std::vector<int32_t>, 256>& groups, const JsonSchemaPrefixValidator& v,
                int ws_left, std::vector<uint8_t>& allowed) {
  for (int first = 0; first < 256; ++first) {
    const std::vector<int32_t>& group = groups[size_t(first)];
    if (group.empty()) continue;
    const char byte = char(first);
    if (!v.accepts(std::string_view(&byte, 1))) continue;
    for (int32_t id : group) {
      std::string_view text = table.token(id);
      if (ws_left >= 0) {
        if (table.n_leading_ws[size_t(id)] > ws_left) continue;
        text.remove_prefix(table.n_leading_ws[size_t(id)]);
      }
      allowed[size_t(id)] = v.accepts(text) ? 1 : 0;
    }
  }
}

}  // namespace

void json_schema_token_mask(const JsonTokenTable& table, const JsonSchemaPrefixValidator& v, int32_t eos_id,
                            std::vector<uint8_t>& allowed, JsonSchemaPrefixValidator& after_ws) {
  allowed.resize(size_t(table.n_vocab));
  const bool eos_ok = eos_id >= 0 && eos_id < table.n_vocab;
  if (v.complete()) {  // the value is finished: end here (trailing whitespace would only delay the end)
    std::fill(allowed.begin(), allowed.end(), 0);
    if (eos_ok) allowed[size_t(eos_id)] = 1;
    return;
  }
  if (v.in_free_string()) {
    std::memcpy(allowed.data(), table.plain_string.data(), allowed.size());
    for (int32_t id : table.not_plain) allowed[size_t(id)] = v.accepts(table.token(id)) ? 1 : 0;
  } else {
    std::fill(allowed.begin(), allowed.end(), 0);
    try_groups(table, table.by_first_byte, v, -1, allowed);
    if (v.whitespace_collapses()) {
      // The first whitespace byte leads to one state whichever it is, and more whitespace changes nothing but the
      // run count: the rest of each token is tried from there, if its leading whitespace fits in the run.
      if (v.accepts(" ")) {
        after_ws = v;  // copy-assignment keeps the scratch stack's capacity
        after_ws.feed(uint8_t(' '));
        const int ws_left = v.whitespace_left();
        for (int32_t id : table.ws_only) allowed[size_t(id)] = table.token(id).size() <= size_t(ws_left) ? 1 : 0;
        try_groups(table, table.ws_by_rest_byte, after_ws, ws_left, allowed);
      }
    } else if (v.accepts(" ") || v.accepts("\n") || v.accepts("\t") || v.accepts("\r")) {
      // Whitespace is text here (a key or an enum string): every such token is tried whole.
      for (int32_t id : table.ws_only) allowed[size_t(id)] = v.accepts(table.token(id)) ? 1 : 0;
      for (const std::vector<int32_t>& group : table.ws_by_rest_byte) {
        for (int32_t id : group) allowed[size_t(id)] = v.accepts(table.token(id)) ? 1 : 0;
      }
    }
  }
  if (eos_ok && v.can_end()) allowed[size_t(eos_id)] = 1;
}

}  // namespace deepinfer
