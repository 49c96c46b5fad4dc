// An mHC side's halves on the device (kernels.h, HcPreLaunch / HcPostLaunch) and V4.1's tap and Engram update of the
// stream, each the host's exact code (model/ops.cpp: hc_split_sinkhorn, hc_collapse, rmsnorm, hc_expand_columns,
// engram_gate) operation by operation with its rounding points (IEEE double, or float where the host computes in
// float), so that the outputs are the host steps' bits.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_exact_math.cuh"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kPreThreads = 256;
constexpr int kPostThreads = 256;
constexpr int kEngramThreads = 128;  // a warp per residual copy

__device__ __forceinline__ double sigmoid(double z) { return __ddiv_rn(1.0, __dadd_rn(1.0, exp_fixed(-z))); }

// mixes[m] * scale + base[m], the product exact in double (two floats).
__device__ __forceinline__ double scaled_mix(const float* mixes, const float* base, int m, float scale) {
  return __dadd_rn(__dmul_rn(double(mixes[m]), double(scale)), double(base[m]));
}

// B2's pre_k, and the head's H2 (model/ops.h's hc_head_pre), the same expression.
__device__ __forceinline__ float pre_coefficient(const HcPreLaunch& p, const float* mixes, int k) {
  return float(__dadd_rn(sigmoid(scaled_mix(mixes, p.base, k, p.scale[0])), p.hc_eps));
}

// B2-B6 of one token by its block's first warp, into c[24] (shared, HcCoefficients' layout): lane l < 16 owns
// comb[l / 4][l % 4], lanes 16-19 pre and 20-23 post. A Sinkhorn step has each lane sum its row or column in the
// host's order from shared memory, then all write their new values together, as the host's loops (whose sums
// are taken before the row or column changes) give them.
__device__ void hc_coefficients(const HcPreLaunch& p, const float* mixes, float* c) {
  const int lane = threadIdx.x & 31;
  const double hc_eps = p.hc_eps;
  if (lane >= 16 && lane < 20) {  // B2
    c[lane - 16] = pre_coefficient(p, mixes, lane - 16);
  } else if (lane >= 20 && lane < 24) {  // B3
    const int k = lane - 20;
    c[4 + k] = float(__dmul_rn(2.0, sigmoid(scaled_mix(mixes, p.base, 4 + k, p.scale[1]))));
  } else if (lane < 16) {  // B4: the row's softmax, each of its lanes computing the row's max and total itself
    const int j = lane >> 2, k = lane & 3;
    double z[4], zmax = -INFINITY, total = 0.0, own = 0.0;  // own: z[k], picked without indexing z by a lane value
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      z[kk] = scaled_mix(mixes, p.base, 8 + 4 * j + kk, p.scale[2]);
      zmax = zmax < z[kk] ? z[kk] : zmax;  // std::max(zmax, z)
      if (kk == k) own = z[kk];
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) total = __dadd_rn(total, exp_fixed(__dadd_rn(z[kk], -zmax)));
    c[8 + lane] = float(__dadd_rn(__ddiv_rn(exp_fixed(__dadd_rn(own, -zmax)), total), hc_eps));
  }
  __syncwarp();
  // One normalisation of comb: by columns (sum over j of comb[j][k]) or by rows (sum over k of comb[j][k]).
  auto normalize = [&](bool columns) {
    float next = 0.0f;
    if (lane < 16) {
      const int j = lane >> 2, k = lane & 3;
      double sum = 0.0;
      for (int i = 0; i < 4; ++i) sum = __dadd_rn(sum, double(c[8 + (columns ? 4 * i + k : 4 * j + i)]));
      next = float(__ddiv_rn(double(c[8 + lane]), __dadd_rn(sum, hc_eps)));
    }
    __syncwarp();
    if (lane < 16) c[8 + lane] = next;
    __syncwarp();
  };
  normalize(true);  // B5
  for (int it = 1; it < p.sinkhorn_iters; ++it) {  // B6
    normalize(false);
    normalize(true);
  }
}

// One block per token: the coefficients (warp 0; the head's pre alone, or none with collapse_pre), u = bf16(sum_k
// pre_k h_k) into shared memory (all threads), u's sum of squares in sum_squares_32_lanes's order (warp 0), then
// u's norm out (all threads).
__global__ void __launch_bounds__(kPreThreads) hc_pre_kernel(const HcPreLaunch p) {
  DI_DYNAMIC_SHARED(float, u_row);  // [dim]
  __shared__ float c[kHcCoefficientFloats];
  __shared__ double r_shared;
  const int64_t t = blockIdx.x, D = p.dim;
  if (threadIdx.x < 32 && p.mixes) {
    if (p.head_pre) {  // the head's H2: lane k < 4's pre_k
      if (threadIdx.x < 4) c[threadIdx.x] = pre_coefficient(p, p.mixes + t * 4, int(threadIdx.x));
    } else {
      hc_coefficients(p, p.mixes + t * kHcCoefficientFloats, c);
    }
  }
  __syncthreads();
  if (p.coeffs && threadIdx.x < kHcCoefficientFloats) p.coeffs[t * kHcCoefficientFloats + threadIdx.x] = c[threadIdx.x];
  const float* pre = p.collapse_pre ? p.collapse_pre + t * 4 : c;
  const float* h = p.h + t * 4 * D;
  for (int64_t i = threadIdx.x; i < D; i += kPreThreads) {  // B7, from +0 as the host's sum
    double acc = 0.0;
    for (int k = 0; k < 4; ++k) acc = __dadd_rn(acc, __dmul_rn(double(pre[k]), double(h[k * D + i])));
    u_row[i] = round_bf16_exact(acc);
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // B8's r = sqrt(mean(u^2) + eps)
    const double sq = warp_sum_squares_32_lanes(u_row, D);
    if (threadIdx.x == 0) r_shared = __dsqrt_rn(__dadd_rn(__ddiv_rn(sq, double(D)), p.eps));
  }
  __syncthreads();
  const double r = r_shared;
  float* u = p.u + t * p.u_stride;
  for (int64_t i = threadIdx.x; i < p.u_stride; i += kPreThreads) {
    if (i < D) {
      const double w = p.norm ? double(p.norm[i]) : 1.0;
      u[i] = round_bf16_exact(__ddiv_rn(__dmul_rn(w, double(u_row[i])), r));
    } else {
      u[i] = 0.0f;
    }
  }
}

// One thread per (token, column i): the four copies' outputs at column i.
__global__ void __launch_bounds__(kPostThreads) hc_post_kernel(const HcPostLaunch p) {
  const int64_t t = blockIdx.y, i = int64_t(blockIdx.x) * kPostThreads + threadIdx.x, D = p.dim;
  if (i >= D) return;
  const float* c = p.coeffs + t * kHcCoefficientFloats;
  const float* h = p.h + t * 4 * D;
  const double x = p.x[t * p.x_stride + i];
  for (int k = 0; k < 4; ++k) {
    double acc = __dmul_rn(double(c[4 + k]), x);
    for (int j = 0; j < 4; ++j) acc = __dadd_rn(acc, __dmul_rn(double(c[8 + 4 * j + k]), double(h[j * D + i])));
    p.h_out[t * 4 * D + k * D + i] = round_bf16_exact(acc);
  }
}

// One thread per (token, column i): the mean of the four copies at column i (dsv41.cpp's step 5).
__global__ void __launch_bounds__(kPostThreads) stream_tap_kernel(const StreamTapLaunch p) {
  const int64_t t = blockIdx.y, i = int64_t(blockIdx.x) * kPostThreads + threadIdx.x, D = p.dim;
  if (i >= D) return;
  const float* h = p.h + t * 4 * D;
  double sum = 0.0;
  for (int k = 0; k < 4; ++k) sum = __dadd_rn(sum, double(h[k * D + i]));
  p.out[t * p.out_stride + i] = round_bf16_exact(__ddiv_rn(sum, 4.0));
}

// One block per token, warp k on copy k (model/ops.h's engram_gate): lane l sums the columns l, l + 32, ... in
// turn, the XOR butterfly adds the lanes as the host's tree does, and every lane then has the gate for its
// columns' update (each lane writes only the columns it read).
__global__ void __launch_bounds__(kEngramThreads) engram_gate_kernel(const EngramGateLaunch p) {
  const int64_t t = blockIdx.x, D = p.dim;
  const int k = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* h = p.h + (t * 4 + k) * D;
  const float* key = p.kv + t * 5 * D + k * D;
  const float* val = p.kv + t * 5 * D + 4 * D;
  const float* q = p.q_weight + k * D;
  const float* kw = p.k_weight + k * D;
  double dot = 0.0, hh = 0.0, kk = 0.0;
  for (int64_t d = lane; d < D; d += 32) {
    const double hd = h[d], key_d = key[d];
    const double qk = __dmul_rn(double(q[d]), double(kw[d]));
    dot = __dadd_rn(dot, __dmul_rn(__dmul_rn(hd, qk), key_d));
    hh = __dadd_rn(hh, __dmul_rn(hd, hd));
    kk = __dadd_rn(kk, __dmul_rn(key_d, key_d));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    dot = __dadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, off));
    hh = __dadd_rn(hh, __shfl_xor_sync(0xffffffffu, hh, off));
    kk = __dadd_rn(kk, __shfl_xor_sync(0xffffffffu, kk, off));
  }
  const double n = double(D);
  const double rh = __dsqrt_rn(__dadd_rn(__ddiv_rn(hh, n), p.eps)), rk = __dsqrt_rn(__dadd_rn(__ddiv_rn(kk, n), p.eps));
  const double tc = __ddiv_rn(dot, __dmul_rn(__dmul_rn(rh, rk), __dsqrt_rn(n)));
  const double at_least = fabs(tc) < 1e-6 ? 1e-6 : fabs(tc);  // std::max(|tc|, 1e-6), a NaN kept
  const double z = __dmul_rn(tc > 0 ? 1.0 : tc < 0 ? -1.0 : 0.0, __dsqrt_rn(at_least));
  const double gate = double(float(sigmoid(z)));
  for (int64_t d = lane; d < D; d += 32) h[d] = round_bf16_exact(__dadd_rn(double(h[d]), __dmul_rn(gate, double(val[d]))));
}

}  // namespace

namespace {
// A kernel of one thread per (token, column): blocks of kPostThreads columns along x, the tokens along y.
template <class Launch>
void launch_per_column(void (*kernel)(Launch), const Launch& p, const char* name, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.n_tokens <= 65535, std::string(name) + ": too many tokens for one launch");
  const int64_t column_blocks = (p.dim + kPostThreads - 1) / kPostThreads;
  launch_kernel(kernel, dim3(unsigned(column_blocks), unsigned(p.n_tokens)), kPostThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_stream_tap(const StreamTapLaunch& p, cudaStream_t stream) {
  launch_per_column(stream_tap_kernel, p, "stream_tap", stream);
}

void launch_engram_gate(const EngramGateLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.n_tokens < (int64_t(1) << 31), "engram_gate: too many tokens for one launch");
  launch_kernel(engram_gate_kernel, dim3(unsigned(p.n_tokens)), kEngramThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_hc_pre(const HcPreLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.dim > 0 && p.dim <= kHcPreMaxDim && p.u_stride >= p.dim, "hc_pre: the row does not fit the kernel");
  DI_CHECK_MSG(p.mixes || (p.collapse_pre && !p.coeffs), "hc_pre: no mixes, so a pre to collapse with and no coefficients");
  DI_CHECK_MSG(!p.head_pre || (p.mixes && !p.coeffs), "hc_pre: the head's pre takes its mixes and has no coefficients");
  DI_CHECK_MSG(p.n_tokens < (int64_t(1) << 31), "hc_pre: too many tokens for one launch");
  launch_kernel(hc_pre_kernel, dim3(unsigned(p.n_tokens)), kPreThreads, size_t(p.dim) * 4, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_hc_post(const HcPostLaunch& p, cudaStream_t stream) {
  // Not in place: a thread reads every copy of its column after writing the first.
  DI_CHECK_MSG(p.h_out != p.h, "hc_post: h_out must not be h");
  launch_per_column(hc_post_kernel, p, "hc_post", stream);
}

}  // namespace deepinfer::cuda
