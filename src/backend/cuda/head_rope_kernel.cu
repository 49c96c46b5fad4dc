// Per-head work on the device, with the host's bits, one warp a head: HeadRope's (backend.h: a decode step's query
// and attention output, kept there), each head's norm (head_rms_normalize, A4-A8) and RoPE (rope_rotate_heads, A9 /
// AT4); and the indexer's query heads' (IndexQueryWork: RoPE, V4's Hadamard transform, the FP4 QDQ).
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

// The rotation of one pair (rope_rotate_heads): each product of two floats exact in double, each sum rounded once,
// then to bf16.
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, const float* cs, int64_t pair, bool inverse) {
  const double c = double(cs[2 * pair]), s = inverse ? -double(cs[2 * pair + 1]) : double(cs[2 * pair + 1]);
  const double a = double(x0), b = double(x1);
  x0 = round_bf16_exact(__dadd_rn(__dmul_rn(a, c), -__dmul_rn(b, s)));
  x1 = round_bf16_exact(__dadd_rn(__dmul_rn(a, s), __dmul_rn(b, c)));
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
  const HeadRows& r = p.rows;
  if (h >= r.n_heads) return;  // a whole warp: no lane of it takes part in a collective below
  const int lane = int(threadIdx.x & 31);
  const int64_t HD = r.head_dim;
  const float* x = r.x + t * r.x_stride + h * HD;
  float* out = r.out + t * r.out_stride + h * HD;
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
  float* rot = out + HD - r.rope_dim;
  const float* cs = r.cos_sin + t * r.rope_dim;
  for (int64_t i = lane; i < r.rope_dim / 2; i += 32) rotate_pair(rot[2 * i], rot[2 * i + 1], cs, i, p.inverse);
}

// The indexer's query heads: lane l of a head's warp holds values 4l .. 4l + 3 of its kIndexHeadDim, so the RoPE
// pairs and the Hadamard transform's first two stages stay in the lane, the other five are XOR shuffles, and a
// 32-value FP4 block is 8 lanes.
constexpr int kIndexHeadDim = 128;

__global__ void __launch_bounds__(32 * kHeadsPerBlock) index_query_kernel(const IndexQueryLaunch p) {
  const int64_t h = int64_t(blockIdx.x) * kHeadsPerBlock + (threadIdx.x >> 5), t = blockIdx.y;
  const HeadRows& r = p.rows;
  if (h >= r.n_heads) return;  // a whole warp
  const int lane = int(threadIdx.x & 31);
  const float* x = r.x + t * r.x_stride + h * kIndexHeadDim + 4 * lane;
  float v[4] = {x[0], x[1], x[2], x[3]};
  const int64_t first_rope = kIndexHeadDim - r.rope_dim;  // I2 / step 21: the last rope_dim values
  if (4 * lane >= first_rope) {
    const float* cs = r.cos_sin + t * r.rope_dim;
    const int64_t pair = (4 * lane - first_rope) / 2;
    rotate_pair(v[0], v[1], cs, pair, false);
    rotate_pair(v[2], v[3], cs, pair + 1, false);
  }
  if (!p.v41) {  // I3: hadamard_128's natural-order butterfly (v[j], v[j + half]) -> (a + b, a - b) in double
    double d[4] = {double(v[0]), double(v[1]), double(v[2]), double(v[3])};
    double a = d[0], b = d[1];
    d[0] = __dadd_rn(a, b), d[1] = __dadd_rn(a, -b);
    a = d[2], b = d[3];
    d[2] = __dadd_rn(a, b), d[3] = __dadd_rn(a, -b);
    for (int k = 0; k < 2; ++k) {
      a = d[k], b = d[k + 2];
      d[k] = __dadd_rn(a, b), d[k + 2] = __dadd_rn(a, -b);
    }
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {  // half = 4m: the partner value is lane l ^ m's same slot
      const bool upper = (lane & m) != 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const double other = __shfl_xor_sync(0xffffffffu, d[k], m);
        d[k] = upper ? __dadd_rn(other, -d[k]) : __dadd_rn(d[k], other);
      }
    }
    for (int k = 0; k < 4; ++k) v[k] = round_bf16_exact(__dmul_rn(d[k], p.hadamard_scale));
  }
  // I4 (qdq_fp4) / step 22 (qdq_fp4_pow2_v41): each 32-value block's amax over its 8 lanes, its power-of-two scale,
  // each value onto the e2m1 grid.
  double amax = 0.0;
  for (int k = 0; k < 4; ++k) amax = fmax(amax, fabs(double(v[k])));
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) amax = fmax(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  amax = fmax(amax, 6.0 * 0x1p-126);  // block_amax's floor
  const double s = p.v41 ? pow2ceil(double(__fmul_rn(float(amax), 1.0f / 6.0f))) : pow2_scale_at_least(amax, 6.0);
  float* out = r.out + t * r.out_stride + h * kIndexHeadDim + 4 * lane;
  for (int k = 0; k < 4; ++k) out[k] = float(__dmul_rn(e2m1_round_exact(__ddiv_rn(double(v[k]), s)), s));
}

}  // namespace

void launch_index_query(const IndexQueryLaunch& p, cudaStream_t stream) {
  const HeadRows& r = p.rows;
  if (r.n_tokens == 0 || r.n_heads == 0) return;
  DI_CHECK_MSG(r.head_dim == kIndexHeadDim && r.n_tokens <= 65535 && r.rope_dim % 4 == 0 && r.rope_dim <= r.head_dim,
               "index query: a head_dim other than 128, more than 65535 tokens, or a rope_dim not a multiple of 4");
  const unsigned blocks = unsigned((r.n_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  launch_kernel(index_query_kernel, dim3(blocks, unsigned(r.n_tokens)), 32 * kHeadsPerBlock, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_head_rope(const HeadRopeLaunch& p, cudaStream_t stream) {
  const HeadRows& r = p.rows;
  if (r.n_tokens == 0 || r.n_heads == 0) return;
  DI_CHECK_MSG(r.n_tokens <= 65535 && r.rope_dim % 2 == 0 && r.rope_dim <= r.head_dim,
               "head rope: more than 65535 tokens, or an odd or oversized rope_dim");
  const unsigned blocks = unsigned((r.n_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  launch_kernel(head_rope_kernel, dim3(blocks, unsigned(r.n_tokens)), 32 * kHeadsPerBlock, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
