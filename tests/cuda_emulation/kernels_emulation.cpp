// The CUDA kernels' launchers (src/backend/cuda/kernels.h) emulated on the CPU for `cuda_emulated_tests`:
// each launch is queued on its stream (cuda_emulation.h) and, when the stream runs it, computes its op on the
// fast CPU backend over the buffers as they are then. What this checks is the host code around the kernels:
// the layouts, offsets and sizes it hands them, the copies before and after, and their order. The kernels
// themselves are checked on a GPU (cuda_tests) and, their real bodies on the CPU, by cuda_device_emulated_tests,
// which takes from here only the launchers of the .cu files it does not compile (the groups at the end).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/epilogue.h"
#include "backend/cuda/kernels.h"
#include "core/dtypes.h"
#include "core/status.h"
#include "cuda_emulation.h"
#include "model/engram.h"
#include "model/kv_format.h"
#include "model/moe.h"
#include "model/ops.h"

namespace deepinfer::cuda {
namespace {

using cuda_emulation::enqueue;

// The bits of n floats that hold bf16 values (the kernels' norm weights), as the host's rmsnorm takes them.
[[maybe_unused]] std::vector<uint16_t> bf16_bits(const float* values, int64_t n) {
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) bits[size_t(i)] = uint16_t(float_to_bits(values[i]) >> 16);  // exact: bf16 values
  return bits;
}

// The ops run on the fast CPU backend (one thread: the model's host work has the machine's cores), whose sums
// are batch-invariant and within the bounds the tests hold the kernels to, as the real kernels' are.
[[maybe_unused]] Backend& device_ops() {
  static const std::unique_ptr<Backend> backend = [] {
    std::string error;
    std::unique_ptr<Backend> b = make_fast_backend(1, &error);
    DI_CHECK_MSG(b != nullptr, error);
    return b;
  }();
  return *backend;
}
// The exact reference, for the attention shapes the fast backend's tiles do not take (odd test widths).
[[maybe_unused]] Backend& reference() {
  static const std::unique_ptr<Backend> backend = make_reference_backend();
  return *backend;
}

// A device weight (weight_cache.cpp's layout: rows padded with zero codes to k_pad values, scales as stored)
// read as a checkpoint weight of k_pad columns: the padding adds exact zeros against x's zero padding.
[[maybe_unused]] void linear_now(const LinearLaunch& p) {
  LinearWeight w;
  w.n_in = p.k_pad;
  w.n_out = p.row_begin + p.n_rows;
  w.data = p.w;
  w.scale = p.scale;
  w.block = p.block;
  switch (p.kind) {
    case WeightKind::kBf16: w.dtype = DType::kBF16; break;
    case WeightKind::kFp8:
      w.dtype = DType::kF8E4M3;
      DI_CHECK_MSG((p.k_pad + p.block - 1) / p.block == p.scale_pitch, "emulated linear: k_pad reaches past the scale blocks");
      break;
    case WeightKind::kFp4: w.dtype = DType::kI8; break;
  }
  DI_CHECK_MSG(w.row_bytes() == p.row_pitch, "a linear launch's row pitch is not its k_pad's");
  LinearParams l;
  l.x = p.x;
  l.x_stride = p.k_pad;
  l.n_tokens = p.n_tokens;
  l.weight = &w;
  l.row_begin = p.row_begin;
  l.n_rows = p.n_rows;
  l.epilogue = Epilogue(int(p.epilogue));
  l.bias = p.bias;
  l.out = p.out;
  l.out_stride = p.n_rows;
  device_ops().linear(l);
}

[[maybe_unused]] void queue_linear(const LinearLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] { linear_now(p); });
}

[[maybe_unused]] void queue_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad, int64_t max_rows, int64_t max_tokens,
                   cudaStream_t stream) {
  enqueue(stream, [=] {  // the descriptors are read when the launch runs, after their upload
    for (int i = 0; i < n_ops; ++i) {
      const LinearLaunch& op = ops[i];
      DI_CHECK_MSG(op.kind == kind && op.k_pad == k_pad && op.n_rows <= max_rows && op.n_tokens <= max_tokens,
                   "a grouped linear launch's descriptor disagrees with the launch");
      linear_now(op);
    }
  });
}

[[maybe_unused]] KvRowFormat format_of(const UnpackRowsLaunch& p) {
  KvRowKind kind = KvRowKind::kV4Kv;
  switch (p.kind) {
    case PackedRowKind::kE4m3: kind = p.n_rope > 0 ? KvRowKind::kV4Kv : KvRowKind::kV41Kv; break;
    case PackedRowKind::kE2m1E4m3Scales: kind = KvRowKind::kV41Fp4; break;
    case PackedRowKind::kE2m1E8m0Scales: kind = KvRowKind::kFp4Key; break;
  }
  const KvRowFormat f = kv_row_format(kind, p.n_values, p.n_rope);
  DI_CHECK_MSG(f.block == p.block && f.row_bytes == p.row_bytes, "an unpack launch's row layout matches no cache row format");
  return f;
}

// The packed groups' rows decoded (unpack_kv_row), [rows from packed[0].first_row on, head_dim].
[[maybe_unused]] std::vector<float> decode_packed_groups(const AttentionLaunch& p) {
  std::vector<float> decoded;
  for (int g = 0; g < p.n_packed; ++g) {
    const AttentionPackedRows& r = p.packed[g];
    DI_CHECK_MSG(r.first_row == p.packed[0].first_row + int64_t(decoded.size()) / p.head_dim, "attention: packed groups out of order");
    UnpackRowsLaunch u;
    u.kind = r.kind;
    u.n_values = p.head_dim;
    u.n_rope = r.n_rope;
    u.block = r.block;
    u.row_bytes = r.row_bytes;
    const KvRowFormat f = format_of(u);
    decoded.resize(decoded.size() + size_t(r.n_rows * p.head_dim));
    float* out = decoded.data() + decoded.size() - size_t(r.n_rows * p.head_dim);
    for (int64_t i = 0; i < r.n_rows; ++i) unpack_kv_row(f, r.bytes + (r.slots ? r.slots[i] : i) * r.row_bytes, out + i * p.head_dim);
  }
  return decoded;
}

[[maybe_unused]] void attention_now(const AttentionLaunch& p) {
  std::vector<const float*> slots(size_t(p.n_slots));
  const std::vector<float> packed = decode_packed_groups(p);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t j = 0; j < p.n_slots; ++j) {
      const int32_t r = p.slot_row[t * p.n_slots + j];
      const bool in_packed = p.n_packed > 0 && r >= p.packed[0].first_row;
      slots[size_t(j)] = r < 0 ? nullptr : in_packed ? &packed[size_t((r - p.packed[0].first_row) * p.head_dim)] : p.rows + int64_t(r) * p.head_dim;
    }
    SparseAttentionParams a;
    a.q = p.q + t * p.n_heads * p.head_dim;
    a.n_heads = p.n_heads;
    a.head_dim = p.head_dim;
    a.slots = slots.data();
    a.n_slots = p.n_slots;
    a.sink = p.sink;
    a.softmax_scale = p.softmax_scale;
    a.block_running_max = p.block_running_max;
    a.out = p.out + t * p.n_heads * p.head_dim;
    (p.head_dim % 64 == 0 ? device_ops() : reference()).sparse_attention(a);
  }
}

// The FP8-operand linear's prepass (kernels.h): per (token, x block) the smallest power of two s with
// amax / s <= 448 (never below 2^-126), and the e4m3 codes of x / s (round to nearest, saturating).
[[maybe_unused]] void fp8_codes_now(const LinearLaunch& p) {
  const int64_t xb = p.x_e4m3_block, n_xb = (p.k_pad + xb - 1) / xb;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t b = 0; b < n_xb; ++b) {
      const int64_t k0 = b * xb, k1 = std::min(p.k_pad, k0 + xb);
      const float* x = p.x + t * p.k_pad;
      double amax = 0;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(double(x[k])));
      const double s = amax > 0 ? std::max(pow2_scale_at_least(amax, 448.0), 0x1p-126) : 1.0;
      for (int64_t k = k0; k < k1; ++k) p.x_codes[t * p.k_pad + k] = e4m3_code(e4m3_round(double(x[k]) / s));
      p.x_scales[t * n_xb + b] = float(s);
    }
  }
}

// Its main kernel: per 32-wide step the step's exact sum of code products rounded to fp32 (where the tensor
// core rounds in its own way), then acc = fmaf(p, sx * sw, acc), then the epilogue.
[[maybe_unused]] void fp8_linear_now(const LinearLaunch& p) {
  static const std::vector<double> e4m3 = [] {  // every code's value: the inner loop below is this test's cost
    std::vector<double> v(256);
    for (int c = 0; c < 256; ++c) v[size_t(c)] = e4m3_to_float(uint8_t(c));
    return v;
  }();
  const int64_t n_xb = (p.k_pad + p.x_e4m3_block - 1) / p.x_e4m3_block;
  std::vector<double> w(size_t(p.k_pad));
  std::vector<float> sw(size_t(p.k_pad / 32));
  for (int64_t n = 0; n < p.n_rows; ++n) {
    const int64_t row = p.row_begin + n;
    const uint8_t* r = p.w + row * p.row_pitch;
    for (int64_t k = 0; k < p.k_pad; ++k) {
      w[size_t(k)] = p.kind == WeightKind::kFp8 ? double(e4m3_to_float(r[k])) : double(kE2M1Values[(k % 2) ? r[k / 2] >> 4 : r[k / 2] & 15]);
    }
    for (int64_t j = 0; j < p.k_pad / 32; ++j) {
      const uint8_t code = p.kind == WeightKind::kFp8 ? p.scale[(row / p.block) * p.scale_pitch + std::min(32 * j / p.block, p.scale_pitch - 1)]
                                                      : p.scale[row * p.scale_pitch + std::min(j, p.scale_pitch - 1)];
      sw[size_t(j)] = e8m0_to_float(code);
    }
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const uint8_t* xq = p.x_codes + t * p.k_pad;
      float acc = 0.0f;
      for (int64_t j = 0; j < p.k_pad / 32; ++j) {
        double step = 0;
        for (int64_t k = 32 * j; k < 32 * j + 32; ++k) step += e4m3[xq[k]] * w[size_t(k)];
        const float sx = p.x_scales[t * n_xb + 32 * j / p.x_e4m3_block];
        acc = std::fmaf(float(step), sx * sw[size_t(j)], acc);
      }
      const float bias = p.bias ? p.bias[t * p.n_rows + n] : 0.0f;
      p.out[t * p.n_rows + n] = apply_epilogue(Epilogue(int(p.epilogue)), double(acc), bias);
    }
  }
}

}  // namespace

// One group per .cu file of src/backend/cuda that defines these launchers: `cuda_device_emulated_tests` compiles
// some of those files for real (tests/cuda_device_emulation) and defines DEEPINFER_REAL_KERNELS_<FILE> for each,
// so that only the launchers of the files it does not compile come from here. A launcher of a new .cu file goes
// in a group of its own.
#ifndef DEEPINFER_REAL_KERNELS_LINEAR_KERNELS  // linear_kernels.cu
void launch_linear(const LinearLaunch& p, cudaStream_t stream) { queue_linear(p, stream); }
#endif

#ifndef DEEPINFER_REAL_KERNELS_LINEAR_MMA_KERNEL  // linear_mma_kernel.cu
// The emulation never splits over K: the backend then gives no partials scratch, as for an unsplit kernel.
int64_t linear_mma_partial_floats(const LinearLaunch&, MmaKernelChoice) { return 0; }
void launch_linear_mma(const LinearLaunch& p, cudaStream_t stream, MmaKernelChoice) { queue_linear(p, stream); }
void launch_linear_mma_registers(const LinearLaunch& p, cudaStream_t stream) { queue_linear(p, stream); }
void launch_linear_mma_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad, int64_t max_rows,
                               int64_t max_tokens, cudaStream_t stream, MmaKernelChoice) {
  queue_grouped(ops, n_ops, kind, k_pad, max_rows, max_tokens, stream);
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_LINEAR_MMA_STAGED_KERNEL  // linear_mma_staged_kernel.cu
void launch_linear_mma_staged(const LinearLaunch& p, cudaStream_t stream) { queue_linear(p, stream); }
int64_t linear_mma_staged_partial_floats(const LinearLaunch&) { return 0; }
void launch_linear_mma_staged_split(const LinearLaunch& p, cudaStream_t stream) { queue_linear(p, stream); }
void launch_linear_mma_staged_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad, int64_t max_rows,
                                      int64_t max_tokens, cudaStream_t stream) {
  queue_grouped(ops, n_ops, kind, k_pad, max_rows, max_tokens, stream);
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_LINEAR_FP8_KERNEL  // linear_fp8_kernel.cu
void launch_linear_fp8_codes(const LinearLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] { fp8_codes_now(p); });
}
void launch_linear_fp8_codes_grouped(const LinearLaunch* ops, int n_ops, int64_t max_items, cudaStream_t stream) {
  enqueue(stream, [=] {
    for (int i = 0; i < n_ops; ++i) {
      DI_CHECK_MSG(linear_fp8_code_items(ops[i]) <= max_items, "a grouped prepass launch covers fewer items than an op has");
      fp8_codes_now(ops[i]);
    }
  });
}
void launch_linear_fp8(const LinearLaunch& p, cudaStream_t stream, Fp8TileChoice) {
  DI_CHECK(p.x_codes && p.x_scales && linear_fp8_supports(p.kind, p.block, p.x_e4m3_block));
  enqueue(stream, [p] { fp8_linear_now(p); });
}
void launch_linear_fp8_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows, int64_t max_tokens,
                               cudaStream_t stream, Fp8TileChoice) {
  enqueue(stream, [=] {
    for (int i = 0; i < n_ops; ++i) {
      const LinearLaunch& op = ops[i];
      DI_CHECK_MSG(op.kind == kind && op.n_rows <= max_rows && op.n_tokens <= max_tokens,
                   "a grouped FP8 launch's descriptor disagrees with the launch");
      fp8_linear_now(op);
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_LINEAR_FP8_WGMMA_KERNEL  // linear_fp8_wgmma_kernel.cu
// The wgmma kernel's sequence is the fp8 kernel's but for the hardware that sums a step (kernels.h), which both
// emulations compute exactly and round once.
void launch_linear_fp8_wgmma(const LinearLaunch& p, cudaStream_t stream) { launch_linear_fp8(p, stream, Fp8TileChoice::kFastest); }
void launch_linear_fp8_wgmma_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows,
                                     int64_t max_tokens, cudaStream_t stream) {
  launch_linear_fp8_grouped(ops, n_ops, kind, max_rows, max_tokens, stream, Fp8TileChoice::kFastest);
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_HC_MIX_KERNEL  // hc_mix_kernel.cu
void launch_hc_mix(const HcMixLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] { device_ops().hc_mix({p.x, p.n_tokens, p.width, p.fn, p.n_mix, p.eps, p.out}); });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_MHC_KERNELS  // mhc_kernels.cu: the model's own host code for each step
void launch_hc_pre(const HcPreLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const int64_t D = p.dim;
    const std::vector<uint16_t> norm = p.norm ? bf16_bits(p.norm, D) : std::vector<uint16_t>{};
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      HcCoefficients c{};
      if (p.head_pre) {
        hc_head_pre(p.mixes + t * 4, p.scale, p.base, p.hc_eps, c.pre);
      } else if (p.mixes) {
        c = hc_split_sinkhorn(p.mixes + t * kHcCoefficientFloats, p.scale, p.base, p.sinkhorn_iters, p.hc_eps);
      }
      if (p.coeffs) std::memcpy(p.coeffs + t * kHcCoefficientFloats, &c, sizeof(c));
      float* u = p.u + t * p.u_stride;
      hc_collapse(p.h + t * 4 * D, p.collapse_pre ? p.collapse_pre + t * 4 : c.pre, D, u);
      rmsnorm(u, p.norm ? norm.data() : nullptr, D, p.eps, u);
      std::fill(u + D, u + p.u_stride, 0.0f);
    }
  });
}

void launch_hc_post(const HcPostLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      HcCoefficients c;
      std::memcpy(&c, p.coeffs + t * kHcCoefficientFloats, sizeof(c));
      hc_expand(p.h + t * 4 * p.dim, p.x + t * p.x_stride, c, p.dim, p.h_out + t * 4 * p.dim);
    }
  });
}
// dsv41.cpp's step 5 loop.
void launch_stream_tap(const StreamTapLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      for (int64_t d = 0; d < p.dim; ++d) {
        double sum = 0;
        for (int k = 0; k < 4; ++k) sum += p.h[(t * 4 + k) * p.dim + d];
        p.out[t * p.out_stride + d] = round_bf16(sum / 4.0);
      }
    }
  });
}
// dsv41.cpp's Engram update: ops.h's engram_gate on each copy.
void launch_engram_gate(const EngramGateLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const std::vector<uint16_t> q = bf16_bits(p.q_weight, 4 * p.dim), k = bf16_bits(p.k_weight, 4 * p.dim);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const float* kv = p.kv + t * 5 * p.dim;
      for (int c = 0; c < 4; ++c) {
        engram_gate(p.h + (t * 4 + c) * p.dim, &q[size_t(c * p.dim)], &k[size_t(c * p.dim)], kv + c * p.dim, kv + 4 * p.dim,
                    p.dim, p.eps);
      }
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_HEAD_ROPE_KERNEL  // head_rope_kernel.cu: the model's own host code
// Token t's heads copied to their place in out (r.out may be r.x), for the host's steps to work on there.
float* copied_heads(const HeadRows& r, int64_t t) {
  float* out = r.out + t * r.out_stride;
  std::memmove(out, r.x + t * r.x_stride, size_t(r.n_heads * r.head_dim) * 4);
  return out;
}

void launch_head_rope(const HeadRopeLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const HeadRows& r = p.rows;
    for (int64_t t = 0; t < r.n_tokens; ++t) {
      float* out = copied_heads(r, t);
      if (p.normalize) head_rms_normalize(out, r.n_heads, r.head_dim, p.eps);
      rope_rotate_heads(out + r.head_dim - r.rope_dim, r.n_heads, r.head_dim, r.cos_sin + t * r.rope_dim, r.rope_dim / 2, p.inverse);
    }
  });
}

void launch_index_query(const IndexQueryLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const HeadRows& r = p.rows;
    for (int64_t t = 0; t < r.n_tokens; ++t) {
      float* out = copied_heads(r, t);
      rope_rotate_heads(out + r.head_dim - r.rope_dim, r.n_heads, r.head_dim, r.cos_sin + t * r.rope_dim, r.rope_dim / 2, false);
      for (int64_t h = 0; h < r.n_heads; ++h) {
        float* head = out + h * r.head_dim;
        if (p.v41) {
          qdq_fp4_pow2_v41(head, r.head_dim, 32);
        } else {
          hadamard_128(head);
          qdq_fp4(head, r.head_dim, 32);
        }
      }
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_ATTENTION_KERNELS  // attention_kernels.cu
void launch_sparse_attention(const AttentionLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] { attention_now(p); });
}
// The real kernels' shared memory grows with the slots (attention_kernels.cu); here a size that fits the
// emulated device's limit for every slot count the tests use.
size_t sparse_attention_shared_bytes(int64_t n_slots, bool packed_rows) { return size_t(n_slots) * (packed_rows ? 12 : 4); }
size_t sparse_attention_split_shared_bytes(int64_t n_slots, bool packed_rows) { return size_t(n_slots) * (packed_rows ? 40 : 32); }
void launch_sparse_attention_split(const AttentionLaunch& p, float* scores, cudaStream_t stream) {
  enqueue(stream, [p, scores] {
    // The scores scratch must hold [n_tokens, n_heads, n_slots] floats: touched end to end.
    std::memset(scores, 0, size_t(p.n_tokens * p.n_heads * p.n_slots) * sizeof(float));
    attention_now(p);
  });
}

size_t index_scores_shared_bytes(int64_t n_heads, int64_t dim, bool packed_keys) {
  return size_t(n_heads * (dim + 1) + (packed_keys ? 32 * dim : 0)) * sizeof(float);
}
void launch_index_scores(const IndexScoreLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    std::vector<float> decoded;  // packed keys: the token's, as unpack_kv_row gives them
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      IndexScoreParams s;
      s.q = p.q + t * p.n_heads * p.dim;
      s.weights = p.weights + t * p.n_heads;
      s.n_heads = p.n_heads;
      s.dim = p.dim;
      const int64_t first_row = p.token_keys_at ? p.token_keys_at[t] : 0;
      s.n_keys = p.token_keys ? p.token_keys[t] : p.n_keys;
      DI_CHECK_MSG(s.n_keys <= p.n_keys, "an index-score token reads more keys than the launch's n_keys");
      if (p.key_slots) {
        const KvRowFormat f = kv_row_format(KvRowKind::kFp4Key, p.dim);
        DI_CHECK_MSG(f.row_bytes == p.key_row_bytes && f.block == p.key_block, "index scores: packed keys of another format");
        decoded.resize(size_t(s.n_keys * p.dim));
        for (int64_t j = 0; j < s.n_keys; ++j) {
          unpack_kv_row(f, p.packed_keys + p.key_slots[first_row + j] * p.key_row_bytes, &decoded[size_t(j * p.dim)]);
        }
        s.keys = decoded.data();
      } else {
        s.keys = p.keys + first_row * p.dim;
      }
      s.scores = p.scores + (p.token_scores_at ? p.token_scores_at[t] : t * p.n_keys);
      device_ops().index_scores(s);
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_INDEX_SCORES_MMA_KERNEL  // index_scores_mma_kernel.cu: the same op as launch_index_scores
size_t index_scores_mma_shared_bytes(int64_t n_heads, int64_t dim) { return index_scores_shared_bytes(n_heads, dim, false); }
void launch_index_scores_mma(const IndexScoreLaunch& p, cudaStream_t stream) { launch_index_scores(p, stream); }
#endif

#ifndef DEEPINFER_REAL_KERNELS_UNPACK_ROWS_KERNEL  // unpack_rows_kernel.cu
void launch_unpack_rows(const UnpackRowsLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const KvRowFormat f = format_of(p);
    for (int64_t i = 0; i < p.n_rows; ++i) {
      const int64_t at = p.row_slots ? p.row_slots[i] : i;
      unpack_kv_row(f, p.rows + at * p.row_bytes, p.out + i * p.n_values);
    }
  });
}

void launch_scatter_rows(const uint8_t* src, int64_t n_rows, int64_t row_bytes, const int64_t* slots, uint8_t* arena,
                         cudaStream_t stream) {
  DI_CHECK_MSG(row_bytes % 4 == 0, "launch_scatter_rows: rows must be whole 4-byte words");
  enqueue(stream, [=] {
    for (int64_t i = 0; i < n_rows; ++i) std::memcpy(arena + slots[i] * row_bytes, src + i * row_bytes, size_t(row_bytes));
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_MOE_KERNELS  // moe_kernels.cu: the model's own host code for each step
namespace {
void act_qdq_now(float* row, int64_t width, int64_t block, ActQdqRule rule) {
  if (rule == ActQdqRule::kV41) qdq_fp8_v41(row, width, block);
  else qdq_fp8(row, width, block);
}
}  // namespace

void launch_act_qdq(const ActQdqLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const std::vector<uint16_t> norm = p.norm ? bf16_bits(p.norm, p.width) : std::vector<uint16_t>{};
    for (int64_t r = 0; r < p.n_rows; ++r) {
      float* out = p.out + r * p.out_stride;
      std::memmove(out, p.x + r * p.x_stride, size_t(p.width) * 4);
      std::fill(out + p.width, out + p.out_pad, 0.0f);
      if (p.rmsnorm) {
        rmsnorm(out, p.norm ? norm.data() : nullptr, p.width, p.eps, out);
        std::copy_n(out, p.width, p.normed + r * p.normed_stride);
      }
      act_qdq_now(out, p.width, p.block, p.rule);
    }
  });
}

// engram.cpp's engram_table_row on each token's gathered bytes, then qdq_fp8_v41.
void launch_engram_rows(const EngramRowsLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const EngramTable token_rows{.codes = p.codes + t * p.width, .scales = p.scales + t * (p.width / 32), .rows = 1,
                                   .dim = p.width};
      float* x = p.x + t * p.x_stride;
      engram_table_row(token_rows, 0, x);
      act_qdq_now(x, p.width, p.qdq_block, ActQdqRule::kV41);
    }
  });
}

void launch_swiglu_qdq(const SwigluQdqLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t r = 0; r < p.n_rows; ++r) {
      float* out = p.out + r * p.out_stride;
      swiglu(p.a + r * p.in_stride, p.b + r * p.in_stride, p.width, p.limit, p.row_weight ? double(p.row_weight[r]) : 1.0, out);
      std::fill(out + p.width, out + p.out_pad, 0.0f);
      act_qdq_now(out, p.width, p.block, p.rule);
    }
  });
}

void launch_moe_route(const MoeRouteLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    const int64_t T = p.n_tokens, E = p.n_experts, K = p.top_k;
    std::vector<int64_t> chosen(static_cast<size_t>(T * K)), hash_row(static_cast<size_t>(K)), order(static_cast<size_t>(E));
    std::vector<double> weight(size_t(T * K));
    for (int64_t t = 0; t < T; ++t) {
      if (!p.bias) std::copy_n(p.hash_chosen + t * K, K, hash_row.begin());
      route_token(p.scores + t * E, p.bias, p.bias ? nullptr : hash_row.data(), E, K, p.v41, p.route_scale,
                  &chosen[size_t(t * K)], &weight[size_t(t * K)], order.data());
    }
    int64_t row = 0, slot = 0;
    for (int64_t e = 0; e < E; ++e) {  // moe.cpp's rows: by expert, then token
      const int64_t first = row;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < K; ++i) {
          if (chosen[size_t(t * K + i)] != e) continue;
          int64_t rank = 0;
          for (int64_t k = 0; k < K; ++k) rank += chosen[size_t(t * K + k)] < e || (chosen[size_t(t * K + k)] == e && k < i);
          p.row_token[row] = int32_t(t);
          p.row_weight[row] = float(weight[size_t(t * K + i)]);
          p.token_rows[t * K + rank] = int32_t(row);
          ++row;
        }
      }
      if (row > first) set_moe_slot(p, slot++, e, first, row - first);
    }
    for (; slot < p.n_slots; ++slot) set_moe_slot(p, slot, 0, 0, 0);
  });
}

void launch_gather_rows(const float* src, int64_t src_stride, const int32_t* index, int64_t n_rows, int64_t width,
                        float* dst, int64_t dst_stride, cudaStream_t stream) {
  enqueue(stream, [=] {
    for (int64_t r = 0; r < n_rows; ++r) std::memcpy(dst + r * dst_stride, src + int64_t(index[r]) * src_stride, size_t(width) * 4);
  });
}

void launch_moe_combine(const MoeCombineLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      for (int64_t i = 0; i < p.dim; ++i) {
        double acc = 0.0;
        for (int64_t k = 0; k < p.top_k; ++k) acc += p.y[int64_t(p.token_rows[t * p.top_k + k]) * p.dim + i];
        p.out[t * p.dim + i] = round_bf16(acc + p.shared_y[t * p.dim + i]);
      }
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_INDEX_SELECT_KERNEL  // index_select_kernel.cu
size_t index_select_shared_bytes(int64_t max_keys, int64_t block_size) {
  return block_size > 0 ? size_t(((max_keys + block_size - 1) / block_size + 31) / 32) * 4 : 0;
}
// The model's own selection: the masked scores, then partial_sort by (score desc, index asc).
void launch_index_select(const IndexSelectLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const int64_t n = p.token_keys[t], k = p.token_select[t];
      DI_CHECK_MSG(k <= n && k <= kIndexSelectMax && n <= p.max_keys, "index select: a token selects more keys than it has");
      std::vector<float> s(p.scores + p.token_scores_at[t], p.scores + p.token_scores_at[t] + n);
      if (p.keep_blocks && p.token_keep[t] >= 0) {
        std::vector<char> keep(size_t((n + p.block_size - 1) / p.block_size), 0);
        for (int64_t i = 0; i < p.token_keep[t]; ++i) {
          const int64_t b = p.keep_blocks[p.token_keep_at[t] + i];
          if (b >= 0 && b < int64_t(keep.size())) keep[size_t(b)] = 1;
        }
        for (int64_t j = 0; j < n; ++j) if (!keep[size_t(j / p.block_size)]) s[size_t(j)] = -INFINITY;
      }
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) order[size_t(j)] = j;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return s[size_t(a)] != s[size_t(b)] ? s[size_t(a)] > s[size_t(b)] : a < b;
      });
      for (int64_t r = 0; r < k; ++r) p.selected[p.token_selected_at[t] + r] = int32_t(order[size_t(r)]);
    }
  });
}
// The selections' rows in order, or sorted ascending.
void launch_selected_slots(const SelectedSlotsLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const int64_t* words = p.token_words + t * kSelectedSlotsWords;
      DI_CHECK_MSG(words[0] <= kIndexSelectMax, "selected slots: a token selects more rows than kIndexSelectMax");
      std::vector<int32_t> s(p.selected + words[1], p.selected + words[1] + words[0]);
      if (words[5]) std::sort(s.begin(), s.end());
      for (size_t i = 0; i < s.size(); ++i) {
        p.slot_row[t * p.n_slots + words[2] + int64_t(i)] = s[i] >= 0 && s[i] < words[4] ? p.tables[words[3] + s[i]] : -1;
      }
    }
  });
}
void launch_candidate_blocks(const CandidateBlocksLaunch& p, cudaStream_t stream) {
  enqueue(stream, [p] {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const int64_t n = p.token_keys[t], n_blocks = (n + p.block_size - 1) / p.block_size;
      DI_CHECK_MSG(n_blocks <= p.max_blocks, "candidate blocks: a token has more blocks than the launch's most");
      const float* scores = p.scores + p.token_scores_at[t];
      float* out = p.block_scores + p.token_blocks_at[t];
      for (int64_t b = 0; b < n_blocks; ++b) out[b] = -INFINITY;
      for (int64_t j = 0; j < n; ++j) out[j / p.block_size] = std::max(out[j / p.block_size], scores[j]);
      if (n_blocks) out[n_blocks - 1] = INFINITY;
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_ROW_DRAW_KERNEL  // row_draw_kernel.cu: the host's draw_token
void launch_row_draws(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int32_t* out, double* totals, void* /*split_scratch: one path here*/, cudaStream_t stream) {
  DI_CHECK(width > 0 && width <= kRowDrawMaxWidth && stride >= width);
  enqueue(stream, [=] {
    TemperatureWeights weights;
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* row = x + r * stride;
      if (draws && draws[r].skip) continue;
      if (draws && draws[r].nucleus && draws[r].temperature > 0.0f) {  // the total, or the argmax
        const bool finite = weights.weigh(row, width, draws[r].temperature);
        if (finite) totals[r] = weights.total();
        out[r] = finite ? -1 : int32_t(argmax(row, width));
        continue;
      }
      const bool sampled = draws && draws[r].top_k == 0;  // (a top-k row's: the argmax)
      const TokenDraw draw = sampled ? TokenDraw{.temperature = draws[r].temperature, .uniform = draws[r].uniform} : TokenDraw{};
      out[r] = draw_token(row, width, draw);
    }
  });
}
void launch_logit_edits(float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceLogitEdit* edits,
                        const int32_t* at, float* originals, cudaStream_t stream) {
  DI_CHECK(width > 0 && stride >= width);
  enqueue(stream, [=] {
    for (int64_t r = 0; r < n_rows; ++r) {
      std::vector<LogitEdit> row_edits;
      for (int32_t e = at[r]; e < at[r + 1]; ++e) {
        row_edits.push_back({edits[e].id, edits[e].divide, edits[e].subtract});
        if (originals && edits[e].id >= 0 && edits[e].id < width) originals[e] = x[r * stride + edits[e].id];
      }
      apply_edits(x + r * stride, width, row_edits);
    }
  });
}
void launch_logit_masks(float* x, int64_t n_rows, int64_t width, int64_t stride, const uint32_t* bits,
                        const int32_t* mask_of, cudaStream_t stream) {
  DI_CHECK(width > 0 && stride >= width);
  enqueue(stream, [=] {
    const int64_t words = (width + 31) / 32;
    std::vector<uint8_t> allowed(static_cast<size_t>(width));
    for (int64_t r = 0; r < n_rows; ++r) {
      if (mask_of[r] < 0) continue;
      for (int64_t i = 0; i < width; ++i) allowed[size_t(i)] = (bits[mask_of[r] * words + i / 32] >> (i % 32)) & 1u;
      apply_mask(x + r * stride, width, allowed);
    }
  });
}
void launch_drawn_logits(const float* x, int64_t n_rows, int64_t stride, const DeviceTokenDraw* asks, const int32_t* drawn,
                         const DeviceTokenDraw* draws, const DeviceDrawCandidate* candidates, float* drawn_logit,
                         float* candidate_logits, cudaStream_t stream) {
  DI_CHECK(!draws || candidates);
  enqueue(stream, [=] {
    for (int64_t r = 0; r < n_rows; ++r) {
      if (asks[r].skip) continue;
      if (drawn[r] >= 0) drawn_logit[r] = x[r * stride + drawn[r]];
      for (int32_t j = 0; draws && j < draws[r].top_k; ++j) {
        const int32_t at = draws[r].candidates_at + j;
        candidate_logits[at] = x[r * stride + candidates[at].id];
      }
    }
  });
}
#endif

#ifndef DEEPINFER_REAL_KERNELS_ROW_TOP_K_KERNEL  // row_top_k_kernel.cu: the host's top_k_candidates
void launch_row_top_k(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int max_k, DeviceDrawCandidate* out, void* /*split_scratch: one path here*/, cudaStream_t stream) {
  DI_CHECK(max_k > 0 && max_k <= kRowTopKMax && max_k <= width && stride >= width);
  enqueue(stream, [=] {
    std::vector<DrawCandidate> candidates;
    for (int64_t r = 0; r < n_rows; ++r) {
      if (draws[r].top_k <= 0) continue;
      top_k_candidates(x + r * stride, width, draws[r].temperature, draws[r].top_k, candidates);
      for (int j = 0; j < draws[r].top_k; ++j) {
        out[draws[r].candidates_at + j] = {candidates[size_t(j)].first == 0.0f ? 0.0f : candidates[size_t(j)].first, candidates[size_t(j)].second};
      }
    }
  });
}
#endif

}  // namespace deepinfer::cuda
