// AVX-512 versions of the hottest exact per-token ops of ops.cpp (a prefill spent ~7% of its time in their
// scalar loops). They do the same IEEE double operations in the same order, 8 lanes at a time, and round
// with round_bf16's / e4m3_round's own integer rounding of the bits; a vector with a lane outside the
// target format's normal range (subnormal, overflow, infinity, NaN) rounds its lanes with the scalar
// functions. So the results are those of the scalar code, bit for bit (tests/unit/ops_avx512_test.cpp).
// Callers check ops_avx512_available() first.
#pragma once

#include <cstdint>

#include "model/exp_fixed_constants.h"
#include "model/ops.h"

namespace deepinfer {

bool ops_avx512_available();

// hc_expand_columns (ops.h), columns [i0, i1).
void hc_expand_columns_avx512(const float* h, const float* x, const HcCoefficients& c, int64_t n, int64_t i0, int64_t i1,
                              float* h_out);
// hc_collapse (ops.h).
void hc_collapse_avx512(const float* h, const float* pre, int64_t n, float* u);
// sum_squares_32_lanes (ops.h).
double sum_squares_32_lanes_avx512(const float* x, int64_t n);
// rmsnorm's (ops.h) outputs out[i] = bf16(w[i] * x[i] / r) for the first n / 8 * 8 elements; returns how many.
int64_t rmsnorm_scale_avx512(const float* x, const uint16_t* weight, int64_t n, double r, float* out);
// head_rms_normalize (ops.h).
void head_rms_normalize_avx512(float* q, int64_t n_heads, int64_t head_dim, double eps);
// RopeTable::apply_heads's rotation (ops.h) with the angles' f32 cosines and sines given (cos_sin[2 i], cos_sin[2 i + 1]
// for pair i; inverse: by the negated sines), on the first n_pairs / 4 * 4 pairs of each head; returns how many.
int64_t rope_rotate_avx512(float* x, int64_t n_heads, int64_t stride, const float* cos_sin, int64_t n_pairs,
                           bool inverse);
// swiglu's (ops.h) outputs for the first n / 8 * 8 elements; returns how many.
int64_t swiglu_avx512(const float* a, const float* b, int64_t n, double limit, double weight, float* out);
// The elementwise part of qdq_fp4 for one block with scale s: x[i] = f32(e2m1_round(x[i] / s) * s).
void qdq_fp4_block_avx512(float* x, int64_t n, double s);
// hadamard_128 (ops.h).
void hadamard_128_avx512(float* x);
// exp_fixed_sum (ops.h) over the first n / 8 * 8 elements: e[i] written where e is not null, element i added into
// sums[i % 8] (8 doubles, added to as they are); returns how many.
int64_t exp_fixed_sum_avx512(const float* x, int64_t n, double shift, double* e, double* sums);
// The largest |x[i]| of n floats, NaNs skipped; 0 when there is none.
float abs_max_avx512(const float* x, int64_t n);
// The elementwise part of qdq_fp8 for one block with scale s: x[i] = f32(e4m3_round(x[i] / s) * s).
void qdq_fp8_block_avx512(float* x, int64_t n, double s);
// Decoding a packed cache row's block (kv_format.h), 16 values at a time: out[i] = e4m3_to_float(codes[i]) * s,
// and out[i] = e2m1_to_float(nibble i of packed) * s (element 2j in the low nibble of byte j). Bit for bit the
// scalar products, NaN codes included.
void unpack_e4m3_avx512(const uint8_t* codes, int64_t n, float s, float* out);
void unpack_e2m1_avx512(const uint8_t* packed, int64_t n, float s, float* out);

}  // namespace deepinfer
