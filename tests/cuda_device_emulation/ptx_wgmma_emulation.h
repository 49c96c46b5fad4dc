// The wgmma kernel's inline PTX (src/backend/cuda/ptx_wgmma_instructions.cuh) as CPU models of the PTX ISA
// semantics, for the device emulation: the same functions, signatures and namespace. Every .sync.aligned
// instruction is a warpgroup collective (block_runner.h: all 128 threads at the same call, with the same
// descriptors or count). wgmma.mma_async is asynchronous as on the GPU: it reads shared memory when issued,
// its D registers read NaN until the wait_group that covers its commit group, which reads shared memory again
// and fails if anything changed in between (a write racing the async proxy's read).
// No-ops here, each for its reason: wgmma.fence (the registers are plain memory and the fibers never
// interleave an operation), fence.proxy.async (one memory, no proxies), the register pin after a wait.
#pragma once

#include <cstdint>

#include "device_emulation.h"
#include "ptx_emulation.h"

namespace deepinfer::device_emulation {
// d = A . B, m64n128k32 e4m3 x e4m3 -> f32, scale-d = 0, A and B K-major through no-swizzle descriptors.
void wgmma_m64n128k32_e4m3(float* d, uint64_t a, uint64_t b, const char* file, int line);
}  // namespace deepinfer::device_emulation

namespace deepinfer::cuda {

inline void fence_proxy_async() { DEVEMU_COMPILER_FENCE(); }

inline void wgmma_fence(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  device_emulation::warpgroup_collective("wgmma.fence", 0, file, line);
  DEVEMU_COMPILER_FENCE();
}
inline void wgmma_commit(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  device_emulation::warpgroup_collective("wgmma.commit_group", 0, file, line);
  device_emulation::async_commit();
}
template <int N>
inline void wgmma_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  device_emulation::warpgroup_collective("wgmma.wait_group", N, file, line);
  device_emulation::async_wait_group(N);
  DEVEMU_COMPILER_FENCE();
}
inline void fence_registers(float (&)[64]) { DEVEMU_COMPILER_FENCE(); }

inline void wgmma_m64n128k32(float (&d)[64], uint64_t a, uint64_t b, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  DEVEMU_COMPILER_FENCE();
  device_emulation::wgmma_m64n128k32_e4m3(d, a, b, file, line);
  DEVEMU_COMPILER_FENCE();
}

}  // namespace deepinfer::cuda
