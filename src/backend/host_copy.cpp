// copy_on_threads: see host_copy.h.
#include "backend/host_copy.h"

#include <algorithm>

namespace deepinfer {

void copy_on_threads(Backend* threads, void* dst, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t(256) << 10;
  for_rows_on(threads_for_copy(threads, bytes), int64_t((bytes + kPiece - 1) / kPiece), [&](int64_t i0, int64_t i1) {
    const size_t b0 = size_t(i0) * kPiece, b1 = std::min(bytes, size_t(i1) * kPiece);
    std::memcpy(static_cast<char*>(dst) + b0, static_cast<const char*>(src) + b0, b1 - b0);
  });
}

}  // namespace deepinfer
