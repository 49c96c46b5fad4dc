// The cheap elementwise ops of the V4 forward pass, computed exactly and rounded once (golden precision
// contract). Both backends share them: they cost O(width) per token, next to the O(width^2) GEMMs.
// Values in and out are float arrays holding bf16 (or fp32 where noted) values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer {

// The sum of x[i]^2 in double, in one fixed order that a GPU warp computes as cheaply as the CPU: 32 lanes,
// lane l adding x[l]^2, x[l + 32]^2, ... in turn, then the lanes pairwise as a warp's XOR butterfly does
// (lane l + lane l + 16 for l < 16, then + 8, + 4, + 2, + 1). The precision contract allows any order; having one
// order on every backend lets the CUDA backend's device rmsnorm give these bits.
double sum_squares_32_lanes(const float* x, int64_t n);

// rmsnorm over n values: bf16(w_i * x_i / sqrt(mean(x^2) + eps)); weight == nullptr means no weight. The sum of
// squares is sum_squares_32_lanes.
void rmsnorm(const float* x, const uint16_t* weight, int64_t n, double eps, float* out);

// Activation fp8 fake-quant (spec QDQ8), in place, per block of `block` values; the last block may be short.
void qdq_fp8(float* x, int64_t n, int64_t block);
// Activation fp4 fake-quant with power-of-two scales (spec QDQ4), in place.
void qdq_fp4(float* x, int64_t n, int64_t block);

// V4.1 QDQ rules (golden v41 README): the scale comes from fp32 arithmetic as in DeepSeek's kernels.
// QDQ8: s = pow2ceil(f32(amax * f32(1/448))), amax >= f32(1e-4); values clamp to +-448 on the e4m3 grid.
void qdq_fp8_v41(float* x, int64_t n, int64_t block);
// QDQ4P: s = pow2ceil(f32(amax * f32(1/6))), amax >= 6 * 2^-126; e2m1 grid.
void qdq_fp4_pow2_v41(float* x, int64_t n, int64_t block);
// QDQ4E (compressed KV): s = e4m3(f32(amax / 6)), amax >= 6 * 2^-9; q = e2m1(f32(x / s)).
void qdq_fp4_e4m3_scale(float* x, int64_t n, int64_t block);

// e^x by a fixed sequence of IEEE double operations: x = n ln2 + r (n = nearest integer of x log2 e, r by two
// fused multiply-adds), a degree-13 Taylor polynomial in r (Horner, fused), times 2^n (exact). Within a few ulp
// of e^x; |x| > 700 and NaN go to std::exp. The AVX-512 SwiGLU runs the same operations on 8 lanes, and the CUDA
// backend's kernels run them too, so all give the same bits on every machine (std::exp differs between libm
// versions anyway). SwiGLU, the mHC coefficients (hc_split_sinkhorn, hc_head_pre) and the Engram gate take their e^x
// from it.
double exp_fixed(double x);
// e[i] = exp_fixed(double(x[i]) - shift) for i < n (e may be null), and their sum: element i added into the i % 8-th
// of 8 running sums, which are then added in order. The same bits with or without AVX-512 (8 lanes at a time), so a
// seeded sampler draws the same tokens on every machine. The sampler's softmax over the vocabulary.
double exp_fixed_sum(const float* x, int64_t n, double shift, double* e);
// The MoE's SwiGLU (spec M5 / M7): out[i] = bf16(silu(min(a[i], limit)) * clamp(b[i], -limit, limit) * weight),
// silu(v) = v / (1 + e^-v) in double (exp_fixed). limit = infinity clamps nothing, weight = 1 scales nothing
// (v * 1 == v). out may be a.
void swiglu(const float* a, const float* b, int64_t n, double limit, double weight, float* out);

// 128-point Sylvester-Walsh-Hadamard transform times f32(128^-0.5), rounded to bf16, in place.
void hadamard_128(float* x);

// V4 per-head q normalisation (spec A4-A8), in place on [n_heads, head_dim].
void head_rms_normalize(float* q, int64_t n_heads, int64_t head_dim, double eps);
// Its A5-A7: the multiplier bf16(1 / sqrt(bf16(bf16(sum_sq / head_dim) + eps))) of one head.
double head_rms_inverse(double sum_sq, int64_t head_dim, double eps);

// RoPE tables: fp32 frequencies per pair (spec §2.2, golden README "Tables").
struct RopeTable {
  std::vector<float> freqs;  // [rope_dim / 2]
  // Rotates the interleaved pairs of x[0..rope_dim) by position `pos` (inverse: by -pos). In place, bf16 out.
  void apply(float* x, int64_t pos, bool inverse) const;
  // apply() on n_heads vectors `stride` floats apart (the same position), the angles' cosines and sines
  // computed once for all of them.
  void apply_heads(float* x, int64_t n_heads, int64_t stride, int64_t pos, bool inverse) const;
  // The f32 cosine and sine of each pair's angle at `pos` that apply() rotates by: out[2 i], out[2 i + 1] for the
  // rope_dim / 2 pairs (a backend that rotates on a device takes them from here, so its bits are the host's).
  void cos_sin(int64_t pos, float* out) const;
  // cos_sin of each position, out [positions, rope_dim] (resized).
  void cos_sin_rows(std::span<const int64_t> positions, std::vector<float>& out) const;
};
// apply_heads' rotation by given angles: cos_sin as RopeTable::cos_sin writes them, for n_pairs pairs.
void rope_rotate_heads(float* x, int64_t n_heads, int64_t stride, const float* cos_sin, int64_t n_pairs, bool inverse);
RopeTable make_rope_table(int rope_dim, double theta);  // plain
RopeTable make_yarn_rope_table(int rope_dim, double theta, double factor, int64_t original_max_pos,
                               double beta_fast, double beta_slow);

// mHC coefficients from the 24 mixes (spec B2-B6): pre [4], post [4], comb [4][4] (comb[j][k]: source j
// to copy k). All fp32, every step rounded as the contract says.
struct HcCoefficients {
  float pre[4];
  float post[4];
  float comb[4][4];
};
HcCoefficients hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int sinkhorn_iters,
                                 double hc_eps);
// Head collapse coefficients (spec H2): pre_k = f32(sigmoid(mix_k * scale + base_k) + hc_eps).
void hc_head_pre(const float* mixes, const float* scale, const float* base, double hc_eps, float* pre);

// u = bf16(sum_k pre_k * h_k) over 4 copies of width n (spec B7/H3).
void hc_collapse(const float* h, const float* pre, int64_t n, float* u);
// h'_k = bf16(post_k * x + sum_j comb[j][k] * h_j) (spec P1/P2); writes [4, n].
void hc_expand(const float* h, const float* x, const HcCoefficients& c, int64_t n, float* h_out);
// The same for the columns [i0, i1) of each of the 4 copies only (each column's values depend on that column alone).
void hc_expand_columns(const float* h, const float* x, const HcCoefficients& c, int64_t n, int64_t i0, int64_t i1,
                       float* h_out);

// V4.1 Engram's gate and residual update of one residual copy h [n] (spec §7.6 steps 3-4): with qk_d =
// q_weight[d] k_weight[d] (bf16, their product exact in double), dot = sum_d h_d qk_d key_d and the sums of
// squares of h and key, each in sum_squares_32_lanes' 32-lane order (so a GPU warp gives the same bits),
// tc = dot / (sqrt(mean(h^2) + eps) sqrt(mean(key^2) + eps) sqrt(n)), gate = f32(sigmoid(sign(tc) sqrt(max(|tc|,
// 1e-6)))) (exp_fixed), then h_d = bf16(h_d + gate val_d) in place. Returns the gate.
double engram_gate(float* h, const uint16_t* q_weight, const uint16_t* k_weight, const float* key, const float* val,
                   int64_t n, double eps);

// The largest of x[0, n), NaNs passed over (-inf where every value is one): the largest of 8 lanes, so that the loop is a
// vector one (a greedy draw over V4's vocabulary took 0.11 ms one element after the other).
float max_value(const float* x, int64_t n);
// Index of the max value (max_value, then the first index holding it); ties go to the lower index, NaNs are passed over
// (0 where every value is NaN).
int64_t argmax(const float* x, int64_t n);

}  // namespace deepinfer
