// The host's exact scalar helpers (core/dtypes.h, model/ops.cpp) on the device, operation by operation in IEEE
// double with the host's rounding points, for the kernels that give the host's bits (moe_kernels.cu,
// mhc_kernels.cu). The double operations go through the _rn intrinsics so that nvcc contracts none of them into
// a fused multiply-add the host does not do.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "model/exp_fixed_constants.h"

namespace deepinfer::cuda {

namespace {  // each .cu file its own copy: the build compiles every file on its own (no -rdc)

__constant__ double kTaylor[14] = {kExpTaylor[0], kExpTaylor[1], kExpTaylor[2],  kExpTaylor[3],  kExpTaylor[4],
                                   kExpTaylor[5], kExpTaylor[6], kExpTaylor[7],  kExpTaylor[8],  kExpTaylor[9],
                                   kExpTaylor[10], kExpTaylor[11], kExpTaylor[12], kExpTaylor[13]};

// x rounded to `bits` mantissa bits at its own exponent, nearest even (round_to_mantissa_bits).
__device__ __forceinline__ double round_mantissa(double x, int bits) {
  uint64_t b = uint64_t(__double_as_longlong(x));
  const int drop = 52 - bits;
  b += ((uint64_t(1) << (drop - 1)) - 1) + ((b >> drop) & 1);
  b &= ~((uint64_t(1) << drop) - 1);
  return __longlong_as_double(static_cast<long long>(b));
}
__device__ __forceinline__ int double_exponent(double x) {
  return int((uint64_t(__double_as_longlong(x)) >> 52) & 0x7ff) - 1023;
}

// round_bf16(double): once to the nearest bf16, ties to even, subnormals included, overflow to infinity.
__device__ __forceinline__ float round_bf16_exact(double x) {
  if (!isfinite(x) || x == 0.0) return float(x);
  double r;
  if (double_exponent(x) >= -126) {
    r = round_mantissa(x, 7);
  } else {
    int exp2 = 0;
    frexp(x, &exp2);
    int e = exp2 - 1;
    if (e < -126) e = -126;
    const double quantum = ldexp(1.0, e - 7);
    r = __dmul_rn(rint(__ddiv_rn(x, quantum)), quantum);
  }
  if (fabs(r) > 0x1.fep127) return x > 0 ? __int_as_float(0x7f800000) : __int_as_float(int(0xff800000u));
  return float(r);
}

// e4m3_round: the e4m3 grid value nearest v, ties to even, saturating at +-448.
__device__ __forceinline__ double e4m3_round_exact(double v) {
  if (v == 0.0 || isnan(v)) return v;
  double r;
  if (isfinite(v) && double_exponent(v) >= -6) {
    r = round_mantissa(v, 3);
  } else {
    int exp2 = 0;
    frexp(v, &exp2);
    int e = exp2 - 1;
    if (e < -6) e = -6;
    const double quantum = ldexp(1.0, e - 3);
    r = __dmul_rn(rint(__ddiv_rn(v, quantum)), quantum);
  }
  return r > 448.0 ? 448.0 : r < -448.0 ? -448.0 : r;
}

// e2m1_round: the e2m1 grid value nearest v, ties to even, saturating at +-6.
__device__ __forceinline__ double e2m1_round_exact(double v) {
  if (v == 0.0 || isnan(v)) return v;
  double r;
  if (isfinite(v) && double_exponent(v) >= 0) {
    r = round_mantissa(v, 1);
  } else {
    int exp2 = 0;
    frexp(v, &exp2);
    int e = exp2 - 1;
    if (e < 0) e = 0;  // subnormal quantum 0.5
    const double quantum = ldexp(1.0, e - 1);
    r = __dmul_rn(rint(__ddiv_rn(v, quantum)), quantum);
  }
  return r > 6.0 ? 6.0 : r < -6.0 ? -6.0 : r;
}

// pow2_scale_at_least(a, q_max): the smallest power of two s with s * q_max >= a.
__device__ __forceinline__ double pow2_scale_at_least(double a, double q_max) {
  int exp2 = 0;
  frexp(__ddiv_rn(a, q_max), &exp2);
  double s = ldexp(1.0, exp2 - 2);
  while (__dmul_rn(s, q_max) < a) s = __dmul_rn(s, 2.0);
  return s;
}

// pow2ceil (ops.cpp): 2^ceil(log2 v) for v > 0.
__device__ __forceinline__ double pow2ceil(double v) {
  int e = 0;
  const double m = frexp(v, &e);
  return m == 0.5 ? v : ldexp(1.0, e);
}

// exp_fixed (ops.h). Past |x| > 700 the host takes libm's exp and this the device's, which may differ in the
// last bit: a SwiGLU input below -700, which a bf16 linear output could be but a model's never is.
__device__ __forceinline__ double exp_fixed(double x) {
  if (!(fabs(x) <= kExpFixedMaxArg)) return exp(x);
  const double n = rint(__dmul_rn(x, kLog2e));
  double r = __fma_rn(-n, kLn2Hi, x);
  r = __fma_rn(-n, kLn2Lo, r);
  double p = kTaylor[13];
  for (int k = 12; k >= 0; --k) p = __fma_rn(p, r, kTaylor[k]);
  return ldexp(p, int(n));
}

// sum_squares_32_lanes (ops.h) over one warp: lane l sums x[l]^2, x[l + 32]^2, ... in turn (each square is
// exact in double), then the XOR butterfly adds the lanes as the host's tree does. Every lane gets the sum.
__device__ __forceinline__ double warp_sum_squares_32_lanes(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = threadIdx.x & 31; i < n; i += 32) s = __dadd_rn(s, __dmul_rn(double(x[i]), double(x[i])));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
  return s;
}

}  // namespace

}  // namespace deepinfer::cuda
