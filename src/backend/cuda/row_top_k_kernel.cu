// A top-k or nucleus draw's candidates on the device (kernels.h: launch_row_top_k): a row's first k in the draw's
// order (larger s = f32(x / T) first, ties to the lower id), by a radix select of the k-th largest s's bits (four 8-bit
// digits, a histogram each), the ids above it and the lowest ids equal to it, then a sort of the k entries (bits, ~id):
// the indexer's selection's pieces (block_top_k.cuh) on 32-bit keys. One block a row, or for a launch of few rows each
// row spread over blocks of 2,048 ids: every block adds its chunk's counts to the row's histogram of each digit, then
// places its chunk's entries, and one block a row sorts them. The same entries either way, so the same candidates.
#include <cuda_runtime.h>

#include "backend/cuda/block_top_k.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/draw_keys.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kDigits = 4;  // of 8 bits, the highest first

// A row's candidates out of its sorted entries.
__device__ void write_candidates(const uint64_t* entries, int k, DeviceDrawCandidate* row_out) {
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const uint64_t entry = entries[j];
    row_out[j] = {float_of_order_bits(uint32_t(entry >> 32)), int32_t(0xffffffffu - uint32_t(entry))};
  }
}

// histogram[digit] += 1 for each key bits_of(i), i in [begin, end), whose bits under `mask` are `prefix`, its digit the
// byte at `shift`. Every thread of the block calls it and takes the same rounds: whole warps count.
template <class BitsOf>
__device__ void count_digits(uint32_t* histogram, const BitsOf& bits_of, int64_t begin, int64_t end, int shift,
                             uint32_t mask, uint32_t prefix) {
  for (int64_t base = begin; base < end; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const uint32_t b = i < end ? bits_of(i) : 0;
    count_by_warp(histogram, (b >> shift) & 255u, i < end && (b & mask) == prefix);
  }
}

// One block per row with top_k > 0. (Launch bounds of 4 blocks an SM, as many as a launch of 256 rows needs, leave
// ptxas up to 64 registers a thread: with its default it took 32, for 8 blocks an SM, and sm_100a spilled 12 bytes.)
__global__ void __launch_bounds__(kThreads, 4) row_top_k_kernel(const float* x, int64_t width, int64_t stride,
                                                                const DeviceTokenDraw* draws, DeviceDrawCandidate* out) {
  const int k = draws[blockIdx.x].top_k;
  if (k <= 0) return;
  const float temperature = draws[blockIdx.x].temperature;
  const float* row = x + int64_t(blockIdx.x) * stride;
  auto bits_of = [&](int64_t i) { return order_bits(scaled_logit(row[i], temperature)); };
  __shared__ uint32_t histogram[256];
  __shared__ uint32_t prefix, n_placed, equal_count[kThreads];
  __shared__ int64_t wanted;  // how many of those matching the prefix are still to take
  __shared__ uint64_t entries[kRowTopKMax];
  if (threadIdx.x == 0) {
    prefix = 0;
    wanted = k;
    n_placed = 0;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    histogram[threadIdx.x] = 0;
    __syncthreads();
    const uint32_t at = prefix;
    count_digits(histogram, bits_of, 0, width, shift, mask, at);
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t digit = 0;
      int64_t above = 0;
      find_bin(histogram, wanted, &digit, &above);
      wanted -= above;
      prefix = at | (digit << shift);
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  // The k-th largest bits: the k - wanted ids above them, and the `wanted` lowest ids equal to them after those.
  place_selected_entries<kThreads>(bits_of, width, prefix, k - wanted, wanted, equal_count, &n_placed, entries);
  sort_entries_best_first<kThreads>(entries, k);
  write_candidates(entries, k, out + draws[blockIdx.x].candidates_at);
}

// A split launch's scratch (kernels.h: row_top_k_split_scratch_bytes), row r's parts at r times their size.
struct SplitScratch {
  uint64_t* entries;      // [max_k]: the row's entries, placed by its chunks
  uint32_t* histograms;   // [kDigits][256]: the row's count of each digit among the keys that match the digits above
  uint32_t* n_placed;     // [1]: the entries above the threshold placed so far
  uint32_t* last_digits;  // [n_chunks][256]: each chunk's count of the last digit
};

__device__ __forceinline__ SplitScratch split_scratch(void* scratch, int64_t n_rows, int max_k, int64_t n_chunks) {
  auto* entries = static_cast<uint64_t*>(scratch);
  auto* histograms = reinterpret_cast<uint32_t*>(entries + n_rows * max_k);
  uint32_t* n_placed = histograms + n_rows * kDigits * 256;
  return {entries, histograms, n_placed, n_placed + n_rows};
}

// find_bin over a histogram in global memory, by one warp (every lane gets the answer): lane l sums bins 255 - 8l down
// to 248 - 8l, a scan of those sums across the lanes gives each lane the count above its bins, and the lane whose
// bins reach `want` finds its bin. The same bin and count above as find_bin.
__device__ void warp_find_bin(const uint32_t* hist, int64_t want, uint32_t* bin, int64_t* above) {
  const int lane = threadIdx.x & 31;
  uint32_t counts[8], mine = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    counts[j] = hist[255 - 8 * lane - j];
    mine += counts[j];
  }
  // Inclusive scan with xor shuffles: `total` is the sum over the aligned group of 2 * off lanes holding this one.
  int64_t inclusive = mine, total = mine;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, total, off);
    if (lane & off) inclusive += other;
    total += other;
  }
  int64_t seen = inclusive - mine, found_bin = -1, found_above = -1;
  if (seen < want && want <= inclusive) {  // (one lane: the counts are not negative)
    for (int j = 0; j < 8; ++j) {
      if (seen + counts[j] >= want) {
        found_bin = 255 - 8 * lane - j;
        found_above = seen;
        break;
      }
      seen += counts[j];
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    found_bin = max(found_bin, __shfl_xor_sync(0xffffffffu, found_bin, off));
    found_above = max(found_above, __shfl_xor_sync(0xffffffffu, found_above, off));
  }
  *bin = found_bin < 0 ? 0 : uint32_t(found_bin);  // (want past the total: find_bin's bin 0 and the total above it)
  *above = found_bin < 0 ? total : found_above;
}

// The digits above `digit` as the row's histograms chose them, as the whole kernel chooses them: the prefix they make,
// its mask, and how many of the keys that match it are still to take. By each warp on its own, so every thread has
// them without a barrier.
__device__ void chosen_digits(const uint32_t* histograms, int digit, int k, uint32_t* prefix, uint32_t* mask, int64_t* wanted) {
  *prefix = 0;
  *mask = 0;
  *wanted = k;
  for (int d = 0; d < digit; ++d) {
    const int shift = 24 - 8 * d;
    uint32_t bin = 0;
    int64_t above = 0;
    warp_find_bin(histograms + d * 256, *wanted, &bin, &above);
    *wanted -= above;
    *prefix |= bin << shift;
    *mask |= 255u << shift;
  }
}

// Grid (n_chunks, n_rows): chunk blockIdx.x of row blockIdx.y adds its counts of `digit` among its keys that match
// the digits chosen above it to the row's histogram (zeroed before the first digit's launch).
__global__ void __launch_bounds__(kThreads) row_top_k_count_kernel(const float* x, int64_t width, int64_t stride,
                                                                   const DeviceTokenDraw* draws, void* scratch, int max_k,
                                                                   int digit) {
  const int64_t r = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
  const int k = draws[r].top_k;
  if (k <= 0) return;
  const SplitScratch s = split_scratch(scratch, gridDim.y, max_k, n_chunks);
  uint32_t* histograms = s.histograms + r * kDigits * 256;
  __shared__ uint32_t histogram[256];
  uint32_t prefix, mask;
  int64_t unused;
  chosen_digits(histograms, digit, k, &prefix, &mask, &unused);
  histogram[threadIdx.x] = 0;
  __syncthreads();
  const float temperature = draws[r].temperature;
  const float* row = x + r * stride;
  const int shift = 24 - 8 * digit;
  const int64_t begin = c * kRowDrawChunkIds, end = min(width, begin + kRowDrawChunkIds);
  count_digits(histogram, [&](int64_t i) { return order_bits(scaled_logit(row[i], temperature)); }, begin, end, shift,
               mask, prefix);
  __syncthreads();
  const uint32_t n = histogram[threadIdx.x];
  if (n) atomicAdd(&histograms[digit * 256 + threadIdx.x], n);
  if (digit == kDigits - 1) s.last_digits[(r * n_chunks + c) * 256 + threadIdx.x] = n;
}

// Grid (n_chunks, n_rows): chunk blockIdx.x of row blockIdx.y places its entries: those above the row's k-th largest
// key anywhere before the equal ones, and its keys equal to it ranked after the equal keys of the chunks before it.
// (Launch bounds of 4 blocks an SM, up to 64 registers: with ptxas's default, 40, sm_120 spilled 12 bytes.)
__global__ void __launch_bounds__(kThreads, 4) row_top_k_place_kernel(const float* x, int64_t width, int64_t stride,
                                                                   const DeviceTokenDraw* draws, void* scratch, int max_k) {
  const int64_t r = blockIdx.y, c = blockIdx.x, n_chunks = gridDim.x;
  const int k = draws[r].top_k;
  if (k <= 0) return;
  const SplitScratch s = split_scratch(scratch, gridDim.y, max_k, n_chunks);
  __shared__ uint32_t equal_count[kThreads];
  uint32_t threshold, mask;
  int64_t wanted;  // the equal keys to take
  chosen_digits(s.histograms + r * kDigits * 256, kDigits, k, &threshold, &mask, &wanted);
  // And those in the chunks before this one, summed by each warp (a lane every 32nd chunk).
  int64_t equal_before = 0;
  for (int64_t before = threadIdx.x & 31; before < c; before += 32) {
    equal_before += s.last_digits[(r * n_chunks + before) * 256 + (threshold & 255u)];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) equal_before += __shfl_xor_sync(0xffffffffu, equal_before, off);
  const float temperature = draws[r].temperature;
  const float* row = x + r * stride;
  const int64_t begin = c * kRowDrawChunkIds, end = min(width, begin + kRowDrawChunkIds);
  auto bits_of = [&](int64_t i) { return order_bits(scaled_logit(row[begin + i], temperature)); };
  place_selected_entries<kThreads>(bits_of, end - begin, threshold, k - wanted + equal_before, wanted - equal_before,
                                   equal_count, &s.n_placed[r], s.entries + r * max_k, begin);
}

// One block per row: its k entries sorted, as the whole kernel sorts them.
__global__ void __launch_bounds__(kThreads, 4) row_top_k_sort_kernel(const DeviceTokenDraw* draws, void* scratch, int max_k,
                                                                     int64_t n_chunks, DeviceDrawCandidate* out) {
  const int64_t r = blockIdx.x;
  const int k = draws[r].top_k;
  if (k <= 0) return;
  const SplitScratch s = split_scratch(scratch, gridDim.x, max_k, n_chunks);
  __shared__ uint64_t entries[kRowTopKMax];
  for (int j = threadIdx.x; j < k; j += kThreads) entries[j] = s.entries[r * max_k + j];
  sort_entries_best_first<kThreads>(entries, k);  // (its first barrier comes before any read)
  write_candidates(entries, k, out + draws[r].candidates_at);
}

}  // namespace

void launch_row_top_k(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int max_k, DeviceDrawCandidate* out, void* split_scratch, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && width < (int64_t(1) << 31) && stride >= width && n_rows <= 0x7fffffff && max_k > 0 &&
           max_k <= kRowTopKMax && max_k <= width);
  if (!split_scratch) {
    launch_kernel(row_top_k_kernel, unsigned(n_rows), kThreads, 0, stream, x, width, stride, draws, out);
    DI_CUDA_CHECK_LAUNCH();
    return;
  }
  DI_CHECK(n_rows <= 65535);  // (the grid's y)
  // The histograms and placement counts start at 0.
  const size_t entry_bytes = size_t(n_rows) * size_t(max_k) * sizeof(uint64_t);
  DI_CUDA_CHECK(cudaMemsetAsync(static_cast<uint8_t*>(split_scratch) + entry_bytes, 0,
                                size_t(n_rows) * (kDigits * 256 + 1) * sizeof(uint32_t), stream));
  const dim3 chunks(unsigned(row_draw_chunks(width)), unsigned(n_rows));
  for (int digit = 0; digit < kDigits; ++digit) {
    launch_kernel(row_top_k_count_kernel, chunks, kThreads, 0, stream, x, width, stride, draws, split_scratch, max_k, digit);
    DI_CUDA_CHECK_LAUNCH();
  }
  launch_kernel(row_top_k_place_kernel, chunks, kThreads, 0, stream, x, width, stride, draws, split_scratch, max_k);
  DI_CUDA_CHECK_LAUNCH();
  launch_kernel(row_top_k_sort_kernel, unsigned(n_rows), kThreads, 0, stream, draws, split_scratch, max_k, int64_t(chunks.x), out);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
