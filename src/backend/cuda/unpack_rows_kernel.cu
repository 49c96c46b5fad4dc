// Packed cache rows decoded on the device (kernels.h: launch_unpack_rows): the same products as the CPU's
// unpack_kv_row (model/kv_format.cpp), code value times scale in one fp32 multiply, NaN codes included, so
// the attention reads the same floats whether the host or the device decoded a row.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 128;

// e4m3_value with the NaN that unpack_kv_row's table gives the two codes whose low bits are all set.
__device__ __forceinline__ float e4m3_or_nan(uint32_t code) {
  return (code & 0x7fu) == 0x7fu ? __uint_as_float(0x7fc00000u) : e4m3_value(code);
}

// One block per row, one value per thread and step.
__global__ void __launch_bounds__(kThreads) unpack_rows_kernel(const UnpackRowsLaunch p) {
  const int64_t at = p.row_slots ? p.row_slots[blockIdx.x] : int64_t(blockIdx.x);
  const uint8_t* row = p.rows + at * p.row_bytes;
  float* out = p.out + int64_t(blockIdx.x) * p.n_values;
  const int64_t n = p.n_values - p.n_rope;  // the coded values
  for (int64_t i = threadIdx.x; i < p.n_values; i += kThreads) {
    if (p.kind == PackedRowKind::kE4m3) {
      if (i < n) {
        out[i] = e4m3_or_nan(row[i]) * e8m0_value(row[n + 2 * p.n_rope + i / p.block]);
      } else {  // the bf16 rope values, little-endian
        const int64_t k = i - n;
        out[i] = __uint_as_float((uint32_t(row[n + 2 * k]) | uint32_t(row[n + 2 * k + 1]) << 8) << 16);
      }
    } else if (i < n) {
      const uint8_t scale = row[(n + 1) / 2 + i / p.block];
      const float s = p.kind == PackedRowKind::kE2m1E4m3Scales ? e4m3_or_nan(scale) : e8m0_value(scale);
      out[i] = e2m1_value((row[i / 2] >> (4 * (i & 1))) & 0xfu) * s;
    }
  }
}

// One block per row: 4-byte words (every packed row format is a multiple of 4 bytes long).
__global__ void __launch_bounds__(kThreads) scatter_rows_kernel(const uint8_t* src, int64_t row_bytes, const int64_t* slots,
                                                                uint8_t* arena) {
  const auto* from = reinterpret_cast<const uint32_t*>(src + int64_t(blockIdx.x) * row_bytes);
  auto* to = reinterpret_cast<uint32_t*>(arena + slots[blockIdx.x] * row_bytes);
  for (int64_t i = threadIdx.x; i < row_bytes / 4; i += kThreads) to[i] = from[i];
}

}  // namespace

void launch_scatter_rows(const uint8_t* src, int64_t n_rows, int64_t row_bytes, const int64_t* slots, uint8_t* arena,
                         cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(row_bytes % 4 == 0 && n_rows <= 0x7fffffff);
  launch_kernel(scatter_rows_kernel, unsigned(n_rows), kThreads, 0, stream, src, row_bytes, slots, arena);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_unpack_rows(const UnpackRowsLaunch& p, cudaStream_t stream) {
  if (p.n_rows == 0) return;
  DI_CHECK(p.n_values > 0 && p.block > 0 && p.n_rows <= 0x7fffffff);
  DI_CHECK(p.kind == PackedRowKind::kE4m3 || p.n_rope == 0);  // e2m1 rows code every value
  launch_kernel(unpack_rows_kernel, unsigned(p.n_rows), kThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
