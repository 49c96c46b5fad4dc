#include "engine/prefix_cache.h"

#include <algorithm>

namespace deepinfer {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

void prefix_hashes(std::span<const int32_t> tokens, int64_t max_tokens, std::vector<uint64_t>& out) {
  const int64_t n = std::min<int64_t>(max_tokens, int64_t(tokens.size()));
  out.resize(size_t(n + 1));
  uint64_t h = 0x9e3779b97f4a7c15ull;
  out[0] = mix(h);
  for (int64_t i = 0; i < n; ++i) {
    h = (h ^ uint64_t(uint32_t(tokens[size_t(i)]))) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
    out[size_t(i + 1)] = mix(h ^ uint64_t(i + 1));
  }
}

bool PrefixCache::compatible(const LayoutClass& cached, const LayoutClass& query, int64_t n_tokens) {
  // Every token t < n_tokens must have had the class the query's sequence gives it.
  auto class_of = [](const LayoutClass& l, int64_t t) { return t < l.n_prompt ? l.prompt_class : l.decode_class; };
  // Classes are piecewise constant with one break each: checking both pieces' ends suffices.
  for (int64_t t : {int64_t(0), std::min(cached.n_prompt, n_tokens) - 1, std::min(query.n_prompt, n_tokens) - 1,
                    std::min(cached.n_prompt, n_tokens), std::min(query.n_prompt, n_tokens), n_tokens - 1}) {
    if (t < 0 || t >= n_tokens) continue;
    if (class_of(cached, t) != class_of(query, t)) return false;
  }
  return true;
}

PrefixCache::Match PrefixCache::lookup(std::span<const int32_t> tokens, int64_t max_tokens, const LayoutClass& layout) {
  Match match;
  if (lru_.empty() || max_tokens <= 0) return match;
  prefix_hashes(tokens, max_tokens, hashes_);
  const int64_t limit = int64_t(hashes_.size()) - 1;
  for (auto it = lengths_.rbegin(); it != lengths_.rend(); ++it) {
    const int64_t n = it->first;
    if (n > limit) continue;
    auto [lo, hi] = by_hash_.equal_range(hashes_[size_t(n)]);
    for (auto h = lo; h != hi; ++h) {
      Entry& e = *h->second;
      if (int64_t(e.tokens.size()) != n || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) continue;
      if (!compatible(e.layout, layout, n)) continue;
      lru_.splice(lru_.begin(), lru_, h->second);  // most recently used
      match.n_tokens = n;
      match.state = &e.state;
      return match;
    }
  }
  return match;
}

void PrefixCache::insert(std::span<const int32_t> tokens, const LayoutClass& layout, const SequenceState& state) {
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  const int64_t bytes = state.fixed_bytes() + n * int64_t(sizeof(int32_t)) + int64_t(sizeof(Entry));
  if (bytes > budget_bytes_) return;
  prefix_hashes(tokens, n, hashes_);
  const uint64_t hash = hashes_[size_t(n)];
  auto [lo, hi] = by_hash_.equal_range(hash);
  for (auto h = lo; h != hi; ++h) {
    Entry& e = *h->second;
    if (int64_t(e.tokens.size()) == n && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin()) &&
        compatible(e.layout, layout, n) && compatible(layout, e.layout, n)) {
      lru_.splice(lru_.begin(), lru_, h->second);
      return;
    }
  }
  while (bytes_used_ + bytes > budget_bytes_ && !lru_.empty()) evict_one();
  lru_.push_front(Entry{hash, std::vector<int32_t>(tokens.begin(), tokens.end()), layout, state, bytes});
  by_hash_.emplace(hash, lru_.begin());
  lengths_[n] += 1;
  bytes_used_ += bytes;
}

bool PrefixCache::evict_lru() {
  if (lru_.empty()) return false;
  evict_one();
  return true;
}

void PrefixCache::evict_one() {
  auto victim = std::prev(lru_.end());
  auto [lo, hi] = by_hash_.equal_range(victim->hash);
  for (auto h = lo; h != hi; ++h) {
    if (h->second == victim) {
      by_hash_.erase(h);
      break;
    }
  }
  const int64_t n = int64_t(victim->tokens.size());
  if (--lengths_[n] == 0) lengths_.erase(n);
  bytes_used_ -= victim->bytes;
  lru_.erase(victim);
}

}  // namespace deepinfer
