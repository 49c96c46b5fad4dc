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
};

struct ExpertWeights {
  LinearWeight w1, w2, w3;
};

struct CompressorWeights {
  LinearWeight wkv, wgate;     // bf16 [coff*d, dim]
  const float* ape = nullptr;  // [ratio, coff*d]
  const uint16_t* norm = nullptr;  // bf16 [d]
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
  LinearWeight index_wq_b;               // ratio == 4
  LinearWeight index_weights_proj;       // ratio == 4, bf16 [index_n_heads, dim]
  // MoE
  LinearWeight gate;                     // bf16 [n_experts, dim]
  const float* gate_bias = nullptr;      // score-routed layers
  const int64_t* tid2eid = nullptr;      // hash layers [vocab, n_activated]
  std::vector<ExpertWeights> experts;
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

struct ModelWeights {
  const uint16_t* embed = nullptr;  // bf16 [vocab, dim]
  LinearWeight head_proj;           // head.weight bf16 [vocab, dim]
  HeadWeights head;
  std::vector<BlockWeights> layers;
  std::vector<MtpWeights> mtp;
};

// Binds every expected tensor; errors name the tensor and what is wrong. Extra tensors are errors too.
Result<ModelWeights> bind_weights(const ModelConfig& config, const Checkpoint& checkpoint);

}  // namespace deepinfer
