// mHC mixes on the GPU (spec B1/H1): the sum of squares and each mix's dot product are fp32 FMA sums in a
// fixed order (block_sum), divided in double by sqrt(mean + eps) and rounded to f32 once.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

// One block per (token, mix): a single token's 24 mixes then read fn on 24 multiprocessors instead of one.
// Each block sums the token's squares itself, in the same fixed order, so every block gets the same r.
__global__ void __launch_bounds__(kThreads) hc_mix_kernel(const HcMixLaunch p) {
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x, m = blockIdx.y;
  const float* x = p.x + t * p.width;
  const float* f = p.fn + m * p.width;
  float sq = 0.0f, dot = 0.0f;
  for (int64_t i = threadIdx.x; i < p.width; i += kThreads) {
    const float xi = x[i];
    sq = __fmaf_rn(xi, xi, sq);
    dot = __fmaf_rn(xi, f[i], dot);
  }
  sq = block_sum(sq, scratch);
  dot = block_sum(dot, scratch);
  if (threadIdx.x == 0) p.out[t * p.n_mix + m] = float(double(dot) / sqrt(double(sq) / double(p.width) + p.eps));
}

}  // namespace

void launch_hc_mix(const HcMixLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.n_mix <= 65535 && p.n_tokens < (int64_t(1) << 31), "hc_mix: too many mixes or tokens for one launch");
  launch_kernel(hc_mix_kernel, dim3(unsigned(p.n_tokens), unsigned(p.n_mix)), kThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
