// Each row's argmax on the device (kernels.h: launch_row_argmax), with model/ops.h argmax's answer: the first index
// holding the row's largest value, NaNs passed over, 0 where every value is NaN. A greedy step's draws then cross
// to the host as one id a row instead of the vocabulary's logits (V4: 129,280 floats, 517 KB a row).
#include <climits>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

// (v, i) takes (w, j)'s place when it is larger, or equal at a lower index. A NaN v compares false both ways, so
// it never takes a place; INT_MAX marks "nothing yet" (every index is lower).
__device__ __forceinline__ void keep_better(float& v, int& i, float w, int j) {
  if (w > v || (w == v && j < i)) {
    v = w;
    i = j;
  }
}

// One block per row. Each thread walks its columns in ascending order, so the first of its equal values is kept;
// the block's reduction then takes the largest value at its lowest index.
__global__ void __launch_bounds__(kThreads) row_argmax_kernel(const float* x, int64_t width, int64_t stride, int32_t* out) {
  const float* row = x + int64_t(blockIdx.x) * stride;
  float best = -__int_as_float(0x7f800000);  // -inf: a row of -inf values gives its first index, as on the host
  int at = INT_MAX;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) keep_better(best, at, row[i], int(i));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, best, off);
    const int j = __shfl_xor_sync(0xffffffffu, at, off);
    keep_better(best, at, w, j);
  }
  __shared__ float warp_best[kThreads / 32];
  __shared__ int warp_at[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_at[warp] = at;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) keep_better(best, at, warp_best[w], warp_at[w]);
    out[blockIdx.x] = at == INT_MAX ? 0 : at;
  }
}

}  // namespace

void launch_row_argmax(const float* x, int64_t n_rows, int64_t width, int64_t stride, int32_t* out, cudaStream_t stream) {
  if (n_rows == 0) return;
  DI_CHECK(width > 0 && width < INT_MAX && stride >= width && n_rows <= 0x7fffffff);
  launch_kernel(row_argmax_kernel, unsigned(n_rows), kThreads, 0, stream, x, width, stride, out);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
