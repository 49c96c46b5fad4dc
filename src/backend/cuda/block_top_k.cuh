// The pieces of a block's top-k selection that the indexer's selection (index_select_kernel.cu) and a top-k draw's
// candidates (row_top_k_kernel.cu) share: a radix select's histogram counts and bin choice, the selected entries'
// placement (ties ranked by index), and the bitonic sort of them. An entry is (key << 32) | (0xffffffff - index):
// larger keys first, and of equal keys the lower index first.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda {

namespace {  // each .cu file its own copy: the build compiles every file on its own (no -rdc)

// Among 256 bins counted from the top, the bin where the count reaches `want` (1 <= want <= the total), and how
// many are in the bins above it. One thread.
__device__ __forceinline__ void find_bin(const uint32_t* hist, int64_t want, uint32_t* bin, int64_t* above) {
  int64_t seen = 0;
  for (int b = 255; b >= 0; --b) {
    if (seen + hist[b] >= want) {
      *bin = uint32_t(b);
      *above = seen;
      return;
    }
    seen += hist[b];
  }
  *bin = 0;
  *above = seen;
}

// One count in hist[bin] for each lane of the warp that has a bin (valid), by one atomic per distinct bin. The keys
// crowd into few bins (a first pass's are a value's sign and binary exponent; every masked key is in the -inf
// one), where an atomic per key would serialise the block on one shared address, ~n_keys in a row. Every lane of
// the warp calls it.
__device__ __forceinline__ void count_by_warp(uint32_t* hist, uint32_t bin, bool valid) {
  const unsigned same = __match_any_sync(0xffffffffu, valid ? bin : 0xffffffffu);
  if (valid && int(threadIdx.x & 31) == __ffs(int(same)) - 1) atomicAdd(&hist[bin], uint32_t(__popc(same)));
}

// counts[t] (thread t's count, written before the call) becomes the sum of counts[0, t): the rank of thread t's first
// item where each thread holds a contiguous run of indices. Every thread of the block calls it.
template <int kThreads>
__device__ __forceinline__ void exclusive_scan_by_thread(uint32_t* counts) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t sum = 0;
    for (int i = 0; i < kThreads; ++i) {
      const uint32_t c = counts[i];
      counts[i] = sum;
      sum += c;
    }
  }
  __syncthreads();
}

// The selection's entries, key_of(i) for i in [0, n): every index whose key is above the threshold, anywhere in
// entries [0, first_equal) (n_placed counts them: 0 before the first call that places any), and of those equal to it
// the `wanted` lowest indices, in index order, into [first_equal, first_equal + wanted). Each thread takes a contiguous
// run of indices, so that a block scan of its counts of equal keys (counts: kThreads of shared memory) ranks them by
// index. An entry's index is index_base + i (a row's chunk: wanted and first_equal then net of the equal keys of the
// chunks before it). Every thread of the block calls it.
template <int kThreads, class KeyOf>
__device__ __forceinline__ void place_selected_entries(const KeyOf& key_of, int64_t n, uint32_t threshold,
                                                       int64_t first_equal, int64_t wanted, uint32_t* counts,
                                                       uint32_t* n_placed, uint64_t* entries, int64_t index_base = 0) {
  const int64_t run = (n + kThreads - 1) / kThreads, i0 = min(n, int64_t(threadIdx.x) * run), i1 = min(n, i0 + run);
  uint32_t equal = 0;
  for (int64_t i = i0; i < i1; ++i) equal += key_of(i) == threshold;
  counts[threadIdx.x] = equal;
  exclusive_scan_by_thread<kThreads>(counts);
  int64_t rank = counts[threadIdx.x];
  for (int64_t i = i0; i < i1; ++i) {
    const uint32_t key = key_of(i);
    const uint64_t entry = (uint64_t(key) << 32) | (0xffffffffu - uint32_t(index_base + i));
    if (key > threshold) {
      entries[atomicAdd(n_placed, 1u)] = entry;
    } else if (key == threshold) {
      if (rank < wanted) entries[first_equal + rank] = entry;
      ++rank;
    }
  }
}

// entries[0, k) sorted best first (larger entry first): a bitonic sort over the next power of two, padded with 0
// (below any entry), so entries holds that many. Every thread of the block calls it, after writing its entries.
template <int kThreads>
__device__ __forceinline__ void sort_entries_best_first(uint64_t* entries, int64_t k) {
  int64_t size = 1;
  while (size < k) size <<= 1;
  for (int64_t i = k + threadIdx.x; i < size; i += kThreads) entries[i] = 0;
  __syncthreads();
  for (int64_t span = 2; span <= size; span <<= 1) {
    for (int64_t stride = span / 2; stride > 0; stride >>= 1) {
      for (int64_t i = threadIdx.x; i < size; i += kThreads) {
        const int64_t partner = i ^ stride;
        if (partner > i) {
          const uint64_t a = entries[i], b = entries[partner];
          const bool descending = (i & span) == 0;
          if ((a < b) == descending) {
            entries[i] = b;
            entries[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

}  // namespace

}  // namespace deepinfer::cuda
