// Random V4 / V4.1 checkpoints: value rules per tensor kind, fp8/fp4 block quantization with pow2 e8m0 scales,
// sharding and the index, and for V4.1 the Engram side file. Value statistics were measured on the golden
// flash-tiny / pro-tiny / tiny-a checkpoints (see the table above plain_tensor below). Every tensor draws from its own stream, seeded from (seed, name),
// so a tensor's bytes do not depend on which other tensors the config implies or on the shard layout.
// No std:: distribution or libm transcendental is used: their results differ across library versions.
#include "model/random_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "core/dtypes.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/engram.h"
#include "model/weights.h"

namespace deepinfer {

namespace {

// ---- PRNG: splitmix64 for seeding, xoshiro256** for the streams (both fully specified integer maths) ----
uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

class Rng {
 public:
  Rng(uint64_t seed, const std::string& stream_name) {
    uint64_t sm = seed;
    uint64_t mixed = splitmix64(&sm) ^ fnv1a(stream_name);
    for (uint64_t& word : s_) word = splitmix64(&mixed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform integer in [0, n), unbiased (rejection).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do { x = next(); } while (x >= limit);
    return x % n;
  }
  // Uniform double in [0, 1) with 53 random bits (exact).
  double uniform() { return double(next() >> 11) * 0x1p-53; }
  // Standard normal by the ziggurat method (Marsaglia & Tsang, 128 strips; the layout of Doornik's ZIGNOR).
  // Only +, -, *, /, sqrt (all correctly rounded in IEEE arithmetic) and the portable log / exp below are
  // used, tables included, so the draws are identical on every platform. ~99% of draws cost one 64-bit
  // draw and a compare, which keeps writing a multi-GB benchmark checkpoint in minutes.
  double normal() {
    const Ziggurat& z = ziggurat();
    for (;;) {
      const uint64_t bits = next();
      const int strip = int(bits & 127);
      const double u = 2.0 * (double(bits >> 11) * 0x1p-53) - 1.0;  // (-1, 1), 53 random bits
      if (std::fabs(u) < z.ratio[strip]) return u * z.x[strip];
      if (strip == 0) {  // the tail beyond R
        double tx, ty;
        do {
          tx = -portable_log(1.0 - uniform()) / Ziggurat::kR;
          ty = -portable_log(1.0 - uniform());
        } while (ty + ty < tx * tx);
        return u < 0 ? -(Ziggurat::kR + tx) : Ziggurat::kR + tx;
      }
      const double x = u * z.x[strip];
      const double f0 = z.f[strip], f1 = z.f[strip + 1];
      if (f1 + uniform() * (f0 - f1) < portable_exp(-0.5 * x * x)) return x;
    }
  }

 private:
  struct Ziggurat {
    static constexpr double kR = 3.442619855899;          // start of the tail
    static constexpr double kV = 9.91256303526217e-3;     // area of each strip
    double x[129], f[129], ratio[128];
    Ziggurat() {
      const double f_r = portable_exp(-0.5 * kR * kR);
      x[0] = kV / f_r;
      x[1] = kR;
      for (int i = 2; i < 128; ++i) x[i] = std::sqrt(-2.0 * portable_log(kV / x[i - 1] + portable_exp(-0.5 * x[i - 1] * x[i - 1])));
      x[128] = 0.0;
      for (int i = 0; i <= 128; ++i) f[i] = portable_exp(-0.5 * x[i] * x[i]);
      for (int i = 0; i < 128; ++i) ratio[i] = x[i + 1] / x[i];
    }
  };
  static const Ziggurat& ziggurat() {
    static const Ziggurat z;
    return z;
  }

  // ln(x) for finite x > 0 from basic operations only: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
  // ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.1716, series to t^27 (truncation < 1e-19 relative).
  static double portable_log(double x) {
    static constexpr double kInvOdd[] = {1.0 / 1,  1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11, 1.0 / 13,
                                         1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23, 1.0 / 25, 1.0 / 27};
    int e = 0;
    double m = std::frexp(x, &e);  // exact
    if (m < 0.70710678118654752440) {
      m *= 2.0;
      e -= 1;
    }
    const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
    double sum = 0.0;
    for (int i = 13; i >= 0; --i) sum = sum * t2 + kInvOdd[i];
    return 2.0 * t * sum + e * 0.69314718055994530942;
  }

  // exp(x) for -745 < x <= 0 from basic operations only: x = k ln2 + r, |r| <= ln2 / 2 (ln2 split in two
  // parts so r is accurate), Taylor series to r^22 (truncation < 1e-25 relative), times 2^k (exact).
  static double portable_exp(double x) {
    const double k = std::nearbyint(x * 1.44269504088896340736);
    const double r = (x - k * 0.693147180369123816490) - k * 1.90821492927058770002e-10;
    double sum = 1.0;
    for (int i = 22; i >= 1; --i) sum = 1.0 + sum * r / i;
    return std::ldexp(sum, int(k));
  }

  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// ---- encoders (grid value -> storage code) ----
void put_bf16(double value, uint8_t* out) {
  const uint16_t bits = bf16_bits(round_bf16(value));
  out[0] = uint8_t(bits & 0xff);
  out[1] = uint8_t(bits >> 8);
}

// The e4m3 code of a value already on the e4m3 grid (|g| <= 448). -0 is stored as +0, like the goldens.
uint8_t e4m3_code_fast(double grid) {
  if (grid == 0.0) return 0;
  const uint8_t sign = grid < 0 ? 0x80 : 0;
  const double a = std::fabs(grid);
  uint8_t code;
  if (a < 0x1p-6) {
    code = uint8_t(a * 512.0);                   // subnormal: m * 2^-9
  } else {
    int exp2 = 0;
    const double m = std::frexp(a, &exp2);       // a = m * 2^exp2, m in [0.5, 1)
    code = uint8_t(((exp2 - 1 + 7) << 3) | int(m * 16.0 - 8.0));
  }
  DI_CHECK_MSG(double(e4m3_to_float(code)) == a, "value not on the e4m3 grid");
  return uint8_t(code | sign);
}

// The e2m1 code of v rounded to the grid {0, 0.5, 1, 1.5, 2, 3, 4, 6}, nearest with ties to the even code,
// saturating at 6 (= e2m1_code(e2m1_round(v)), without its frexp / ldexp: the fp4 experts are most of a
// benchmark checkpoint's bytes). -0 is stored as +0, like the goldens.
uint8_t e2m1_code_rne(double v) {
  const double a = std::fabs(v);
  const uint8_t code = uint8_t((a > 0.25) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0));
  return code != 0 && v < 0 ? uint8_t(code | 8) : code;
}

// e8m0 byte of a power of two.
uint8_t e8m0_byte(double pow2) {
  int exp2 = 0;
  std::frexp(pow2, &exp2);
  const int byte = exp2 - 1 + 127;
  DI_CHECK(byte >= 1 && byte <= 254);
  return uint8_t(byte);
}

std::vector<uint8_t> to_bytes_f32(const std::vector<double>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = round_f32(values[i]);
    std::memcpy(&bytes[i * 4], &f, 4);
  }
  return bytes;
}

std::vector<double> normals(Rng& rng, int64_t n, double mean, double stddev) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = mean + stddev * rng.normal();
  return v;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Block-scaled weights: the gaussian weight W = gain/sqrt(n_in) * z is quantized per block with the
// smallest pow2 scale s such that max|W_block| <= s * q_max (spec §2.3 pow2ceil(amax / q_max)), as the
// goldens are (their codes' per-block max |code| lies in (q_max/2, q_max]).
struct Quantized {
  std::vector<uint8_t> weight;
  std::vector<uint8_t> scale;
};

// e4m3 [n_out, n_in] with e8m0 [ceil(n_out/B), ceil(n_in/B)].
Quantized quantize_fp8(Rng& rng, int64_t n_out, int64_t n_in, int block, double gain) {
  const std::vector<double> w = normals(rng, n_out * n_in, 0.0, gain / std::sqrt(double(n_in)));
  const int64_t nb_out = (n_out + block - 1) / block, nb_in = (n_in + block - 1) / block;
  Quantized q;
  q.weight.resize(size_t(n_out * n_in));
  q.scale.resize(size_t(nb_out * nb_in));
  for (int64_t bo = 0; bo < nb_out; ++bo) {
    for (int64_t bi = 0; bi < nb_in; ++bi) {
      const int64_t r0 = bo * block, r1 = std::min(n_out, r0 + block);
      const int64_t c0 = bi * block, c1 = std::min(n_in, c0 + block);
      double amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[size_t(r * n_in + c)]));
      const double s = amax > 0 ? pow2_scale_at_least(amax, 448.0) : 1.0;
      q.scale[size_t(bo * nb_in + bi)] = e8m0_byte(s);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const size_t i = size_t(r * n_in + c);
          q.weight[i] = e4m3_code_fast(e4m3_round(w[i] / s));  // w / s exact (pow2)
        }
    }
  }
  return q;
}

// Engram tables: e4m3 [n_rows, dim] with e8m0 [n_rows, dim/32] (1x32 blocks along each row), values N(0, 1)
// (tiny-a: value std 1.04, every block's max code at 448).
Quantized quantize_fp8_rows(Rng& rng, int64_t n_rows, int64_t dim) {
  Quantized q;
  q.weight.resize(size_t(n_rows * dim));
  q.scale.resize(size_t(n_rows * dim / 32));
  double x[32];
  for (int64_t b = 0; b < n_rows * dim / 32; ++b) {
    double amax = 0;
    for (double& v : x) {
      v = rng.normal();
      amax = std::max(amax, std::fabs(v));
    }
    const double s = amax > 0 ? pow2_scale_at_least(amax, 448.0) : 1.0;
    q.scale[size_t(b)] = e8m0_byte(s);
    for (int i = 0; i < 32; ++i) q.weight[size_t(b * 32 + i)] = e4m3_code_fast(e4m3_round(x[i] / s));
  }
  return q;
}

// Packed e2m1 [n_out, n_in/2] (element 2k in the low nibble) with e8m0 [n_out, n_in/32].
Quantized quantize_fp4(Rng& rng, int64_t n_out, int64_t n_in, double gain) {
  const std::vector<double> w = normals(rng, n_out * n_in, 0.0, gain / std::sqrt(double(n_in)));
  Quantized q;
  q.weight.resize(size_t(n_out * n_in / 2));
  q.scale.resize(size_t(n_out * n_in / 32));
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t b = 0; b < n_in / 32; ++b) {
      const double* x = &w[size_t(r * n_in + b * 32)];
      double amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const double s = amax > 0 ? pow2_scale_at_least(amax, 6.0) : 1.0;
      q.scale[size_t(r * (n_in / 32) + b)] = e8m0_byte(s);
      uint8_t* out = &q.weight[size_t((r * n_in + b * 32) / 2)];
      const double inv_s = 1.0 / s;  // exact: s is a power of two
      for (int i = 0; i < 32; i += 2) out[i / 2] = uint8_t(e2m1_code_rne(x[i] * inv_s) | (e2m1_code_rne(x[i + 1] * inv_s) << 4));
    }
  }
  return q;
}

// Gains (std * sqrt(n_in)) of the golden quantized weights. V4: 1 for every fp8 weight except
// shared_experts.w2 (0.5); fp4 experts w1 4, w3 2, w2 0.5. V4.1 (tiny-a): 1 everywhere but attn.wq_b (2).
double quantized_gain(const std::string& name, DType dtype, bool v41) {
  if (v41) return ends_with(name, "attn.wq_b.weight") ? 2.0 : 1.0;
  if (dtype == DType::kI8) {
    if (ends_with(name, ".w1.weight")) return 4.0;
    if (ends_with(name, ".w3.weight")) return 2.0;
    return 0.5;
  }
  return ends_with(name, "shared_experts.w2.weight") ? 0.5 : 1.0;
}

// Values of one non-quantized tensor. Golden statistics (flash-tiny + pro-tiny) -> rule:
//   embed.weight        std 1.00                   -> N(0, 1)
//   head.weight         std 0.125 (dim 256)        -> N(0, 2/sqrt(dim))     V4.1: std 0.1875 -> N(0, 3/sqrt(dim))
//   *norm.weight        mean 1.00, std 0.10        -> 1 + 0.1 N
//   other bf16 [n, k]   std 0.0625 (k 256)         -> N(0, 1/sqrt(k))  (compressor, gate, weights_proj)
//   engram q/k_weight   mean 1.01, std 0.49        -> 1 + 0.5 N                      (V4.1)
//   markov_head.embed   std 1.00                   -> N(0, 1)                        (V4.1)
//   hc_*_fn [m, 4D]     std 0.0156 (4D 1024)       -> N(0, 0.5/sqrt(4D))    V4.1: std 0.031 -> N(0, 1/sqrt(4D))
//   hc_{attn,ffn}_base  pre/post/off-diag comb: mean 0.05, std 0.52; comb diagonal: mean 1.54, std 0.53
//                                                  -> N(0, 0.5), diagonal 1.5 + N(0, 0.5)
//                       V4.1: mean 0, std 0.50 everywhere -> N(0, 0.5)
//   hc_{attn,ffn}_scale mean 0.98, std 0.20        -> 1 + 0.2 N
//   hc_head_base        mean -0.04, std 0.54       -> N(0, 0.5)
//   hc_head_scale       mean 1.01, std 0.05        -> 1 + 0.05 N
//   attn_sink           mean -0.15, std 0.79       -> N(0, 0.8)
//   compressor ape      std 0.50                   -> N(0, 0.5)
//   gate.bias(_vl)      std 0.08 / 0.13            -> N(0, 0.1)
//   gate.tid2eid        uniform distinct experts per token
Status plain_tensor(const TensorSpec& spec, const ModelConfig& c, Rng& rng, std::vector<uint8_t>* bytes) {
  const std::string& name = spec.name;
  const int64_t n = numel(spec.shape);
  if (spec.dtype == DType::kBF16) {
    double mean = 0, stddev = 0;
    if (name == "embed.weight" || ends_with(name, "markov_head.embed.weight")) {
      stddev = 1.0;
    } else if (ends_with(name, "engram.q_weight") || ends_with(name, "engram.k_weight")) {
      mean = 1.0;
      stddev = 0.5;
    } else if (name == "head.weight") {
      stddev = (c.is_v41() ? 3.0 : 2.0) / std::sqrt(double(c.dim));
    } else if (ends_with(name, "norm.weight")) {
      mean = 1.0;
      stddev = 0.1;
    } else if (spec.shape.size() == 2) {
      stddev = 1.0 / std::sqrt(double(spec.shape[1]));
    } else {
      return Status::error("random checkpoint: no value rule for bf16 tensor '" + name + "'");
    }
    bytes->resize(size_t(n) * 2);
    for (int64_t i = 0; i < n; ++i) put_bf16(mean + stddev * rng.normal(), &(*bytes)[size_t(i) * 2]);
    return Status();
  }
  if (spec.dtype == DType::kF32) {
    std::vector<double> v;
    if (ends_with(name, "_fn") && spec.shape.size() == 2) {
      v = normals(rng, n, 0.0, (c.is_v41() ? 1.0 : 0.5) / std::sqrt(double(spec.shape[1])));
    } else if (ends_with(name, "hc_head_base")) {
      v = normals(rng, n, 0.0, 0.5);
    } else if (ends_with(name, "_base")) {
      // [(2 + hc) * hc]: pre [hc], post [hc], comb [hc, hc] (source copy j major); identity-leaning comb.
      v = normals(rng, n, 0.0, 0.5);
      const int hc = c.hc_mult;
      if (n != int64_t(2 + hc) * hc) return Status::error("random checkpoint: unexpected shape of '" + name + "'");
      if (!c.is_v41()) for (int j = 0; j < hc; ++j) v[size_t(2 * hc + j * hc + j)] += 1.5;
    } else if (ends_with(name, "hc_head_scale")) {
      v = normals(rng, n, 1.0, 0.05);
    } else if (ends_with(name, "_scale")) {
      v = normals(rng, n, 1.0, 0.2);
    } else if (ends_with(name, "attn_sink")) {
      v = normals(rng, n, 0.0, 0.8);
    } else if (ends_with(name, ".ape")) {
      v = normals(rng, n, 0.0, 0.5);
    } else if (ends_with(name, "gate.bias") || ends_with(name, "gate.bias_vl")) {
      v = normals(rng, n, 0.0, 0.1);
    } else {
      return Status::error("random checkpoint: no value rule for F32 tensor '" + name + "'");
    }
    *bytes = to_bytes_f32(v);
    return Status();
  }
  if (spec.dtype == DType::kI64 && ends_with(name, "gate.tid2eid") && spec.shape.size() == 2) {
    const int64_t n_rows = spec.shape[0], k = spec.shape[1];
    if (k > c.n_routed_experts) return Status::error("random checkpoint: '" + name + "' wants more experts than exist");
    bytes->resize(size_t(n) * 8);
    std::vector<int64_t> experts(static_cast<size_t>(c.n_routed_experts));
    for (int64_t r = 0; r < n_rows; ++r) {
      for (size_t e = 0; e < experts.size(); ++e) experts[e] = int64_t(e);
      for (int64_t i = 0; i < k; ++i) {  // partial Fisher-Yates: k distinct experts in random order
        const size_t j = size_t(i) + size_t(rng.below(uint64_t(experts.size()) - uint64_t(i)));
        std::swap(experts[size_t(i)], experts[j]);
        std::memcpy(&(*bytes)[size_t(r * k + i) * 8], &experts[size_t(i)], 8);
      }
    }
    return Status();
  }
  return Status::error(std::string("random checkpoint: no value rule for ") + dtype_name(spec.dtype) + " tensor '" + name + "'");
}

// One tensor's bytes. A quantized weight's .scale is produced together with its .weight; scales_cache
// carries it from the weight to the scale (they are always written next to each other).
Status make_tensor(const TensorSpec& spec, const std::map<std::string, TensorSpec>& specs, const ModelConfig& c,
                   uint64_t seed, std::map<std::string, std::vector<uint8_t>>* scales_cache, TensorToWrite* out) {
  out->name = spec.name;
  out->dtype = spec.dtype;
  out->shape = spec.shape;
  const bool is_scale = spec.dtype == DType::kF8E8M0 && ends_with(spec.name, ".scale");
  if (is_scale) {
    auto cached = scales_cache->find(spec.name);
    if (cached == scales_cache->end()) {
      // Not produced yet: generate its weight (same stream, same bytes) for the scale.
      const std::string weight_name = spec.name.substr(0, spec.name.size() - 6) + ".weight";
      auto w = specs.find(weight_name);
      if (w == specs.end()) return Status::error("random checkpoint: scale '" + spec.name + "' has no weight");
      TensorToWrite unused;
      DI_RETURN_IF_ERROR(make_tensor(w->second, specs, c, seed, scales_cache, &unused));
      cached = scales_cache->find(spec.name);
      DI_CHECK(cached != scales_cache->end());
    }
    out->bytes = std::move(cached->second);
    scales_cache->erase(cached);
  } else if (spec.dtype == DType::kF8E4M3 || spec.dtype == DType::kI8) {
    const std::string prefix = spec.name.substr(0, spec.name.size() - 7);  // strip ".weight"
    if (!ends_with(spec.name, ".weight") || !specs.count(prefix + ".scale")) {
      return Status::error("random checkpoint: quantized tensor '" + spec.name + "' has no .scale");
    }
    Rng rng(seed, spec.name);
    const double gain = quantized_gain(spec.name, spec.dtype, c.is_v41());
    Quantized q = ends_with(spec.name, "engram.embed.weight") ? quantize_fp8_rows(rng, spec.shape[0], spec.shape[1])
                  : spec.dtype == DType::kF8E4M3 ? quantize_fp8(rng, spec.shape[0], spec.shape[1], c.weight_block, gain)
                                                 : quantize_fp4(rng, spec.shape[0], spec.shape[1] * 2, gain);
    out->bytes = std::move(q.weight);
    (*scales_cache)[prefix + ".scale"] = std::move(q.scale);
  } else {
    Rng rng(seed, spec.name);
    DI_RETURN_IF_ERROR(plain_tensor(spec, c, rng, &out->bytes));
  }
  if (out->bytes.size() != size_t(numel(spec.shape)) * size_t(dtype_size(spec.dtype))) {
    return Status::error("random checkpoint: generated tensor '" + spec.name + "' has the wrong byte count");
  }
  return Status();
}

// The tensors of one shard, generated by one worker per hardware thread (each tensor has its own stream,
// so the bytes do not depend on the thread count). Weights first, in parallel; then each .scale from the
// cache its weight's worker filled (a shard always holds a scale together with its weight).
Status make_tensors_parallel(std::span<const TensorSpec> part, const std::map<std::string, TensorSpec>& specs,
                             const ModelConfig& c, uint64_t seed, std::vector<TensorToWrite>* out) {
  auto is_scale = [](const TensorSpec& s) { return s.dtype == DType::kF8E8M0 && ends_with(s.name, ".scale"); };
  out->assign(part.size(), TensorToWrite{});
  const size_t n_workers = std::max(1u, std::min(std::thread::hardware_concurrency(), 16u));
  std::vector<std::map<std::string, std::vector<uint8_t>>> caches(n_workers);
  std::vector<Status> errors(n_workers);
  std::atomic<size_t> cursor{0};
  auto work = [&](size_t w) {
    for (size_t k; (k = cursor.fetch_add(1)) < part.size();) {
      if (is_scale(part[k])) continue;
      Status st = make_tensor(part[k], specs, c, seed, &caches[w], &(*out)[k]);
      if (!st.ok()) {
        errors[w] = st;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < n_workers; ++w) threads.emplace_back(work, w);
  work(0);
  for (std::thread& t : threads) t.join();
  for (const Status& st : errors) DI_RETURN_IF_ERROR(st);
  std::map<std::string, std::vector<uint8_t>> scales;
  for (auto& cache : caches) scales.merge(cache);
  for (size_t k = 0; k < part.size(); ++k) {
    if (is_scale(part[k])) DI_RETURN_IF_ERROR(make_tensor(part[k], specs, c, seed, &scales, &(*out)[k]));
  }
  DI_CHECK(scales.empty());
  return Status();
}

// Tensors in checkpoint order: embed, main layers, the rest of the main model (head, norm, hc_head), MTP.
// A .scale always follows its .weight (expected_tensors lists them so).
std::vector<TensorSpec> write_order(const std::vector<TensorSpec>& specs) {
  std::vector<TensorSpec> embed, layers, rest, mtp;
  for (const TensorSpec& s : specs) {
    if (s.name.rfind("mtp.", 0) == 0) mtp.push_back(s);
    else if (s.name.rfind("layers.", 0) == 0) layers.push_back(s);
    else if (s.name == "embed.weight") embed.push_back(s);
    else rest.push_back(s);
  }
  std::vector<TensorSpec> order = embed;
  for (auto* part : {&layers, &rest, &mtp}) order.insert(order.end(), part->begin(), part->end());
  return order;
}

// Splits [begin, end) of the ordered tensors into n_parts contiguous, non-empty, byte-balanced parts
// (a .scale stays with its weight). Appends the part index of each tensor to shard_of.
Status split_balanced(const std::vector<TensorSpec>& order, size_t begin, size_t end, int n_parts, int first_shard,
                      std::vector<int>* shard_of) {
  std::vector<size_t> unit_starts;  // tensor index where each unit begins
  for (size_t i = begin; i < end; ++i) {
    if (!(i > begin && order[i].dtype == DType::kF8E8M0 && ends_with(order[i].name, ".scale"))) unit_starts.push_back(i);
  }
  if (unit_starts.size() < size_t(n_parts)) {
    return Status::error("random checkpoint: " + std::to_string(n_parts) + " shards requested for only " +
                         std::to_string(unit_starts.size()) + " tensors");
  }
  auto bytes_of = [&](size_t i) { return uint64_t(numel(order[i].shape)) * uint64_t(dtype_size(order[i].dtype)); };
  uint64_t total = 0;
  for (size_t i = begin; i < end; ++i) total += bytes_of(i);
  int part = 0;
  std::vector<size_t> count(size_t(n_parts), 0);
  uint64_t cumulative = 0;
  for (size_t u = 0; u < unit_starts.size(); ++u) {
    const size_t units_left = unit_starts.size() - u;  // including this one
    if (count[size_t(part)] > 0 && units_left <= size_t(n_parts - 1 - part)) ++part;
    const size_t stop = u + 1 < unit_starts.size() ? unit_starts[u + 1] : end;
    for (size_t i = unit_starts[u]; i < stop; ++i) {
      shard_of->push_back(first_shard + part);
      cumulative += bytes_of(i);
    }
    ++count[size_t(part)];
    if (part + 1 < n_parts && cumulative * uint64_t(n_parts) >= total * uint64_t(part + 1)) ++part;
  }
  return Status();
}

std::string shard_file_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

// Writes the file's pages to disk and drops them from the page cache, so that the checkpoint is later read the way
// a downloaded one is: through readahead, into large page-cache folios. Left cached as written, a shard written
// late in a run (the head) sat in single 4 KB pages on a host whose memory the generation had fragmented, and a
// read loop over the mapped head weights gave 18 GB/s where a fresh buffer gave 30 (2-core Xeon; after dropping
// and reading it back, 24-30): `deepinfer bench` timed the page cache, not the kernels.
Status drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  if (::fdatasync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::error(path + ": fdatasync failed: " + std::strerror(err));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // advice only: pages still mapped elsewhere stay
  ::close(fd);
  return Status();
}

Status write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::error(path + ": cannot open for writing");
    out.write(text.data(), std::streamsize(text.size()));
    if (!out.good()) return Status::error(path + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::error(path + ": cannot rename from " + tmp + ": " + ec.message());
  return Status();
}

// V4.1 Engram side file (the golden format, /work/shared/golden/v41-flash/README.md): a random token map with
// first-appearance numbering (ids 0..C-1 map to themselves, the rest to uniform draws), numpy's multipliers for
// the config's layer ids, and the primes / offsets of the primes rule.
Status write_random_engram_side_file(const ModelConfig& c, uint64_t seed, const std::string& path) {
  const int64_t n_compressed = c.engram_compressed_vocab_size;
  if (n_compressed < 1 || n_compressed > c.vocab_size) {
    return Status::error("random checkpoint: engram_compressed_vocab_size must be in 1..vocab_size");
  }
  Rng rng(seed, "engram.token_map");
  std::vector<int32_t> token_map(size_t(c.vocab_size));
  for (int64_t i = 0; i < c.vocab_size; ++i) token_map[size_t(i)] = int32_t(i < n_compressed ? i : int64_t(rng.below(uint64_t(n_compressed))));
  Result<EngramHashing> hashing = engram_hashing_for_map(c, std::move(token_map), "random checkpoint");
  if (!hashing.ok()) return hashing.status();
  const std::string tmp = path + ".tmp";
  DI_RETURN_IF_ERROR(write_engram_side_file(c, hashing.value(), tmp, "deepinfer random checkpoint: random token map"));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::error(path + ": cannot rename from " + tmp + ": " + ec.message());
  return Status();
}

}  // namespace

Status write_random_checkpoint(const std::string& config_json_text, uint64_t seed, const std::string& out_dir,
                               int n_shards) {
  namespace fs = std::filesystem;
  Result<ModelConfig> parsed = parse_model_config(config_json_text, "config.json for " + out_dir);
  if (!parsed.ok()) return parsed.status();
  const ModelConfig& c = parsed.value();
  if (n_shards < 1) return Status::error("random checkpoint: n_shards must be at least 1, got " + std::to_string(n_shards));

  const std::vector<TensorSpec> order = write_order(expected_tensors(c));
  std::map<std::string, TensorSpec> specs;
  for (const TensorSpec& s : order) specs[s.name] = s;

  // Shard layout: the main model over the first shards, MTP alone in the last one (when there are >= 2).
  size_t n_main = 0;
  while (n_main < order.size() && order[n_main].name.rfind("mtp.", 0) != 0) ++n_main;
  std::vector<int> shard_of;
  if (n_shards >= 2 && n_main < order.size()) {
    DI_RETURN_IF_ERROR(split_balanced(order, 0, n_main, n_shards - 1, 0, &shard_of));
    DI_RETURN_IF_ERROR(split_balanced(order, n_main, order.size(), 1, n_shards - 1, &shard_of));
  } else {
    DI_RETURN_IF_ERROR(split_balanced(order, 0, order.size(), n_shards, 0, &shard_of));
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error(out_dir + ": cannot create directory: " + ec.message());
  DI_RETURN_IF_ERROR(write_text_file((fs::path(out_dir) / "config.json").string(), config_json_text));

  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                        {"deepinfer_random_weights_seed", std::to_string(seed)}};
  size_t next = 0;
  for (int shard = 0; shard < n_shards; ++shard) {
    const std::string file_name = shard_file_name(shard, n_shards);
    const size_t first = next;
    while (next < order.size() && shard_of[next] == shard) ++next;
    std::vector<TensorToWrite> tensors;
    DI_RETURN_IF_ERROR(make_tensors_parallel(std::span(order).subspan(first, next - first), specs, c, seed, &tensors));
    for (const TensorToWrite& t : tensors) {
      total_size += t.bytes.size();
      weight_map[t.name] = file_name;
    }
    const fs::path path = fs::path(out_dir) / file_name;
    const std::string tmp = path.string() + ".tmp";
    DI_RETURN_IF_ERROR(write_safetensors(tmp, tensors, metadata));
    fs::rename(tmp, path, ec);
    if (ec) return Status::error(path.string() + ": cannot rename from " + tmp + ": " + ec.message());
    DI_RETURN_IF_ERROR(drop_from_page_cache(path.string()));
  }
  DI_CHECK(next == order.size());

  if (c.is_v41() && !c.engram_layers.empty()) {
    DI_RETURN_IF_ERROR(write_random_engram_side_file(c, seed, (fs::path(out_dir) / "engram_token_map.safetensors").string()));
  }
  nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  return write_text_file((fs::path(out_dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}

}  // namespace deepinfer
