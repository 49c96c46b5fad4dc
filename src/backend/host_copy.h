// Copies between host arrays (a device backend's pinned staging and the model's arrays) on a host backend's threads.
// One thread copies ~5-10 GB/s, and a batch-256 decode step stages tens of MB a layer where an array does not stay on
// the device (V4-Flash: the attention's queries and outputs, 33 MB each; the mHC stream, 16 MB), more than its PCIe
// transfer takes. Small copies stay on the calling thread. Free of any device API so that the CPU build covers it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/backend.h"

namespace deepinfer {

// Copies below this many bytes are not split.
inline constexpr size_t kThreadedCopyBytes = size_t(1) << 20;

// memcpy(dst, src, bytes), in pieces on `threads` (nullptr: the calling thread) where it is large.
void copy_on_threads(Backend* threads, void* dst, const void* src, size_t bytes);

// `threads` for a copy of `bytes` in all: nullptr (the calling thread) below kThreadedCopyBytes.
inline Backend* threads_for_copy(Backend* threads, size_t bytes) { return bytes >= kThreadedCopyBytes ? threads : nullptr; }

// n copies of `bytes` each, from src(i) to dst(i) (pointers), on `threads` where they are large together.
template <class Dst, class Src>
void copy_pieces_on_threads(Backend* threads, int64_t n, size_t bytes, Dst dst, Src src) {
  for_rows_on(threads_for_copy(threads, size_t(n) * bytes), n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(dst(i), src(i), bytes);
  });
}

}  // namespace deepinfer
