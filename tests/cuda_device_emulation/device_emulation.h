// The CUDA C++ device dialect on the host, for `cuda_device_emulated_tests` (README.md here): included before
// each of src/backend/cuda's .cu files, which g++ then compiles as they are, so that the kernels' real bodies
// run on the CPU, one block at a time, its threads as fibers (block_runner.h). Only what those files use is
// here; anything else fails to compile rather than being guessed. Not a device: never part of deepinfer.
//
// Invariants: every barrier, warp vote and shuffle is a fiber switch point, and a memory barrier for the
// compiler (shared memory is plain static storage that other fibers write behind the compiler's back);
// every intrinsic rounds as the PTX ISA / CUDA math API documents (round to nearest even, no flush to zero).
#pragma once

#include <math.h>  // expf, fmaxf, ... in the global namespace, as device code calls them

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "block_runner.h"

// ---- Declaration specifiers ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// Alignment of shared arrays: dropped, which only dynamic shared memory uses (DI_DYNAMIC_SHARED), and the block
// runner allocates that 1024-byte aligned, wgmma's largest demand.
#define __align__(n)
// Static shared memory: static storage in one section, which the block runner fills with 0xff bytes (NaN
// floats) before every block, so that a read of what the block did not write shows. Blocks run one at a time.
#define __shared__ static __attribute__((section("devemu_shared")))
// Constant memory: read-only static storage.
#define __constant__ static const

// ---- Vector types (their CUDA alignment) and dim3 ----
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// ---- Built-in variables: the running fiber's and block's ----
#define threadIdx (::deepinfer::device_emulation::current_thread_index())
#define blockIdx (::deepinfer::device_emulation::current_block().block_idx)
#define blockDim (::deepinfer::device_emulation::current_block().block_dim)
#define gridDim (::deepinfer::device_emulation::current_block().grid_dim)

// ---- Synchronisation: switch points (block_runner.h checks that every thread meant takes part) ----
#define DEVEMU_COMPILER_FENCE() asm volatile("" ::: "memory")
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  ::deepinfer::device_emulation::block_barrier(file, line);
  DEVEMU_COMPILER_FENCE();
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  ::deepinfer::device_emulation::LaneIo io{};
  ::deepinfer::device_emulation::warp_collective("__syncwarp", mask, io, nullptr, file, line);
  DEVEMU_COMPILER_FENCE();
}
inline bool __any_sync(unsigned mask, bool predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  ::deepinfer::device_emulation::LaneIo io{};
  io.in[0] = predicate;
  ::deepinfer::device_emulation::warp_collective("__any_sync", mask, io, ::deepinfer::device_emulation::combine_any, file,
                                                 line);
  DEVEMU_COMPILER_FENCE();
  return io.out[0] != 0;
}
// The lanes of the mask whose value equals this lane's.
inline unsigned __match_any_sync(unsigned mask, unsigned value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  ::deepinfer::device_emulation::LaneIo io{};
  io.in[0] = value;
  ::deepinfer::device_emulation::warp_collective("__match_any_sync", mask, io, ::deepinfer::device_emulation::combine_match_any,
                                                 file, line);
  DEVEMU_COMPILER_FENCE();
  return unsigned(io.out[0]);
}
// width 32 only (all the kernels use); the source lane must be in the mask.
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  ::deepinfer::device_emulation::require(width == 32, "__shfl_xor_sync: only width 32 is emulated");
  DEVEMU_COMPILER_FENCE();
  ::deepinfer::device_emulation::LaneIo io{};
  std::memcpy(&io.in[0], &v, sizeof(T));
  io.in[1] = uint64_t(uint32_t(lane_mask));
  ::deepinfer::device_emulation::warp_collective("__shfl_xor_sync", mask, io, ::deepinfer::device_emulation::combine_shfl_xor,
                                                 file, line);
  DEVEMU_COMPILER_FENCE();
  T out;
  std::memcpy(&out, &io.out[0], sizeof(T));
  return out;
}

// The shared window address of a generic pointer: here its offset in the block's dynamic shared memory
// (block_runner.h), which is all the kernels take addresses of.
inline uint64_t __cvta_generic_to_shared(const void* p) { return ::deepinfer::device_emulation::shared_address(p, 1); }

// ---- Loads and arithmetic intrinsics ----
template <class T>
inline T __ldg(const T* p) { return *p; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
// Atomics on shared memory (a block's threads are fibers of one OS thread; relaxed atomics all the same).
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned int atomicOr(unsigned int* p, unsigned int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
inline float __fdiv_rn(float a, float b) { return a / b; }  // IEEE division: round to nearest even
inline int __popc(unsigned int v) { return std::popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned int __float_as_uint(float v) { return std::bit_cast<unsigned int>(v); }
inline float __uint_as_float(unsigned int v) { return std::bit_cast<float>(v); }
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
// Double operations rounded once to nearest even (the emulated kernels are built with -ffp-contract=off).
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline long long __double_as_longlong(double v) { return std::bit_cast<long long>(v); }
inline double __longlong_as_double(long long v) { return std::bit_cast<double>(v); }
// Byte n of the result is byte s[4n+2 : 4n] of {y, x} (x bytes 0-3, y bytes 4-7). The selector's fourth bit
// (prmt's sign-replicate mode) is not emulated: the kernels never set it, and its use fails here.
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  ::deepinfer::device_emulation::require((s & 0x8888u) == 0, "__byte_perm: selector bit 3 (sign replicate) used");
  const uint64_t bytes = uint64_t(x) | uint64_t(y) << 32;
  unsigned int r = 0;
  for (int n = 0; n < 4; ++n) r |= unsigned((bytes >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
}
// CUDA's integer and mixed min / max overloads, as the kernels call them unqualified.
template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) {
  using T = std::common_type_t<A, B>;
  return T(b) < T(a) ? T(b) : T(a);
}
template <class A, class B>
inline std::common_type_t<A, B> max(A a, B b) {
  using T = std::common_type_t<A, B>;
  return T(a) < T(b) ? T(b) : T(a);
}
