// Packed cache rows decoded on the device (kernels.h: launch_unpack_rows): the same products as the CPU's
// unpack_kv_row (model/kv_format.cpp; packed_rows.cuh), so the attention reads the same floats whether the
// host or the device decoded a row.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/packed_rows.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 128;

// One block per row, one value per thread and step.
__global__ void __launch_bounds__(kThreads) unpack_rows_kernel(const UnpackRowsLaunch p) {
  const int64_t at = p.row_slots ? p.row_slots[blockIdx.x] : int64_t(blockIdx.x);
  const uint8_t* row = p.rows + at * p.row_bytes;
  float* out = p.out + int64_t(blockIdx.x) * p.n_values;
  const PackedRowFormat f{p.kind, int32_t(p.n_values - p.n_rope), int32_t(p.n_rope), int32_t(p.block)};
  for (int64_t i = threadIdx.x; i < p.n_values; i += kThreads) out[i] = packed_row_value(f, row, i);
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
