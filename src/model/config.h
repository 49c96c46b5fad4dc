// ModelConfig: config.json (HF field names, spec §1.1) parsed once into an immutable, validated struct.
// Nothing writes to it after parse_model_config returns; derived runtime plans live elsewhere.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace deepinfer {

enum class Architecture { kDeepseekV4 };

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
  std::vector<int> compress_ratios;  // n_layers + n_mtp_layers entries

  int nope_head_dim() const { return head_dim - rope_head_dim; }
  int compress_ratio(int layer) const { return compress_ratios[size_t(layer)]; }
};

// Reads and validates <dir>/config.json. Errors name the file and the field.
Result<ModelConfig> load_model_config(const std::string& model_dir);
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source_name);

}  // namespace deepinfer
