// std::vector storage aligned to a cache line. The SIMD kernels read packed activations and decoded
// weight tiles with 32-byte (AVX2) or 64-byte (AVX-512) loads; malloc's 16-byte alignment would make
// every other such load straddle two cache lines, which costs a second load on each.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace deepinfer {

template <class T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kAlign)); }
  template <class U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const { return true; }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace deepinfer
