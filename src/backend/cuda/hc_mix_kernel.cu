// mHC mixes on the GPU (spec B1/H1): one block per token; the sum of squares and each mix's dot product
// are fp32 FMA sums in a fixed order (block_sum / warp_sum), divided in double by sqrt(mean + eps) and
// rounded to f32 once.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) hc_mix_kernel(const HcMixLaunch p) {
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  const float* x = p.x + t * p.width;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < p.width; i += kThreads) sq = __fmaf_rn(x[i], x[i], sq);
  sq = block_sum(sq, scratch);
  const double r = sqrt(double(sq) / double(p.width) + p.eps);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t m = warp; m < p.n_mix; m += kThreads / 32) {
    const float* f = p.fn + m * p.width;
    float dot = 0.0f;
    for (int64_t i = lane; i < p.width; i += 32) dot = __fmaf_rn(x[i], f[i], dot);
    dot = warp_sum(dot);
    if (lane == 0) p.out[t * p.n_mix + m] = float(double(dot) / r);
  }
}

}  // namespace

void launch_hc_mix(const HcMixLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  hc_mix_kernel<<<unsigned(p.n_tokens), kThreads, 0, stream>>>(p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
