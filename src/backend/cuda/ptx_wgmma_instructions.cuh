// The wgmma kernel's inline PTX (linear_fp8_wgmma_kernel.cu, sm_90a only), one __device__ function per
// instruction, for the reason ptx_instructions.cuh gives: the device emulation (DEEPINFER_DEVICE_EMULATION,
// tests/cuda_device_emulation) puts its CPU models of these instructions in their place. Apart from
// ptx_instructions.cuh because only sm_90a has them: elsewhere the functions do not exist, and the kernel file
// compiles its device code only where DI_WGMMA_DEVICE_CODE is 1 (sm_90a, or the emulation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ptx_instructions.cuh"

#if defined(DEEPINFER_DEVICE_EMULATION) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define DI_WGMMA_DEVICE_CODE 1
#else
#define DI_WGMMA_DEVICE_CODE 0
#endif

#ifdef DEEPINFER_DEVICE_EMULATION
#include "ptx_wgmma_emulation.h"
#elif defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace deepinfer::cuda {

// Orders this thread's earlier shared-memory writes (plain stores and completed cp.asyncs, the generic proxy)
// before later wgmma reads of them (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// The registers a wgmma writes are the compiler's to schedule only after the wait: this pins their reads there.
__device__ __forceinline__ void fence_registers(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define DI_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
// d = A . B for one m64n128k32 step, e4m3 x e4m3 -> f32, scale-d = 0: the step's own sum from a zero
// accumulator. Register i of lane l in warp w of the warpgroup: row 16 w + l / 4 + 8 ((i / 2) % 2), column
// (token) 8 (i / 4) + 2 (l % 4) + i % 2.
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred zero_d;\nsetp.ne.b32 zero_d, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, zero_d, 1, 1;\n}\n"
      : DI_D8(0), DI_D8(8), DI_D8(16), DI_D8(24), DI_D8(32), DI_D8(40), DI_D8(48), DI_D8(56)
      : "l"(a), "l"(b), "r"(0));
}
#undef DI_D8

}  // namespace deepinfer::cuda

#endif
