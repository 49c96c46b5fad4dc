// Weight binding for the V4 family: the exact list of tensors a config implies (names, dtypes, shapes as
// the checkpoint stores them, spec §4.2) and typed views into the mapped checkpoint. Binding is strict:
// a missing tensor, an unexpected one, or a wrong dtype/shape is an error naming the tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "core/status.h"
#include "format/safetensors.h"
#include "model/config.h"

namespace deepinfer {

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Every tensor a checkpoint with this config must hold, in a stable order.
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

// A linear layer's weight in stored form: y[n] = sum_k x[k] * W[n, k].
//   kBF16:   data = bf16 [n_out, n_in]
//   kF8E4M3: data = e4m3 [n_out, n_in], scale = e8m0 [ceil(n_out/B), ceil(n_in/B)], B = block
//   kI8 (fp4 e2m1, two codes per byte, low nibble first): data [n_out, n_in/2], scale = e8m0 [n_out, n_in/32]
struct LinearWeight {
  DType dtype = DType::kBF16;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
  int block = 0;  // e4m3 scale block edge
  // Bytes of one stored row (rows are contiguous): bf16 2 per value, e4m3 1, packed e2m1 half; 0 otherwise.
  int64_t row_bytes() const {
    return dtype == DType::kBF16 ? 2 * n_in : dtype == DType::kF8E4M3 ? n_in : dtype == DType::kI8 ? n_in / 2 : 0;
  }
};

struct ExpertWeights {
  LinearWeight w1, w2, w3;
};

struct CompressorWeights {
  LinearWeight wkv, wgate;     // bf16 [coff*d, dim] (V4.1 ratio 1: no wgate)
  const float* ape = nullptr;  // [ratio, coff*d] (V4 only)
  const uint16_t* norm = nullptr;  // bf16 [d]
};

// V4.1 Engram table: e4m3 rows with one e8m0 scale per 32 values of a row (spec §7.6). Served from the
// mapping: only the rows a token hashes to are ever touched.
struct EngramTable {
  const uint8_t* codes = nullptr;   // [rows, dim]
  const uint8_t* scales = nullptr;  // [rows, dim / 32]
  int64_t rows = 0;
  int64_t dim = 0;
};

struct EngramWeights {
  EngramTable table;
  LinearWeight wkv;                 // fp8 [5 * dim_model, n_ngram_sizes * heads * head_dim]
  const uint16_t* q_weight = nullptr;  // bf16 [4, dim_model]
  const uint16_t* k_weight = nullptr;  // bf16 [4, dim_model]
};

struct BlockWeights {
  int compress_ratio = 0;
  bool hash_routed = false;
  const float* hc_attn_fn = nullptr;  const float* hc_attn_base = nullptr;  const float* hc_attn_scale = nullptr;
  const float* hc_ffn_fn = nullptr;   const float* hc_ffn_base = nullptr;   const float* hc_ffn_scale = nullptr;
  const uint16_t* attn_norm = nullptr;
  const uint16_t* ffn_norm = nullptr;
  // attention
  LinearWeight wq_a, wq_b, wkv, wo_a, wo_b;
  const uint16_t* q_norm = nullptr;
  const uint16_t* kv_norm = nullptr;
  const float* attn_sink = nullptr;
  CompressorWeights compressor;          // ratio != 0
  CompressorWeights index_compressor;    // ratio == 4
  LinearWeight index_wq_b;               // V4 ratio 4; V4.1 index sources
  LinearWeight index_weights_proj;       // bf16 [index_n_heads, dim]
  LinearWeight index_wk;                 // V4.1 KV sources: bf16 [index_head_dim, head_dim]
  const uint16_t* index_k_norm = nullptr;  // V4.1 KV sources: bf16 [index_head_dim]
  bool has_engram = false;               // V4.1
  EngramWeights engram;
  // MoE
  LinearWeight gate;                     // bf16 [n_experts, dim]
  const float* gate_bias = nullptr;      // score-routed layers
  const float* gate_bias_vl = nullptr;   // V4.1: the bias used on image tokens
  const int64_t* tid2eid = nullptr;      // hash layers [vocab, n_activated]
  std::vector<ExpertWeights> experts;
  int n_activated_experts = 0;           // top-k of this block's router
  ExpertWeights shared;
};

struct HeadWeights {
  const float* hc_fn = nullptr;    // [4, 4*dim]
  const float* hc_base = nullptr;  // [4]
  const float* hc_scale = nullptr; // [1]
  const uint16_t* norm = nullptr;  // bf16 [dim]
};

struct MtpWeights {
  const uint16_t* enorm = nullptr;
  const uint16_t* hnorm = nullptr;
  LinearWeight e_proj, h_proj;
  BlockWeights block;
  HeadWeights head;
};

// V4.1 DSpark extras (spec §7.8): stage 0 projects the tapped main stream, the last stage holds the heads.
struct DsparkWeights {
  LinearWeight main_proj;                // fp8 [dim, n_taps * dim]
  const uint16_t* main_norm = nullptr;
  const uint16_t* norm = nullptr;        // last stage's final norm
  const uint16_t* markov_embed = nullptr;  // bf16 [vocab, rank]
  LinearWeight markov_head;              // bf16 [vocab, rank]
  LinearWeight confidence_proj;          // bf16 [1, dim + rank]
};

struct ModelWeights {
  const uint16_t* embed = nullptr;  // bf16 [vocab, dim]
  LinearWeight head_proj;           // head.weight bf16 [vocab, dim]
  HeadWeights head;
  std::vector<BlockWeights> layers;
  std::vector<MtpWeights> mtp;            // V4: MTP layers; V4.1: the DSpark stages (block only)
  DsparkWeights dspark;                   // V4.1
  // safetensors does not align tensors: a typed tensor whose bytes sit at a misaligned address is copied
  // here once at bind time (small fp32/int64 tensors in practice), so every typed pointer above is aligned.
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies;
};

// Binds every expected tensor; errors name the tensor and what is wrong. Extra tensors are errors too.
Result<ModelWeights> bind_weights(const ModelConfig& config, const Checkpoint& checkpoint);

}  // namespace deepinfer
