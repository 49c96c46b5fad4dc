// Device helpers shared by the two FP8-operand linear kernels (linear_fp8_kernel.cu, mma.sync; and
// linear_fp8_wgmma_kernel.cu, wgmma): the e2m1 -> e4m3 code LUT, the per-step weight scale and the shared-memory
// opt-in, so that both read operands and scales the same way (their cp.async copies are ptx_instructions.cuh's).
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/ptx_instructions.cuh"

namespace deepinfer::cuda {
namespace {

// Four e2m1 codes (the low 16 bits of v, code i in bits 4i..4i+3) -> four e4m3 codes (byte i). The magnitude
// through a byte-permute LUT (e2m1 0, 0.5, 1, 1.5, 2, 3, 4, 6 = e4m3 0x00, 0x30, 0x38, 0x3c, 0x40, 0x44, 0x48,
// 0x4c), the sign bit (3 of each nibble) to bit 7 of its byte by a second permute over {0x00, 0x80}.
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3x4(uint32_t v) {
  const uint32_t magnitude = __byte_perm(0x3c383000u, 0x4c484440u, v & 0x7777u);
  const uint32_t sign = __byte_perm(0x00008000u, 0u, (v >> 3) & 0x1111u);
  return magnitude | sign;
}

// The weight scale of row n for step j (k = 32 j .. 32 j + 31). A step wholly in the padding may pass the
// last scale column: it reads that one (its codes are zero).
template <WeightKind K>
__device__ __forceinline__ float weight_scale(const LinearLaunch& p, int64_t n, int64_t j) {
  if constexpr (K == WeightKind::kFp8) {
    const int64_t kb = min(32 * j / p.block, p.scale_pitch - 1);
    return e8m0_value(__ldg(p.scale + (n / p.block) * p.scale_pitch + kb));
  } else {
    const int64_t kb = min(j, p.scale_pitch - 1);
    return e8m0_value(__ldg(p.scale + n * p.scale_pitch + kb));
  }
}

// Dynamic shared memory past 48 KB needs the opt-in: set once per kernel and device, `done` being that
// kernel's own record (a bit per device; devices past 63 set it every launch).
template <class Kernel>
void allow_shared_bytes(Kernel kernel, int bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit && (done.load(std::memory_order_relaxed) & bit)) return;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_relaxed);
}

}  // namespace
}  // namespace deepinfer::cuda
