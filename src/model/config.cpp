// config.json → ModelConfig with strict field checks (spec §1.1). Unknown architectures are refused.
#include "model/config.h"

#include <fstream>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deepinfer {

using nlohmann::json;

namespace {

template <typename T>
bool is_integer_of(const json& v) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
  const int64_t x = v.get<int64_t>();
  return x >= int64_t(std::numeric_limits<T>::min()) && x <= int64_t(std::numeric_limits<T>::max());
}

template <typename T>
bool has_type(const json& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_integral_v<T>) {
    return is_integer_of<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else {
    static_assert(std::is_same_v<T, std::vector<int>>);
    if (!v.is_array()) return false;
    for (const json& e : v) if (!is_integer_of<int>(e)) return false;
    return true;
  }
}

struct Reader {
  const json& j;
  const std::string& source;
  std::string error;

  template <typename T>
  void get(const char* field, T* out, bool required = true) {
    if (!error.empty()) return;
    if (!j.contains(field) || j[field].is_null()) {
      if (required) error = source + ": missing field '" + field + "'";
      return;
    }
    // Strict types: nlohmann would silently truncate 256.5 or true into an int field.
    if (!has_type<T>(j[field])) {
      error = source + ": field '" + field + "' has the wrong type (" + j[field].dump() + ")";
      return;
    }
    *out = j[field].get<T>();
  }
};

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return Status::error(source + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) return Status::error(source + ": not a JSON object");
  std::string model_type;
  if (j.contains("model_type") && j["model_type"].is_string()) model_type = j["model_type"].get<std::string>();
  if (model_type != "deepseek_v4") {
    return Status::error(source + ": model_type '" + model_type + "' is not supported (expected deepseek_v4)");
  }
  ModelConfig c;
  Reader r{j, source, ""};
  r.get("vocab_size", &c.vocab_size);
  r.get("hidden_size", &c.dim);
  r.get("num_hidden_layers", &c.n_layers);
  r.get("num_nextn_predict_layers", &c.n_mtp_layers, false);
  r.get("num_attention_heads", &c.n_heads);
  r.get("head_dim", &c.head_dim);
  r.get("qk_rope_head_dim", &c.rope_head_dim);
  r.get("q_lora_rank", &c.q_lora_rank);
  r.get("o_groups", &c.o_groups);
  r.get("o_lora_rank", &c.o_lora_rank);
  r.get("sliding_window", &c.window_size);
  r.get("index_n_heads", &c.index_n_heads);
  r.get("index_head_dim", &c.index_head_dim);
  r.get("index_topk", &c.index_topk);
  r.get("n_routed_experts", &c.n_routed_experts);
  r.get("num_experts_per_tok", &c.n_activated_experts);
  r.get("n_shared_experts", &c.n_shared_experts);
  r.get("moe_intermediate_size", &c.moe_inter_dim);
  r.get("num_hash_layers", &c.n_hash_layers);
  r.get("routed_scaling_factor", &c.route_scale);
  r.get("swiglu_limit", &c.swiglu_limit);
  r.get("rms_norm_eps", &c.norm_eps);
  r.get("hc_mult", &c.hc_mult);
  r.get("hc_sinkhorn_iters", &c.hc_sinkhorn_iters);
  r.get("hc_eps", &c.hc_eps);
  r.get("bos_token_id", &c.bos_token_id, false);
  r.get("eos_token_id", &c.eos_token_id, false);
  r.get("rope_theta", &c.rope.theta);
  r.get("compress_rope_theta", &c.rope.compress_theta);
  r.get("compress_ratios", &c.compress_ratios);
  if (!r.error.empty()) return Status::error(r.error);

  std::string scoring, act;
  r.get("scoring_func", &scoring);
  r.get("hidden_act", &act, false);
  if (!r.error.empty()) return Status::error(r.error);
  if (scoring != "sqrtsoftplus") return Status::error(source + ": scoring_func '" + scoring + "' is not supported (expected sqrtsoftplus)");

  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    Reader rs{j["rope_scaling"], source, ""};
    rs.get("factor", &c.rope.yarn_factor);
    rs.get("original_max_position_embeddings", &c.rope.yarn_original_max_pos);
    rs.get("beta_fast", &c.rope.beta_fast);
    rs.get("beta_slow", &c.rope.beta_slow);
    if (!rs.error.empty()) return Status::error(rs.error + " (in rope_scaling)");
  } else {
    return Status::error(source + ": missing object 'rope_scaling' (V4 uses YaRN on compressed layers)");
  }
  if (j.contains("quantization_config")) {
    const json& q = j["quantization_config"];
    if (q.is_object() && q.contains("weight_block_size")) {
      const json& b = q["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !is_integer_of<int>(b[0]) || !is_integer_of<int>(b[1])) {
        return Status::error(source + ": quantization_config.weight_block_size must be two integers, got " + b.dump());
      }
      c.weight_block = b[0].get<int>();
      if (b[1].get<int>() != c.weight_block) {
        return Status::error(source + ": quantization_config.weight_block_size must be square");
      }
    }
  }

  auto bad = [&](const std::string& what) { return Status::error(source + ": " + what); };
  if (c.vocab_size <= 0 || c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0) return bad("vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive");
  if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 || c.head_dim <= c.rope_head_dim) return bad("qk_rope_head_dim must be even and below head_dim");
  if (c.nope_head_dim() % 64 != 0) return bad("head_dim - qk_rope_head_dim must be a multiple of 64 (fp8 KV blocks)");
  if (c.hc_mult != 4) return bad("hc_mult " + std::to_string(c.hc_mult) + " is not supported (V4 uses 4)");
  if (c.o_groups <= 0 || c.n_heads % c.o_groups) return bad("num_attention_heads must be a multiple of o_groups");
  if (c.index_head_dim != 128) return bad("index_head_dim must be 128 (Hadamard-128)");
  if (c.n_activated_experts <= 0 || c.n_activated_experts > c.n_routed_experts) return bad("num_experts_per_tok must be in 1..n_routed_experts");
  if (c.window_size <= 0) return bad("sliding_window must be positive");
  if (c.weight_block <= 0) return bad("weight_block_size must be positive");
  if (c.moe_inter_dim % 32 || c.dim % 32) return bad("hidden_size and moe_intermediate_size must be multiples of 32 (fp4 scale blocks)");
  if (c.compress_ratios.size() != size_t(c.n_layers + c.n_mtp_layers)) {
    return bad("compress_ratios has " + std::to_string(c.compress_ratios.size()) + " entries, expected num_hidden_layers + num_nextn_predict_layers = " +
               std::to_string(c.n_layers + c.n_mtp_layers));
  }
  for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
    const int r = c.compress_ratios[i];
    if (r != 0 && r != 4 && r != 128) return bad("compress_ratios[" + std::to_string(i) + "] = " + std::to_string(r) + " (V4 supports 0, 4, 128)");
    if (i >= size_t(c.n_layers) && r != 0) return bad("compress_ratios entry of the MTP layer must be 0");
  }
  if (c.n_hash_layers > c.n_layers) return bad("num_hash_layers exceeds num_hidden_layers");
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return Status::error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace deepinfer
