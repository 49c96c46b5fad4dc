// The inline PTX of the kernels that the device emulation compiles (DEEPINFER_DEVICE_EMULATION,
// tests/cuda_device_emulation), one __device__ function per instruction, so that the emulation can put its CPU
// models of these instructions' PTX ISA semantics in their place and run the kernels' real bodies on the CPU.
// Asm elsewhere in those files would not compile there; a kernel file the emulation leaves out may keep its own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef DEEPINFER_DEVICE_EMULATION
#include "ptx_emulation.h"
#else

namespace deepinfer::cuda {

// c = A . B + c for one m16n8k16 tile: bf16 A (row-major fragments) and B (column-major), fp32 c, in place.
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = A . B for one m16n8k32 tile of e4m3 codes, from a zero accumulator (the step's own fp32 sum). Not
// volatile: a pure function of its operands, which the compiler may schedule among the staging loads.
__device__ __forceinline__ void mma_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// 16 bytes from global to shared memory, asynchronously: they have landed after this thread's cp_async_wait_all.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// 16 zero bytes (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async16_zero(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(0) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// cp.async groups: commit closes this thread's group of copies issued since the last commit; cp_async_wait<N>
// returns once every committed group but the newest N has landed (the copies not yet committed are not waited for).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace deepinfer::cuda

#endif
