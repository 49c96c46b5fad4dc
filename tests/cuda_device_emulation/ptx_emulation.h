// The inline PTX of src/backend/cuda (ptx_instructions.cuh) as CPU models of the PTX ISA semantics, for the
// device emulation: the same functions, signatures and namespace, so the kernels call these instead.
// mma.sync is a warp collective here (every lane of the warp must reach the same call, as .aligned demands);
// cp.async lands only at the thread's first wait that covers its group (block_runner.h), so a read before it shows.
#pragma once

#include <cstdint>

#include "device_emulation.h"

namespace deepinfer::device_emulation {
void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4], const char* file,
                       int line);
void mma_m16n8k32_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4], const char* file,
                       int line);
// An e4m3 (e4m3fn) code's value, exactly; NaN for S.1111.111.
double e4m3_value(uint32_t code);
}  // namespace deepinfer::device_emulation

namespace deepinfer::cuda {

inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  const float c_in[4] = {c[0], c[1], c[2], c[3]};
  DEVEMU_COMPILER_FENCE();
  device_emulation::mma_m16n8k16_bf16(c, a, b0, b1, c_in, file, line);
  DEVEMU_COMPILER_FENCE();
}

inline void mma_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  DEVEMU_COMPILER_FENCE();
  device_emulation::mma_m16n8k32_e4m3(d, a, b0, b1, zero, file, line);
  DEVEMU_COMPILER_FENCE();
}

inline void cp_async16(void* smem, const void* gmem) { device_emulation::cp_async_issue(smem, gmem, 16, 16); }
inline void cp_async16_zero(void* smem, const void* gmem) { device_emulation::cp_async_issue(smem, gmem, 16, 0); }
inline void cp_async_wait_all() {
  DEVEMU_COMPILER_FENCE();
  device_emulation::cp_async_wait_all();
  DEVEMU_COMPILER_FENCE();
}
inline void cp_async_commit() { device_emulation::cp_async_commit(); }
template <int N>
inline void cp_async_wait() {
  DEVEMU_COMPILER_FENCE();
  device_emulation::cp_async_wait_group(N);
  DEVEMU_COMPILER_FENCE();
}

}  // namespace deepinfer::cuda
