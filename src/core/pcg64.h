// numpy's default generator, bit for bit: `numpy.random.default_rng(seed)` (SeedSequence -> PCG64, the
// XSL-RR 128/64 variant) and `Generator.integers(low, high, dtype=int64)` (Lemire's multiply-shift with
// rejection). Only what the Engram hash multipliers (spec §7.6 step 5) need. Integer-only: the values
// exceed 2^53, so nothing here may pass through a double. Invariant: the output sequence equals numpy's
// (numpy >= 1.17, where Generator uses Lemire) for the same seed and the same calls.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang; __extension__ keeps -Wpedantic quiet

class Pcg64 {
 public:
  // numpy.random.default_rng(seed) for a non-negative int seed (entropy through numpy's SeedSequence).
  explicit Pcg64(uint64_t seed);

  uint64_t next_uint64();
  // numpy's next_uint32: the low half of a 64-bit draw, then its high half on the next call.
  uint32_t next_uint32();

  // Generator.integers(low, high, size=n, dtype=int64) with high exclusive; requires low < high.
  std::vector<int64_t> integers(int64_t low, int64_t high, int n);

 private:
  Uint128 state_ = 0, inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uint32_ = 0;
  uint64_t bounded_lemire_uint64(uint64_t range);  // uniform in [0, range] (inclusive)
  uint32_t bounded_lemire_uint32(uint32_t range);
};

// The Engram n-gram hash multipliers of one layer (spec §7.6 step 5): default_rng(10007 * layer_id)
// .integers(0, bound, n, int64) * 2 + 1 with bound = max(1, (2^63 - 1) // compressed_vocab // 2).
std::vector<int64_t> engram_multipliers(int layer_id, int64_t compressed_vocab, int n);

}  // namespace deepinfer
