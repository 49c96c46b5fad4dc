// HeadRope's work on the device (backend.h: a decode step's query and attention output, kept there): each head's
// norm (head_rms_normalize, A4-A8) and RoPE (rope_rotate_heads, A9 / AT4), with the host's bits. One warp a head.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_exact_math.cuh"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kHeadsPerBlock = 4;

__device__ __forceinline__ int biased_exponent(double v) { return int((uint64_t(__double_as_longlong(v)) >> 52) & 0x7ff); }

__device__ __forceinline__ double bf16_square(float x) {
  const double v = double(x);
  return double(round_bf16_exact(__dmul_rn(v, v)));
}

// The host's sum of a head's bf16-rounded squares (head_rms_normalize and its AVX-512 twin): where the nonzero
// squares' exponents span at most 45 - bit_width(head_dim) bits, every partial sum is exact, so the lanes' sums
// added in any order are the in-order sum; otherwise (a wider span, inf, NaN) lane 0 adds them in order. Every
// lane gets the sum.
__device__ double head_sum_squares(const float* x, int64_t head_dim) {
  const int lane = int(threadIdx.x & 31);
  double s = 0.0;
  int e_hi = 0, e_lo = 0x7ff;
  for (int64_t i = lane; i < head_dim; i += 32) {
    const double sq = bf16_square(x[i]);
    const int e = biased_exponent(sq);
    e_hi = max(e_hi, e);
    if (!(sq == 0.0)) e_lo = min(e_lo, e);  // NaN's exponent too, as the host's unordered compare counts it
    s = __dadd_rn(s, sq);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    e_hi = max(e_hi, __shfl_xor_sync(0xffffffffu, e_hi, off));
    e_lo = min(e_lo, __shfl_xor_sync(0xffffffffu, e_lo, off));
  }
  int width = 0;  // std::bit_width(head_dim)
  for (uint64_t n = uint64_t(head_dim); n; n >>= 1) ++width;
  if (e_hi < 0x7ff && e_hi - e_lo <= 45 - width) return s;
  double in_order = 0.0;  // lane 0's; the other lanes' zeros leave it unchanged in the butterfly below
  if (lane == 0) {
    for (int64_t i = 0; i < head_dim; ++i) in_order = __dadd_rn(in_order, bf16_square(x[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) in_order = __dadd_rn(in_order, __shfl_xor_sync(0xffffffffu, in_order, off));
  return in_order;
}

// Block: kHeadsPerBlock warps, warp w on head blockIdx.x * kHeadsPerBlock + w of token blockIdx.y.
__global__ void __launch_bounds__(32 * kHeadsPerBlock) head_rope_kernel(const HeadRopeLaunch p) {
  const int64_t h = int64_t(blockIdx.x) * kHeadsPerBlock + (threadIdx.x >> 5), t = blockIdx.y;
  if (h >= p.n_heads) return;  // a whole warp: no lane of it takes part in a collective below
  const int lane = int(threadIdx.x & 31);
  const int64_t HD = p.head_dim;
  const float* x = p.x + t * p.x_stride + h * HD;
  float* out = p.out + t * p.out_stride + h * HD;
  if (p.normalize) {
    const double sum = head_sum_squares(x, HD);
    // head_rms_inverse: A5-A7
    const double ms = double(round_bf16_exact(__ddiv_rn(sum, double(HD))));
    const double ms_eps = double(round_bf16_exact(__dadd_rn(ms, p.eps)));
    const double r = double(round_bf16_exact(__ddiv_rn(1.0, __dsqrt_rn(ms_eps))));
    for (int64_t i = lane; i < HD; i += 32) out[i] = round_bf16_exact(__dmul_rn(double(x[i]), r));  // A8
  } else if (out != x) {
    for (int64_t i = lane; i < HD; i += 32) out[i] = x[i];
  }
  __syncwarp();  // every lane's values in out before the pairs, which cross lanes, are read
  // rope_rotate_heads: each product of two floats exact in double, each sum rounded once, then to bf16.
  float* rot = out + HD - p.rope_dim;
  const float* cs = p.cos_sin + t * p.rope_dim;
  for (int64_t i = lane; i < p.rope_dim / 2; i += 32) {
    const double c = double(cs[2 * i]), s = p.inverse ? -double(cs[2 * i + 1]) : double(cs[2 * i + 1]);
    const double x0 = double(rot[2 * i]), x1 = double(rot[2 * i + 1]);
    rot[2 * i] = round_bf16_exact(__dadd_rn(__dmul_rn(x0, c), -__dmul_rn(x1, s)));
    rot[2 * i + 1] = round_bf16_exact(__dadd_rn(__dmul_rn(x0, s), __dmul_rn(x1, c)));
  }
}

}  // namespace

void launch_head_rope(const HeadRopeLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0 || p.n_heads == 0) return;
  DI_CHECK_MSG(p.n_tokens <= 65535 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim,
               "head rope: more than 65535 tokens, or an odd or oversized rope_dim");
  const unsigned blocks = unsigned((p.n_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  launch_kernel(head_rope_kernel, dim3(blocks, unsigned(p.n_tokens)), 32 * kHeadsPerBlock, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
