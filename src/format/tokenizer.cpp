// Tokenizer: tokenizer.json loading (the one place JSON exceptions are caught for the tokenizer), the
// encode pipeline (UTF-8 repair -> added tokens -> pre-tokenizer -> BPE) and decoding. The stages are
// HF `tokenizers`' own: TokenizerImpl::encode_single_sequence with AddedVocabulary::extract_and_normalize,
// then pre_tokenize, then the model; decode is the ByteLevel decoder followed by String::from_utf8_lossy.
#include "format/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/utf8.h"
#include "format/added_tokens.h"
#include "format/pretokenizer.h"
#include "format/tokenizer_bpe.h"
#include "format/unicode_regex.h"

namespace deepinfer {

using nlohmann::json;

struct Tokenizer::Impl {
  std::string source;
  BpeModel bpe;
  PreTokenizer pre;
  std::vector<AddedToken> added;          // in file order, deduplicated by content
  TokenIdMap added_ids;                   // content -> id
  AddedTokenMatcher raw_matcher;          // tokens with normalized=false, matched on the input
  AddedTokenMatcher normalized_matcher;   // tokens with normalized=true, matched on the gaps left by raw
  std::vector<std::string_view> id_token;  // id -> token string, a view of a vocab key or added content
  std::vector<uint8_t> id_present;        // id -> known
  std::vector<uint8_t> id_special;        // id -> flagged special in added_tokens
  std::string id_bytes;                   // concatenated decoder output per id
  std::vector<uint32_t> id_bytes_offset;  // id -> [offset[id], offset[id + 1]) in id_bytes
  int32_t vocab_size = 0;

  Impl(BpeModel b, PreTokenizer p) : bpe(std::move(b)), pre(std::move(p)) {}
};

namespace {

constexpr int64_t kMaxIds = 1 << 24;  // far above any real vocabulary; bounds the per-id tables

Status check_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return Status();
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array() && j["normalizers"].empty()) {
    return Status();
  }
  return Status::error(where + ": normalizer '" + (type.empty() ? j.dump() : type) +
                       "' is not supported (only none or an empty Sequence)");
}

Status check_decoder(const json& j, const std::string& where) {
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  if (type == "ByteLevel") return Status();
  return Status::error(where + ": decoder '" + (j.is_null() ? std::string("null") : type) +
                       "' is not supported (only ByteLevel)");
}

// HF ByteLevel decoder for one token: its chars mapped back to bytes, or its raw UTF-8 if any char is not
// one of the 256 byte-level chars.
std::string byte_level_decode(std::string_view token) {
  static const std::vector<int> char_to_byte = [] {
    std::vector<int> t(512, -1);
    const auto& chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) t[chars[b]] = b;
    return t;
  }();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const size_t n = utf8_sequence_length(token.substr(i));
    if (n == 0) return std::string(token);
    const char32_t cp = utf8_decode(token.substr(i), n);
    if (cp >= char_to_byte.size() || char_to_byte[cp] < 0) return std::string(token);
    out.push_back(static_cast<char>(char_to_byte[cp]));
    i += n;
  }
  return out;
}

Result<std::unique_ptr<Tokenizer::Impl>> build_impl(const json& root, const std::string& where) {
  if (!root.is_object()) return Status::error(where + ": top level is not a JSON object");
  DI_RETURN_IF_ERROR(check_normalizer(root.value("normalizer", json()), where));
  DI_RETURN_IF_ERROR(check_decoder(root.value("decoder", json()), where));
  auto bpe = BpeModel::from_json(root.value("model", json()), where);
  if (!bpe.ok()) return bpe.status();
  auto pre = PreTokenizer::from_json(root.value("pre_tokenizer", json()), where);
  if (!pre.ok()) return pre.status();

  // Added tokens, with HF AddedVocabulary::add_tokens' id rule: an existing spelling keeps its id, a new
  // one takes the next id after the model vocabulary. When that differs from the file's "id", HF warns and
  // uses its own id; so do we (the differential tests' variants check this rule against HF).
  std::vector<AddedToken> added;
  TokenIdMap added_ids;
  const json empty = json::array();
  const json& list = root.contains("added_tokens") && root["added_tokens"].is_array() ? root["added_tokens"] : empty;
  const int64_t model_size = static_cast<int64_t>(bpe->vocab().size());
  int64_t max_added = -1;
  for (size_t k = 0; k < list.size(); ++k) {
    const json& t = list[k];
    const std::string here = where + ": added_tokens[" + std::to_string(k) + "]";
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string()) {
      return Status::error(here + " has no string 'content'");
    }
    AddedToken token;
    token.content = t["content"].get<std::string>();
    if (token.content.empty() || added_ids.count(token.content)) continue;
    if (!utf8_is_valid(token.content)) return Status::error(here + ": content is not valid UTF-8");
    token.special = t.value("special", false);
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !token.special);
    int64_t id = 0;
    if (auto model_id = bpe->token_to_id(token.content)) {
      id = *model_id;
    } else if (max_added < 0) {
      id = model_size;
    } else {
      id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
    }
    if (id >= kMaxIds) return Status::error(here + ": id " + std::to_string(id) + " is implausibly large");
    token.id = static_cast<int32_t>(id);
    max_added = std::max(max_added, id);
    added_ids.emplace(token.content, token.id);
    added.push_back(std::move(token));
  }

  auto impl = std::make_unique<Tokenizer::Impl>(std::move(*bpe), std::move(*pre));
  impl->source = where;
  impl->added = std::move(added);
  impl->added_ids = std::move(added_ids);
  // The matchers keep pointers into impl->added, which is not modified after this point.
  std::vector<const AddedToken*> raw, normalized;
  for (const AddedToken& t : impl->added) (t.normalized ? normalized : raw).push_back(&t);
  auto raw_matcher = AddedTokenMatcher::build(raw);
  if (!raw_matcher.ok()) return Status::error(where + ": added tokens: " + raw_matcher.status().message());
  auto normalized_matcher = AddedTokenMatcher::build(normalized);
  if (!normalized_matcher.ok()) return Status::error(where + ": added tokens: " + normalized_matcher.status().message());
  impl->raw_matcher = std::move(*raw_matcher);
  impl->normalized_matcher = std::move(*normalized_matcher);

  int32_t id_limit = 0;
  for (const auto& [s, id] : impl->bpe.vocab()) id_limit = std::max(id_limit, id + 1);
  if (id_limit > kMaxIds) return Status::error(where + ": model vocabulary ids reach " + std::to_string(id_limit));
  for (const AddedToken& t : impl->added) id_limit = std::max(id_limit, t.id + 1);
  // Views stay valid: vocab keys live in unordered_map nodes and impl->added is never modified again.
  impl->id_token.assign(id_limit, std::string_view());
  impl->id_present.assign(id_limit, 0);
  impl->id_special.assign(id_limit, 0);
  for (const auto& [s, id] : impl->bpe.vocab()) {
    impl->id_token[id] = s;
    impl->id_present[id] = 1;
  }
  size_t n_distinct = impl->bpe.vocab().size();  // HF get_vocab(true): distinct spellings
  for (const AddedToken& t : impl->added) {  // added tokens win over the model vocabulary
    impl->id_token[t.id] = t.content;
    impl->id_present[t.id] = 1;
    impl->id_special[t.id] = t.special ? 1 : 0;
    if (!impl->bpe.token_to_id(t.content)) ++n_distinct;
  }
  impl->vocab_size = static_cast<int32_t>(n_distinct);
  impl->id_bytes_offset.assign(id_limit + 1, 0);
  for (int32_t id = 0; id < id_limit; ++id) {
    impl->id_bytes_offset[id] = static_cast<uint32_t>(impl->id_bytes.size());
    if (impl->id_present[id]) impl->id_bytes += byte_level_decode(impl->id_token[id]);
  }
  impl->id_bytes_offset[id_limit] = static_cast<uint32_t>(impl->id_bytes.size());
  return impl;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, const std::string& source_name) {
  try {
    const json root = json::parse(json_text.begin(), json_text.end());
    auto impl = build_impl(root, source_name);
    if (!impl.ok()) return impl.status();
    return Tokenizer(std::move(*impl));
  } catch (const json::exception& e) {
    return Status::error(source_name + ": malformed tokenizer JSON: " + e.what());
  }
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::error(file.string() + ": cannot open tokenizer file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::error(file.string() + ": read error");
  return from_json_text(buffer.str(), file.string());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  return encode(text, allow_special ? AddedTokenMatching::kAll : AddedTokenMatching::kNone);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, AddedTokenMatching matching) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, matching, &ids);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, AddedTokenMatching matching, std::vector<int32_t>* ids) const {
  const Impl& im = *impl_;
  DI_CHECK_MSG(text.size() < UINT32_MAX / 2, "encode: text of " + std::to_string(text.size()) +
                                                 " bytes; callers bound request sizes far below 2 GiB");
  std::string repaired;
  std::string_view s = text;
  if (!utf8_is_valid(text)) {  // HF only accepts str; invalid bytes become U+FFFD as from_utf8_lossy does
    append_utf8_lossy(text, &repaired);
    s = repaired;
  }
  thread_local std::vector<TextSpan> spans, spans_raw;
  thread_local std::vector<PreToken> words;
  thread_local std::string spaced_word;
  spans.clear();
  const uint32_t n = static_cast<uint32_t>(s.size());
  if (matching == AddedTokenMatching::kNone) {
    spans.push_back({0, n, -1});
  } else {
    const bool skip_special = matching == AddedTokenMatching::kNonSpecial;
    spans_raw.clear();
    if (im.raw_matcher.empty()) spans_raw.push_back({0, n, -1});
    else im.raw_matcher.split(s, 0, skip_special, &spans_raw);
    for (const TextSpan& span : spans_raw) {
      if (span.id >= 0 || im.normalized_matcher.empty()) spans.push_back(span);
      else im.normalized_matcher.split(s.substr(span.begin, span.end - span.begin), span.begin, skip_special, &spans);
    }
  }
  const bool byte_level = im.pre.byte_level();
  const bool new_code_points = has_code_points_new_to_pcre2(s);
  for (const TextSpan& span : spans) {
    if (span.id >= 0) {
      ids->push_back(span.id);
      continue;
    }
    words.clear();
    im.pre.split(s.substr(span.begin, span.end - span.begin), new_code_points, &words);
    for (const PreToken& w : words) {
      if (!w.prefix_space) {
        im.bpe.encode_word(w.text, byte_level, ids);
        continue;
      }
      spaced_word.clear();
      spaced_word.push_back(' ');
      spaced_word.append(w.text);
      im.bpe.encode_word(spaced_word, byte_level, ids);
    }
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    raw += token_bytes(id);
  }
  if (utf8_is_valid(raw)) return raw;
  std::string text;
  append_utf8_lossy(raw, &text);
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_ids.find(token);
  if (it != impl_->added_ids.end()) return it->second;
  return impl_->bpe.token_to_id(token);
}

std::optional<std::string_view> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !impl_->id_present[id]) return std::nullopt;
  return impl_->id_token[id];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  const uint32_t b = impl_->id_bytes_offset[id], e = impl_->id_bytes_offset[id + 1];
  return std::string_view(impl_->id_bytes).substr(b, e - b);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < id_limit() && impl_->id_special[id] != 0;
}

std::vector<int32_t> Tokenizer::added_token_ids() const {
  std::vector<int32_t> ids;
  for (const AddedToken& t : impl_->added) ids.push_back(t.id);
  return ids;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

int32_t Tokenizer::id_limit() const { return static_cast<int32_t>(impl_->id_present.size()); }

std::string printable_token_bytes(std::string_view bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const size_t n = utf8_sequence_length(bytes.substr(i));
    if (n > 1) {
      out.append(bytes.substr(i, n));
      i += n;
      continue;
    }
    ++i;
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (n == 1 && c >= 0x20 && c != 0x7F) out.push_back(static_cast<char>(c));
    else (out += "\\x") += std::string{kHex[c >> 4], kHex[c & 15]};
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string_view StreamDecoder::push(int32_t id) {
  text_.clear();
  if (skip_special_ && tokenizer_->is_special(id)) return text_;
  pending_ += tokenizer_->token_bytes(id);
  const size_t consumed = append_utf8_lossy_prefix(pending_, /*at_end=*/false, &text_);
  pending_.erase(0, consumed);
  return text_;
}

std::string_view StreamDecoder::flush() {
  text_.clear();
  append_utf8_lossy(pending_, &text_);
  pending_.clear();
  return text_;
}

void StreamDecoder::reset() {
  pending_.clear();
  text_.clear();
}

}  // namespace deepinfer
