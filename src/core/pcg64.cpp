#include "core/pcg64.h"

#include <algorithm>
#include <array>

#include "core/status.h"

namespace deepinfer {

namespace {

// numpy/random/bit_generator.pyx (SeedSequence): the hash constants of its entropy mixer. All uint32 maths.
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16, kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// SeedSequence(seed).generate_state(4, uint64): the int seed becomes little-endian 32-bit words ([0] for
// 0); with no spawn key they are not padded to the pool size.
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  if (seed == 0) entropy.push_back(0);
  for (uint64_t n = seed; n > 0; n >>= 32) entropy.push_back(uint32_t(n));
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) pool[size_t(i)] = hashmix(size_t(i) < entropy.size() ? entropy[size_t(i)] : 0, &hash_const);
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[size_t(dst)] = mix(pool[size_t(dst)], hashmix(pool[size_t(src)], &hash_const));
    }
  }
  for (size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) pool[size_t(dst)] = mix(pool[size_t(dst)], hashmix(entropy[src], &hash_const));
  }
  // generate_state: 8 uint32 words cycling over the pool, viewed as 4 little-endian uint64.
  std::array<uint64_t, 4> out{};
  hash_const = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[size_t(i % kPoolSize)];
    v ^= hash_const;
    hash_const *= kMultB;
    v *= hash_const;
    v ^= v >> kXShift;
    out[size_t(i / 2)] |= uint64_t(v) << (32 * (i % 2));
  }
  return out;
}

constexpr Uint128 u128(uint64_t high, uint64_t low) { return Uint128(high) << 64 | low; }
// PCG_DEFAULT_MULTIPLIER_128
constexpr Uint128 kMultiplier = u128(2549297995355413924ULL, 4865540595714422341ULL);

}  // namespace

Pcg64::Pcg64(uint64_t seed) {
  // pcg64_set_seed(state, words 0..1, words 2..3): each 128-bit value is (word0 << 64 | word1), then
  // pcg_setseq_128_srandom_r.
  const std::array<uint64_t, 4> s = seed_sequence_state(seed);
  const Uint128 init_state = u128(s[0], s[1]), init_seq = u128(s[2], s[3]);
  state_ = 0;
  inc_ = init_seq << 1 | 1;
  state_ = state_ * kMultiplier + inc_;
  state_ += init_state;
  state_ = state_ * kMultiplier + inc_;
}

uint64_t Pcg64::next_uint64() {
  state_ = state_ * kMultiplier + inc_;  // step, then output the new state (XSL-RR)
  const uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
  const unsigned rot = unsigned(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t Pcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uint32_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uint32_ = uint32_t(next >> 32);
  return uint32_t(next);
}

// numpy distributions.c bounded_lemire_uint64: scale a draw by range+1, reject the biased low part.
uint64_t Pcg64::bounded_lemire_uint64(uint64_t range) {
  const uint64_t range_excl = range + 1;
  Uint128 m = Uint128(next_uint64()) * range_excl;
  uint64_t leftover = uint64_t(m);
  if (leftover < range_excl) {
    const uint64_t threshold = (UINT64_MAX - range) % range_excl;  // 2^64 mod range_excl
    while (leftover < threshold) {
      m = Uint128(next_uint64()) * range_excl;
      leftover = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

uint32_t Pcg64::bounded_lemire_uint32(uint32_t range) {
  const uint32_t range_excl = range + 1;
  uint64_t m = uint64_t(next_uint32()) * range_excl;
  uint32_t leftover = uint32_t(m);
  if (leftover < range_excl) {
    const uint32_t threshold = (UINT32_MAX - range) % range_excl;
    while (leftover < threshold) {
      m = uint64_t(next_uint32()) * range_excl;
      leftover = uint32_t(m);
    }
  }
  return uint32_t(m >> 32);
}

// numpy _bounded_integers._rand_int64 -> random_bounded_uint64_fill(off=low, rng=high-1-low, masked=False):
// a range that fits 32 bits draws 32-bit words (all-ones: raw words), the full 64-bit range raw 64-bit
// words, anything else Lemire on 64-bit words.
std::vector<int64_t> Pcg64::integers(int64_t low, int64_t high, int n) {
  DI_CHECK(low < high && n >= 0);
  const uint64_t range = uint64_t(high - 1) - uint64_t(low);
  const uint64_t off = uint64_t(low);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    uint64_t v;
    if (range == 0) v = 0;
    else if (range == 0xFFFFFFFFULL) v = next_uint32();
    else if (range < 0xFFFFFFFFULL) v = bounded_lemire_uint32(uint32_t(range));
    else if (range == UINT64_MAX) v = next_uint64();
    else v = bounded_lemire_uint64(range);
    out[size_t(i)] = int64_t(off + v);
  }
  return out;
}

std::vector<int64_t> engram_multipliers(int layer_id, int64_t compressed_vocab, int n) {
  DI_CHECK(layer_id >= 0 && compressed_vocab > 0);
  const int64_t bound = std::max<int64_t>(1, INT64_MAX / compressed_vocab / 2);
  std::vector<int64_t> v = Pcg64(uint64_t(10007) * uint64_t(layer_id)).integers(0, bound, n);
  for (int64_t& x : v) x = x * 2 + 1;  // odd; x < bound keeps id * multiplier below 2^63
  return v;
}

}  // namespace deepinfer
