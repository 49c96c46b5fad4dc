// The prefix cache's bookkeeping without a model: longest match, token verification, layout compatibility,
// LRU eviction under the byte budget, deduplication.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace deepinfer {
namespace {

SequenceState state_with_bytes(size_t n_floats, int64_t n_tokens) {  // n_floats * 4 cache bytes
  SequenceState s;
  s.layers.resize(1);
  s.layers[0].window.assign(n_floats * sizeof(float), uint8_t(n_tokens));
  s.n_tokens = n_tokens;
  return s;
}

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

LayoutClass long_prompt(int64_t n_prompt) { return {128, n_prompt, 128}; }

TEST(PrefixCache, LongestMatchingPrefixWins) {
  PrefixCache cache(1 << 20);
  const std::vector<int32_t> tokens = iota_tokens(300);
  cache.insert(std::span(tokens).first(128), long_prompt(300), state_with_bytes(16, 128));
  cache.insert(std::span(tokens).first(256), long_prompt(300), state_with_bytes(16, 256));
  const PrefixCache::Match m = cache.lookup(tokens, 299, long_prompt(300));
  EXPECT_EQ(m.n_tokens, 256);
  ASSERT_NE(m.state, nullptr);
  EXPECT_EQ(m.state->n_tokens, 256);
  EXPECT_EQ(cache.lookup(tokens, 200, long_prompt(300)).n_tokens, 128);  // capped by max_tokens
}

TEST(PrefixCache, DifferentTokensDoNotMatch) {
  PrefixCache cache(1 << 20);
  const std::vector<int32_t> a = iota_tokens(200);
  std::vector<int32_t> b = a;
  b[100] = 99999;
  cache.insert(std::span(a).first(150), long_prompt(200), state_with_bytes(16, 150));
  EXPECT_EQ(cache.lookup(b, 199, long_prompt(200)).n_tokens, 0);
  b = a;
  b[149] = -5;
  EXPECT_EQ(cache.lookup(b, 199, long_prompt(200)).n_tokens, 0);
}

TEST(PrefixCache, LayoutClassesMustAgree) {
  PrefixCache cache(1 << 20);
  const std::vector<int32_t> tokens = iota_tokens(400);
  // A V4 prompt of 100 tokens (< window 128) was laid out with 100 window slots.
  cache.insert(std::span(tokens).first(64), LayoutClass{100, 100, 128}, state_with_bytes(16, 64));
  EXPECT_EQ(cache.lookup(tokens, 149, LayoutClass{128, 150, 128}).n_tokens, 0);  // a 150-token prompt: 128 slots
  EXPECT_EQ(cache.lookup(tokens, 99, LayoutClass{100, 100, 128}).n_tokens, 64);  // same length: same layout
  // Generated tokens (decode layout) are reusable by prompts of at least a window.
  cache.insert(std::span(tokens).first(300), LayoutClass{128, 200, 128}, state_with_bytes(16, 300));
  EXPECT_EQ(cache.lookup(tokens, 399, LayoutClass{128, 400, 128}).n_tokens, 300);
  // ...but not by a sequence that laid those positions out differently.
  EXPECT_EQ(cache.lookup(tokens, 120, LayoutClass{121, 121, 128}).n_tokens, 0);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedWithinBudget) {
  const std::vector<int32_t> a = iota_tokens(10, 0), b = iota_tokens(10, 100), c = iota_tokens(10, 200);
  const SequenceState s = state_with_bytes(1000, 5);  // ~4 KB each
  PrefixCache cache(3 * 4000 + 3 * 1000);
  cache.insert(std::span(a).first(5), long_prompt(10), s);
  cache.insert(std::span(b).first(5), long_prompt(10), s);
  cache.insert(std::span(c).first(5), long_prompt(10), s);
  EXPECT_EQ(cache.n_entries(), 3);
  EXPECT_EQ(cache.lookup(a, 9, long_prompt(10)).n_tokens, 5);  // a becomes most recent
  const std::vector<int32_t> d = iota_tokens(10, 300);
  cache.insert(std::span(d).first(5), long_prompt(10), s);  // evicts b
  EXPECT_EQ(cache.n_entries(), 3);
  EXPECT_EQ(cache.lookup(b, 9, long_prompt(10)).n_tokens, 0);
  EXPECT_EQ(cache.lookup(a, 9, long_prompt(10)).n_tokens, 5);
  EXPECT_LE(cache.bytes_used(), 3 * 4000 + 3 * 1000);
}

TEST(PrefixCache, DeduplicatesAndSkipsOversizedSnapshots) {
  const std::vector<int32_t> a = iota_tokens(10);
  PrefixCache cache(2000);
  cache.insert(std::span(a).first(5), long_prompt(10), state_with_bytes(10, 5));
  cache.insert(std::span(a).first(5), long_prompt(10), state_with_bytes(10, 5));
  EXPECT_EQ(cache.n_entries(), 1);
  cache.insert(std::span(a).first(6), long_prompt(10), state_with_bytes(100000, 6));  // bigger than the budget
  EXPECT_EQ(cache.n_entries(), 1);
}

}  // namespace
}  // namespace deepinfer
