// The MoE of a block on the device (kernels.h, "The MoE of a block on the device"): the activation QDQ, the
// SwiGLU, the router with the routed rows' plan, the rows' gather and the M8 sum; and V4.1's Engram rows, decoded
// and QDQ'd in one kernel. Each reproduces the host's exact code (model/ops.cpp, model/moe_routing.cpp,
// model/moe.cpp, model/engram.cpp) operation by operation in IEEE double or float, with the host's rounding points;
// the double operations go through the _rn intrinsics so that nvcc contracts none of them into a fused multiply-add
// the host does not do.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_exact_math.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kRowThreads = 128;    // a row's block in the QDQ and SwiGLU kernels
constexpr int kRouteThreads = 256;  // the router's one block
constexpr int kMaxExperts = 1024;   // a lane keeps its experts' chosen flags in one 32-bit mask

__device__ __forceinline__ float warp_max_abs(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The activation QDQ of one row in place (qdq_fp8 / qdq_fp8_v41), its blocks shared out over the block's
// warps; fmaxf skips NaNs as the host's block_amax does. The caller's writes to the row must be behind a
// __syncthreads.
__device__ __forceinline__ void qdq_row(float* row, int64_t width, int64_t block, ActQdqRule rule) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int64_t b0 = int64_t(warp) * block; b0 < width; b0 += int64_t(n_warps) * block) {
    const int64_t b1 = min(width, b0 + block);
    float amax = 0.0f;
    for (int64_t i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(row[i]));
    amax = fmaxf(warp_max_abs(amax), 1e-4f);  // the floor: f32(1e-4), exact in double too
    const double s = rule == ActQdqRule::kV4 ? pow2_scale_at_least(double(amax), 448.0)
                                             : pow2ceil(double(amax * (1.0f / 448.0f)));  // fp32 multiply
    for (int64_t i = b0 + lane; i < b1; i += 32) row[i] = float(__dmul_rn(e4m3_round_exact(__ddiv_rn(double(row[i]), s)), s));
  }
}

// One block per row: the row copied, the padding zeroed, then the QDQ in place.
__global__ void __launch_bounds__(kRowThreads) act_qdq_kernel(const ActQdqLaunch p) {
  const int64_t r = blockIdx.x;
  const float* x = p.x + r * p.x_stride;
  float* out = p.out + r * p.out_stride;
  for (int64_t i = threadIdx.x; i < p.out_pad; i += kRowThreads) out[i] = i < p.width ? x[i] : 0.0f;
  __syncthreads();
  qdq_row(out, p.width, p.block, p.rule);
}

// V4.1's Engram rows: one block per token, its gathered rows decoded from their stored bytes into x (engram.cpp's
// engram_table_row, the same float product; a NaN code or scale gives the host's NaN bits, where the GPU would make
// its own), then the activation QDQ in place: one pass over x, as act_qdq_kernel after a decode.
__global__ void __launch_bounds__(kRowThreads) engram_rows_kernel(const EngramRowsLaunch p) {
  const int64_t t = blockIdx.x;
  const uint8_t* codes = p.codes + t * p.width;
  const uint8_t* scales = p.scales + t * (p.width / 32);
  float* x = p.x + t * p.x_stride;
  for (int64_t k = threadIdx.x; k < p.width; k += kRowThreads) {
    const uint32_t code = codes[k], scale = scales[k / 32];
    x[k] = (code & 0x7fu) == 0x7fu || scale == 0xffu ? __uint_as_float(0x7fc00000u) : e4m3_value(code) * e8m0_value(scale);
  }
  __syncthreads();
  qdq_row(x, p.width, p.qdq_block, ActQdqRule::kV41);
}

// The same with the row's rmsnorm before the QDQ (p.rmsnorm): its sum of squares in sum_squares_32_lanes's order
// by the first warp, the normed row also to p.normed. (With __launch_bounds__(kRowThreads) alone ptxas held it to 40
// registers and spilled 12-28 B on sm_90a / sm_89; the minimum of one block lets it take the 47 act_qdq_kernel takes.)
__global__ void __launch_bounds__(kRowThreads, 1) rmsnorm_qdq_kernel(const ActQdqLaunch p) {
  __shared__ double r_shared;
  const int64_t r = blockIdx.x;
  const float* x = p.x + r * p.x_stride;
  float* out = p.out + r * p.out_stride;
  for (int64_t i = threadIdx.x; i < p.out_pad; i += kRowThreads) out[i] = i < p.width ? x[i] : 0.0f;
  __syncthreads();
  if (threadIdx.x < 32) {
    const double sq = warp_sum_squares_32_lanes(out, p.width);
    if (threadIdx.x == 0) r_shared = __dsqrt_rn(__dadd_rn(__ddiv_rn(sq, double(p.width)), p.eps));
  }
  __syncthreads();
  const double rms = r_shared;
  float* normed = p.normed + r * p.normed_stride;
  for (int64_t i = threadIdx.x; i < p.width; i += kRowThreads) {
    const double w = p.norm ? double(p.norm[i]) : 1.0;
    out[i] = normed[i] = round_bf16_exact(__ddiv_rn(__dmul_rn(w, double(out[i])), rms));
  }
  __syncthreads();
  qdq_row(out, p.width, p.block, p.rule);
}

// One block per row: swiglu (ops.cpp) into the output row, then its QDQ.
__global__ void __launch_bounds__(kRowThreads) swiglu_qdq_kernel(const SwigluQdqLaunch p) {
  const int64_t r = blockIdx.x;
  const float* a = p.a + r * p.in_stride;
  const float* b = p.b + r * p.in_stride;
  float* out = p.out + r * p.out_stride;
  const double weight = p.row_weight ? double(p.row_weight[r]) : 1.0;
  const double limit = p.limit;
  for (int64_t i = threadIdx.x; i < p.out_pad; i += kRowThreads) {
    if (i >= p.width) {
      out[i] = 0.0f;
      continue;
    }
    double av = a[i];
    if (limit < av) av = limit;  // std::min(av, limit)
    double bv = b[i];
    bv = bv < -limit ? -limit : (limit < bv ? limit : bv);  // std::clamp(bv, -limit, limit)
    const double silu = __ddiv_rn(av, __dadd_rn(1.0, exp_fixed(-av)));
    out[i] = round_bf16_exact(__dmul_rn(__dmul_rn(silu, bv), weight));
  }
  __syncthreads();
  qdq_row(out, p.width, p.block, p.rule);
}

// The router's key of expert e (route_token): V4 the exact sum in double, V4.1 an fp32 add.
__device__ __forceinline__ double route_key(const MoeRouteLaunch& p, const float* g, int64_t e) {
  return p.v41 ? double(__fadd_rn(g[e], p.bias[e])) : __dadd_rn(double(g[e]), double(p.bias[e]));
}
// (key, expert) a beats (key, expert) b: the larger key, ties to the lower expert, a NaN key after every number
// (model/moe.h's routes_before: a total order, so the warp's butterfly agrees on one best in every lane and a token
// never takes an expert twice); expert -1 is nothing.
__device__ __forceinline__ bool beats(double ka, int ea, double kb, int eb) {
  if (ea < 0) return false;
  if (eb < 0) return true;
  const bool nan_a = ka != ka, nan_b = kb != kb;
  if (nan_a != nan_b) return nan_b;
  return !nan_a && ka != kb ? ka > kb : ea < eb;
}

// One block: each warp routes tokens (top_k rounds of a warp-wide best among the experts not yet chosen, so the
// order is partial_sort's), then the plan (kernels.h).
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const MoeRouteLaunch p) {
  __shared__ int32_t chosen[kMoeMaxRows];
  __shared__ float weight[kMoeMaxRows];
  __shared__ int32_t count[kMaxExperts], first_row[kMaxExperts], slot_of[kMaxExperts];
  __shared__ int32_t n_used;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = kRouteThreads / 32;
  const int64_t T = p.n_tokens, E = p.n_experts, K = p.top_k;
  for (int64_t t = warp; t < T; t += n_warps) {
    const float* g = p.scores + t * E;
    if (p.bias) {
      uint32_t taken = 0;  // bit j: expert lane + 32 j is chosen
      for (int64_t i = 0; i < K; ++i) {
        double best_key = 0;
        int best = -1;
        for (int64_t j = 0, e = lane; e < E; ++j, e += 32) {
          if ((taken >> j) & 1u) continue;
          const double key = route_key(p, g, e);
          if (beats(key, int(e), best_key, best)) {
            best_key = key;
            best = int(e);
          }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
          const double other_key = __shfl_xor_sync(0xffffffffu, best_key, off);
          const int other = __shfl_xor_sync(0xffffffffu, best, off);
          if (beats(other_key, other, best_key, best)) {
            best_key = other_key;
            best = other;
          }
        }
        if (best >= 0 && (best & 31) == lane) taken |= 1u << (best >> 5);
        if (lane == 0) chosen[t * K + i] = best;
      }
    } else if (lane == 0) {
      for (int64_t i = 0; i < K; ++i) chosen[t * K + i] = p.hash_chosen[t * K + i];
    }
    __syncwarp();
    if (lane == 0) {
      double total = 0;
      for (int64_t i = 0; i < K; ++i) total = __dadd_rn(total, double(g[chosen[t * K + i]]));
      for (int64_t i = 0; i < K; ++i) {
        const double gi = g[chosen[t * K + i]];
        double wi;
        if (!p.v41) wi = __dmul_rn(__ddiv_rn(gi, total), p.route_scale);
        else if (K > 1) wi = __ddiv_rn(__dmul_rn(p.route_scale, gi), __dadd_rn(total, 1e-20));
        else wi = __dmul_rn(p.route_scale, gi);
        weight[t * K + i] = float(wi);
      }
    }
  }
  __syncthreads();

  const int64_t R = T * K;
  for (int64_t e = threadIdx.x; e < E; e += kRouteThreads) {
    int32_t n = 0;
    for (int64_t r = 0; r < R; ++r) n += chosen[r] == e;
    count[e] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t row = 0, slot = 0;
    for (int64_t e = 0; e < E; ++e) {
      first_row[e] = row;
      slot_of[e] = count[e] ? slot++ : -1;
      row += count[e];
    }
    n_used = slot;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += kRouteThreads) {
    if (!count[e]) continue;
    int32_t row = first_row[e];
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < K; ++i) {
        if (chosen[t * K + i] != e) continue;
        // The token's choices before this one in (expert, choice) order: its rows' order is the experts'. A hash row
        // may name an expert twice (the checkpoint allows it); each choice is then a row of its own, as on the host.
        int32_t rank = 0;
        for (int64_t k = 0; k < K; ++k) rank += chosen[t * K + k] < e || (chosen[t * K + k] == e && k < i);
        p.row_token[row] = int32_t(t);
        p.row_weight[row] = weight[t * K + i];
        p.token_rows[t * K + rank] = row;
        ++row;
      }
    }
    set_moe_slot(p, slot_of[e], e, first_row[e], count[e]);
  }
  for (int64_t j = n_used + threadIdx.x; j < p.n_slots; j += kRouteThreads) set_moe_slot(p, j, 0, 0, 0);
}

__global__ void __launch_bounds__(256) gather_rows_kernel(const float* src, int64_t src_stride, const int32_t* index,
                                                          int64_t width, float* dst, int64_t dst_stride) {
  const int64_t r = blockIdx.y, i = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (i < width) dst[r * dst_stride + i] = src[int64_t(index[r]) * src_stride + i];
}

__global__ void __launch_bounds__(256) moe_combine_kernel(const MoeCombineLaunch p) {
  const int64_t t = blockIdx.y, i = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (i >= p.dim) return;
  double acc = 0.0;
  for (int64_t k = 0; k < p.top_k; ++k) acc = __dadd_rn(acc, double(p.y[int64_t(p.token_rows[t * p.top_k + k]) * p.dim + i]));
  p.out[t * p.dim + i] = round_bf16_exact(__dadd_rn(acc, double(p.shared_y[t * p.dim + i])));
}

// A row kernel (act_qdq, swiglu_qdq): one block of kRowThreads per row, after the checks both need.
template <class Launch>
void launch_rows(void (*kernel)(Launch), const Launch& p, const char* name, cudaStream_t stream) {
  if (p.n_rows == 0) return;
  DI_CHECK_MSG(p.block > 0 && p.width <= p.out_pad && p.out_pad <= p.out_stride && p.n_rows < (int64_t(1) << 31),
               std::string(name) + ": bad block, widths or row count");
  launch_kernel(kernel, dim3(unsigned(p.n_rows)), kRowThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_act_qdq(const ActQdqLaunch& p, cudaStream_t stream) {
  if (p.rmsnorm) {
    launch_rows(rmsnorm_qdq_kernel, p, "rmsnorm_qdq", stream);
  } else {
    launch_rows(act_qdq_kernel, p, "act_qdq", stream);
  }
}

void launch_engram_rows(const EngramRowsLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.width % 32 == 0 && p.width <= p.x_stride && p.qdq_block > 0,
               "engram_rows: rows of whole scale groups inside x's stride, and a QDQ block");
  DI_CHECK_MSG(p.n_tokens < (int64_t(1) << 31), "engram_rows: too many tokens for one launch");
  launch_kernel(engram_rows_kernel, dim3(unsigned(p.n_tokens)), kRowThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_swiglu_qdq(const SwigluQdqLaunch& p, cudaStream_t stream) {
  launch_rows(swiglu_qdq_kernel, p, "swiglu_qdq", stream);
}

void launch_moe_route(const MoeRouteLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.n_tokens * p.top_k <= kMoeMaxRows && p.n_experts <= kMaxExperts && p.top_k <= p.n_experts,
               "moe_route: too many routed rows or experts for one block");
  launch_kernel(moe_route_kernel, dim3(1), kRouteThreads, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const float* src, int64_t src_stride, const int32_t* index, int64_t n_rows, int64_t width,
                        float* dst, int64_t dst_stride, cudaStream_t stream) {
  if (n_rows == 0 || width == 0) return;
  DI_CHECK_MSG(n_rows <= 65535, "gather_rows: too many rows for one launch");
  launch_kernel(gather_rows_kernel, dim3(unsigned((width + 255) / 256), unsigned(n_rows)), 256, 0, stream, src, src_stride,
                index, width, dst, dst_stride);
  DI_CUDA_CHECK_LAUNCH();
}

void launch_moe_combine(const MoeCombineLaunch& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return;
  DI_CHECK_MSG(p.n_tokens <= 65535, "moe_combine: too many tokens for one launch");
  launch_kernel(moe_combine_kernel, dim3(unsigned((p.dim + 255) / 256), unsigned(p.n_tokens)), 256, 0, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
