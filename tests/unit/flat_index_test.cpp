// FlatIndex: lookups and inserts, keys that share a home (linear probing), an O(1) reset that forgets every key,
// growth on a reset for more keys, and the refusal of more keys than reset() made room for.
#include "core/flat_index.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

TEST(FlatIndex, FindsWhatWasInsertedAndForgetsItOnReset) {
  FlatIndex index(6);
  index.reset(100);
  for (uint64_t k = 0; k < 100; ++k) {
    const auto [value, inserted] = index.try_emplace(0x10000 + 68 * k, int32_t(k));  // two keys share a 64-byte home
    EXPECT_TRUE(inserted);
    EXPECT_EQ(value, int64_t(k));
  }
  EXPECT_EQ(index.size(), 100);
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(index.find(0x10000 + 68 * k), int64_t(k));
  EXPECT_EQ(index.find(0x10000 + 68 * 100), -1);
  const auto [value, inserted] = index.try_emplace(0x10000 + 68 * 7, 555);
  EXPECT_FALSE(inserted);
  EXPECT_EQ(value, 7);
  index.reset(100);
  EXPECT_EQ(index.size(), 0);
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(index.find(0x10000 + 68 * k), -1);
  index.reset(5000);  // grows
  for (uint64_t k = 0; k < 5000; ++k) index.try_emplace(k + 1, int32_t(k));
  for (uint64_t k = 0; k < 5000; ++k) ASSERT_EQ(index.find(k + 1), int64_t(k));
}

TEST(FlatIndex, RefusesMoreKeysThanItHasRoomFor) {
  FlatIndex index;
  index.reset(8);
  for (int64_t k = 0; k < index.max_keys(); ++k) index.try_emplace(uint64_t(k) + 1, 0);
  EXPECT_DEATH(index.try_emplace(uint64_t(index.max_keys()) + 1, 0), "more keys");
}

}  // namespace
}  // namespace deepinfer
