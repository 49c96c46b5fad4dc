// ModelConfig: config.json (HF field names, spec §1.1) parsed once into an immutable, validated struct.
// Nothing writes to it after parse_model_config returns; derived runtime plans live elsewhere.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace deepinfer {

enum class Architecture { kDeepseekV4, kDeepseekV41 };

struct RopeConfig {
  double theta = 10000;           // window-only layers
  double compress_theta = 160000; // compressed layers (with YaRN)
  double yarn_factor = 16;
  int64_t yarn_original_max_pos = 65536;
  double beta_fast = 32;
  double beta_slow = 1;
};

struct ModelConfig {
  Architecture arch = Architecture::kDeepseekV4;
  int vocab_size = 0;
  int dim = 0;                    // hidden_size
  int n_layers = 0;               // num_hidden_layers (main layers; MTP excluded)
  int n_mtp_layers = 0;           // num_nextn_predict_layers
  int n_heads = 0;
  int head_dim = 0;               // 512
  int rope_head_dim = 0;          // 64 (the last dims of a head)
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  int window_size = 0;            // sliding_window
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int n_routed_experts = 0;
  int n_activated_experts = 0;    // num_experts_per_tok
  int n_shared_experts = 0;
  int moe_inter_dim = 0;
  int n_hash_layers = 0;
  double route_scale = 1.0;
  double swiglu_limit = 0.0;
  double norm_eps = 1e-6;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  int weight_block = 128;         // quantization_config.weight_block_size
  int bos_token_id = 0;
  int eos_token_id = 1;
  RopeConfig rope;
  std::vector<int> compress_ratios;  // n_layers + n_mtp_layers entries (V4.1: which cache a layer reads)
  int act_block = 128;            // activation QDQ block before fp8/fp4 GEMMs (V4 128, V4.1 32)

  // V4.1 only (spec §5.1): cache sources, two-level selection, Engram, DSpark, images.
  std::vector<int> kv_source_layers;
  std::vector<int> index_source_layers;
  int candidate_source_layer = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;
  std::vector<int> engram_layers;
  std::vector<int64_t> engram_num_embeddings;  // table rows per Engram layer
  int engram_max_ngram = 0;
  int64_t engram_vocab_size = 0;
  int engram_n_heads = 0;
  int engram_head_dim = 0;
  int engram_pad_token_id = 0;
  int engram_compressed_vocab_size = 0;
  int dspark_block_size = 0;
  int dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layers;
  int dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_n_activated_experts = 0;
  int image_token_id = -1;
  int vision_layers = 0;

  bool is_v41() const { return arch == Architecture::kDeepseekV41; }
  // The eps constants as the golden contracts use them: V4 takes the fp32 value nearest to the config's
  // number, V4.1 takes the number itself (1e-20 would round to an fp32 subnormal-free value anyway).
  double norm_eps_value() const { return is_v41() ? norm_eps : double(float(norm_eps)); }
  double hc_eps_value() const { return is_v41() ? hc_eps : double(float(hc_eps)); }
  bool is_kv_source(int layer) const;
  bool is_index_source(int layer) const;
  bool is_engram_layer(int layer) const;
  int engram_index(int layer) const;  // position in engram_layers, -1 if none

  int nope_head_dim() const { return head_dim - rope_head_dim; }
  int compress_ratio(int layer) const { return compress_ratios[size_t(layer)]; }
};

// Reads and validates <dir>/config.json. Errors name the file and the field.
Result<ModelConfig> load_model_config(const std::string& model_dir);
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source_name);

}  // namespace deepinfer
