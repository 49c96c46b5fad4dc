// BPE model: vocabulary and merges from tokenizer.json, and HF's Word::merge_all ported step for step.
// Merges may be stored as "a b" strings or ["a", "b"] arrays; a merge whose parts or result are not in the
// vocabulary is a load error, as in HF (MergeTokenOutOfVocabulary).
#include "format/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>

#include "core/utf8.h"

namespace deepinfer {

using nlohmann::json;

const std::vector<char32_t>& byte_level_chars() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256, 0);
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? static_cast<char32_t>(b) : next++;
    return t;
  }();
  return table;
}

// Open-addressing map (a_id, b_id) -> (rank, new_id). Load factor <= 0.5; keys are never erased.
struct BpeModel::MergeTable {
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t new_id = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<Entry> slots;
  size_t mask = 0;
  size_t n_entries = 0;

  explicit MergeTable(size_t n_expected) {
    size_t cap = 16;
    while (cap < 2 * n_expected + 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  // Later duplicates overwrite earlier ones, as HF's HashMap collect does.
  void insert(int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    const uint64_t key = make_key(a, b);
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty) {
        slots[i] = {key, rank, new_id};
        ++n_entries;
        return;
      }
      if (slots[i].key == key) {
        slots[i].rank = rank;
        slots[i].new_id = new_id;
        return;
      }
    }
  }
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t key = make_key(a, b);
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Words already encoded. Like HF's BPE cache it stops inserting when full rather than evicting.
struct BpeModel::WordCache {
  static constexpr size_t kCapacity = 1 << 16;
  static constexpr size_t kMaxWordBytes = 256;
  std::shared_mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

BpeModel::BpeModel() : cache_(std::make_unique<WordCache>()) {
  std::fill(std::begin(byte_symbol_id_), std::end(byte_symbol_id_), -1);
}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

size_t BpeModel::n_merges() const { return merges_ ? merges_->n_entries : 0; }

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

Result<BpeModel> BpeModel::from_json(const json& model, const std::string& where) {
  const std::string ctx = where + ": model";
  if (!model.is_object()) return Status::error(ctx + " is not an object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") return Status::error(ctx + ".type is '" + type + "'; only BPE is supported");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    return Status::error(ctx + ".dropout is set; BPE dropout is random and is not supported for inference");
  }
  BpeModel bpe;
  const auto string_or_empty = [&](const char* key) {
    return model.contains(key) && model[key].is_string() ? model[key].get<std::string>() : std::string();
  };
  bpe.continuing_subword_prefix_ = string_or_empty("continuing_subword_prefix");
  bpe.end_of_word_suffix_ = string_or_empty("end_of_word_suffix");
  bpe.fuse_unk_ = model.value("fuse_unk", false);
  bpe.byte_fallback_ = model.value("byte_fallback", false);
  bpe.ignore_merges_ = model.value("ignore_merges", false);

  if (!model.contains("vocab") || !model["vocab"].is_object()) return Status::error(ctx + ".vocab is missing");
  const json& vocab = model["vocab"];
  bpe.vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) return Status::error(ctx + ".vocab['" + it.key() + "'] is not an integer");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX) return Status::error(ctx + ".vocab['" + it.key() + "'] has id out of range");
    bpe.vocab_.emplace(it.key(), static_cast<int32_t>(id));
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"].get<std::string>();
    auto id = bpe.token_to_id(unk);
    if (!id) return Status::error(ctx + ".unk_token '" + unk + "' is not in the vocabulary");
    bpe.unk_id_ = *id;
  }

  const json empty = json::array();
  const json& merges = model.contains("merges") && model["merges"].is_array() ? model["merges"] : empty;
  bpe.merges_ = std::make_unique<MergeTable>(merges.size());
  const size_t prefix_len = bpe.continuing_subword_prefix_.size();
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string_view a, b;
    if (m.is_string()) {
      const std::string_view line = m.get_ref<const std::string&>();
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
        return Status::error(ctx + ".merges[" + std::to_string(rank) + "] '" + std::string(line) + "' is not 'a b'");
      }
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      return Status::error(ctx + ".merges[" + std::to_string(rank) + "] is neither 'a b' nor [a, b]");
    }
    const auto id_a = bpe.token_to_id(a), id_b = bpe.token_to_id(b);
    if (!id_a || !id_b) {
      return Status::error(ctx + ".merges[" + std::to_string(rank) + "]: '" + std::string(id_a ? b : a) +
                           "' is not in the vocabulary");
    }
    merged.assign(a);
    if (b.size() >= prefix_len) merged.append(b.substr(prefix_len));
    const auto id_merged = bpe.token_to_id(merged);
    if (!id_merged) {
      return Status::error(ctx + ".merges[" + std::to_string(rank) + "]: result '" + merged +
                           "' is not in the vocabulary");
    }
    bpe.merges_->insert(*id_a, *id_b, static_cast<uint32_t>(rank), *id_merged);
  }

  const auto& chars = byte_level_chars();
  bool all_bytes = true;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(chars[b], &s);
    const auto id = bpe.token_to_id(s);
    bpe.byte_symbol_id_[b] = id ? *id : -1;
    all_bytes = all_bytes && id.has_value();
  }
  bpe.byte_fast_path_ = all_bytes && bpe.continuing_subword_prefix_.empty() && bpe.end_of_word_suffix_.empty();
  return bpe;
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t n_bytes;  // 0 marks a symbol merged into its left neighbour
};

struct MergeCandidate {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
  int32_t left_id, right_id;  // the pair when queued: if still in place, HF's stale check passes trivially
};
// std heap functions build a max-heap; "greater" puts the lowest (rank, pos) on top, as HF's Ord does.
struct CandidateAfter {
  bool operator()(const MergeCandidate& x, const MergeCandidate& y) const {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  }
};

void add_to_word(std::vector<Symbol>* word, int32_t id, uint32_t n_bytes) {
  const int32_t n = static_cast<int32_t>(word->size());
  if (n > 0) word->back().next = n;
  word->push_back({id, n - 1, -1, n_bytes});
}

}  // namespace

void BpeModel::encode_word(std::string_view word, bool byte_level, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (byte_level && byte_fast_path_ && word.size() == 1 && !ignore_merges_) {
    out->push_back(byte_symbol_id_[static_cast<uint8_t>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_->mu);
    auto it = cache_->map.find(word);
    if (it != cache_->map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  encode_word_uncached(word, byte_level, out);
  if (cacheable) {
    std::unique_lock lock(cache_->mu);
    if (cache_->map.size() < WordCache::kCapacity) {
      cache_->map.try_emplace(std::string(word), out->begin() + static_cast<ptrdiff_t>(first), out->end());
    }
  }
}

void BpeModel::encode_word_uncached(std::string_view word, bool byte_level, std::vector<int32_t>* out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<MergeCandidate> heap;
  thread_local std::string symbol_text;
  symbols.clear();
  heap.clear();

  if (ignore_merges_) {  // HF: a word that is itself a token is not merged at all
    symbol_text.clear();
    if (byte_level) {
      for (char c : word) append_utf8(byte_level_chars()[static_cast<uint8_t>(c)], &symbol_text);
    } else {
      symbol_text.assign(word);
    }
    if (auto id = token_to_id(symbol_text)) {
      out->push_back(*id);
      return;
    }
  }

  if (byte_level && byte_fast_path_) {
    for (char c : word) add_to_word(&symbols, byte_symbol_id_[static_cast<uint8_t>(c)], 1);
  } else {
    // HF BPE::merge_word: one symbol per char, continuing prefix / end suffix, byte fallback, unk.
    bool has_unk = false;  // an unk symbol waiting to be added (HF fuses consecutive ones with fuse_unk)
    uint32_t unk_n_bytes = 0;
    size_t i = 0;
    while (i < word.size()) {
      size_t n = 1;
      if (!byte_level) {
        n = utf8_sequence_length(word.substr(i));
        DI_CHECK_MSG(n > 0, "BPE word is not valid UTF-8");  // the caller repairs input first
      }
      const bool is_first = i == 0, is_last = i + n == word.size();
      symbol_text.clear();
      if (!is_first) symbol_text += continuing_subword_prefix_;
      if (byte_level) {
        append_utf8(byte_level_chars()[static_cast<uint8_t>(word[i])], &symbol_text);
      } else {
        symbol_text.append(word.substr(i, n));
      }
      if (is_last) symbol_text += end_of_word_suffix_;
      const uint32_t n_bytes = static_cast<uint32_t>(n);  // only offsets and the "removed" mark use it
      i += n;

      if (auto id = token_to_id(symbol_text)) {
        if (has_unk) {
          add_to_word(&symbols, *unk_id_, unk_n_bytes);
          has_unk = false;
        }
        add_to_word(&symbols, *id, n_bytes);
        continue;
      }
      if (byte_fallback_) {
        bool all_found = true;
        std::vector<int32_t> ids;
        for (unsigned char c : symbol_text) {
          char name[8];
          std::snprintf(name, sizeof(name), "<0x%02X>", c);
          auto id = token_to_id(name);
          if (!id) { all_found = false; break; }
          ids.push_back(*id);
        }
        if (all_found) {
          for (int32_t id : ids) add_to_word(&symbols, id, 1);
          continue;
        }
      }
      if (unk_id_) {
        if (has_unk && fuse_unk_) {
          unk_n_bytes += n_bytes;
        } else {
          if (has_unk) add_to_word(&symbols, *unk_id_, unk_n_bytes);
          has_unk = true;
          unk_n_bytes = n_bytes;
        }
      }
      // No unk token: HF drops the symbol silently.
    }
    if (has_unk) add_to_word(&symbols, *unk_id_, unk_n_bytes);
  }

  // HF Word::merge_all (no dropout), step for step.
  const MergeTable& merges = *merges_;
  for (size_t p = 0; p + 1 < symbols.size(); ++p) {
    if (const auto* m = merges.find(symbols[p].id, symbols[p + 1].id)) {
      heap.push_back({m->rank, static_cast<uint32_t>(p), m->new_id, symbols[p].id, symbols[p + 1].id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), CandidateAfter{});
  const auto push = [&](MergeCandidate c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    const MergeCandidate top = heap.back();
    heap.pop_back();
    Symbol& cur = symbols[top.pos];
    if (cur.n_bytes == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    // HF's stale-entry rule: apply only if the pair now in place merges to the same id. A pair unchanged since
    // it was queued passes without a lookup; a changed one is looked up (and may still pass, as in HF).
    if (cur.id != top.left_id || right.id != top.right_id) {
      const auto* target = merges.find(cur.id, right.id);
      if (target == nullptr || target->new_id != top.new_id) continue;
    }
    cur.id = top.new_id;
    cur.n_bytes += right.n_bytes;
    cur.next = right.next;
    symbols[next_pos].n_bytes = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
      symbols[right.next].prev = static_cast<int32_t>(top.pos);
    }
    if (cur.prev >= 0) {
      if (const auto* m = merges.find(symbols[cur.prev].id, cur.id)) {
        push({m->rank, static_cast<uint32_t>(cur.prev), m->new_id, symbols[cur.prev].id, cur.id});
      }
    }
    if (cur.next > -1 && static_cast<size_t>(cur.next) < symbols.size()) {
      if (const auto* m = merges.find(cur.id, symbols[cur.next].id)) {
        push({m->rank, top.pos, m->new_id, cur.id, symbols[cur.next].id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.n_bytes != 0) out->push_back(s.id);
  }
}

}  // namespace deepinfer
