// config.json → ModelConfig with strict field checks (spec §1.1). Unknown architectures are refused.
#include "model/config.h"

#include <algorithm>
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
    using Element = typename T::value_type;
    static_assert(std::is_same_v<T, std::vector<Element>> && std::is_integral_v<Element>);
    if (!v.is_array()) return false;
    for (const json& e : v) if (!is_integer_of<Element>(e)) return false;
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
  if (model_type != "deepseek_v4" && model_type != "deepseek_v41") {
    return Status::error(source + ": model_type '" + model_type + "' is not supported (expected deepseek_v4 or deepseek_v41)");
  }
  ModelConfig c;
  c.arch = model_type == "deepseek_v41" ? Architecture::kDeepseekV41 : Architecture::kDeepseekV4;
  // V4.1 nests the text model's fields under text_config (spec §5.1).
  if (c.is_v41() && (!j.contains("text_config") || !j["text_config"].is_object())) {
    return Status::error(source + ": missing object 'text_config' (deepseek_v41 configs are nested)");
  }
  const json& t = c.is_v41() ? j["text_config"] : j;
  const std::string tsource = c.is_v41() ? source + " (text_config)" : source;
  Reader r{t, tsource, ""};
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
  if (!c.is_v41()) r.get("num_hash_layers", &c.n_hash_layers);
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
  if (c.is_v41()) {
    r.get("kv_source_layer_ids", &c.kv_source_layers);
    r.get("index_source_layer_ids", &c.index_source_layers);
    r.get("candidate_source_layer_id", &c.candidate_source_layer);
    r.get("candidate_topk_blocks", &c.candidate_topk_blocks);
    r.get("candidate_block_size", &c.candidate_block_size);
    r.get("engram_layer_ids", &c.engram_layers);
    r.get("engram_num_embeddings", &c.engram_num_embeddings);
    r.get("engram_max_ngram_size", &c.engram_max_ngram);
    r.get("engram_vocab_size", &c.engram_vocab_size);
    r.get("engram_n_heads", &c.engram_n_heads);
    r.get("engram_head_dim", &c.engram_head_dim);
    r.get("engram_pad_token_id", &c.engram_pad_token_id);
    r.get("engram_compressed_vocab_size", &c.engram_compressed_vocab_size);
    r.get("dspark_block_size", &c.dspark_block_size);
    r.get("dspark_noise_token_id", &c.dspark_noise_token_id);
    r.get("dspark_target_layer_ids", &c.dspark_target_layers);
    r.get("dspark_markov_rank", &c.dspark_markov_rank);
    r.get("dspark_n_routed_experts", &c.dspark_n_routed_experts);
    r.get("dspark_num_experts_per_tok", &c.dspark_n_activated_experts);
    Reader top{j, source, ""};
    top.get("image_token_id", &c.image_token_id, false);
    if (!top.error.empty()) return Status::error(top.error);
    if (j.contains("vision_config") && j["vision_config"].is_object() && j["vision_config"].contains("num_hidden_layers")) {
      c.vision_layers = j["vision_config"]["num_hidden_layers"].get<int>();
    }
  }
  if (!r.error.empty()) return Status::error(r.error);
  if (scoring != "sqrtsoftplus") return Status::error(source + ": scoring_func '" + scoring + "' is not supported (expected sqrtsoftplus)");

  if (t.contains("rope_scaling") && t["rope_scaling"].is_object()) {
    Reader rs{t["rope_scaling"], tsource, ""};
    rs.get("factor", &c.rope.yarn_factor);
    rs.get("original_max_position_embeddings", &c.rope.yarn_original_max_pos);
    rs.get("beta_fast", &c.rope.beta_fast);
    rs.get("beta_slow", &c.rope.beta_slow);
    if (!rs.error.empty()) return Status::error(rs.error + " (in rope_scaling)");
  } else {
    return Status::error(tsource + ": missing object 'rope_scaling' (V4 uses YaRN on compressed layers)");
  }
  c.act_block = c.is_v41() ? 32 : 128;
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

  auto bad = [&](const std::string& what) { return Status::error(tsource + ": " + what); };
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
    if (!c.is_v41() && r != 0 && r != 4 && r != 128) return bad("compress_ratios[" + std::to_string(i) + "] = " + std::to_string(r) + " (V4 supports 0, 4, 128)");
    if (c.is_v41() && r != 0 && r != 1 && r != 2) return bad("compress_ratios[" + std::to_string(i) + "] = " + std::to_string(r) + " (V4.1 supports 0, 1, 2)");
    if (i >= size_t(c.n_layers) && r != 0) return bad("compress_ratios entries of the MTP / DSpark layers must be 0");
  }
  if (c.is_v41()) {
    auto in_range = [&](const std::vector<int>& ids, const char* field) -> Status {
      for (int id : ids) if (id < 0 || id >= c.n_layers) return bad(std::string(field) + " has layer " + std::to_string(id) + " outside 0.." + std::to_string(c.n_layers - 1));
      return Status();
    };
    DI_RETURN_IF_ERROR(in_range(c.kv_source_layers, "kv_source_layer_ids"));
    DI_RETURN_IF_ERROR(in_range(c.index_source_layers, "index_source_layer_ids"));
    DI_RETURN_IF_ERROR(in_range(c.engram_layers, "engram_layer_ids"));
    DI_RETURN_IF_ERROR(in_range(c.dspark_target_layers, "dspark_target_layer_ids"));
    if (c.engram_num_embeddings.size() != c.engram_layers.size()) return bad("engram_num_embeddings needs one entry per engram_layer_ids entry");
    // Every layer that reads a cache (ratio != 0) needs an earlier KV source of the same ratio and an
    // earlier index source; a KV source's own ratio names its compressor.
    for (int l = 0; l < c.n_layers; ++l) {
      const int ratio = c.compress_ratio(l);
      if (ratio == 0) {
        if (c.is_kv_source(l) || c.is_index_source(l)) return bad("layer " + std::to_string(l) + " is a cache source but its compress_ratios entry is 0");
        continue;
      }
      int owner = -1, indexer = -1;
      for (int s = l; s >= 0; --s) {
        if (owner < 0 && c.is_kv_source(s)) owner = s;
        if (indexer < 0 && c.is_index_source(s)) indexer = s;
      }
      if (owner < 0 || c.compress_ratio(owner) != ratio) return bad("layer " + std::to_string(l) + " reads a ratio-" + std::to_string(ratio) + " cache but no earlier KV source has that ratio");
      if (indexer < 0) return bad("layer " + std::to_string(l) + " has no index source at or before it");
    }
    if (c.candidate_source_layer >= 0 && !c.is_kv_source(c.candidate_source_layer)) return bad("candidate_source_layer_id must be a KV source");
    if (c.dspark_target_layers.size() * size_t(c.dim) == 0 || c.n_mtp_layers < 1) return bad("DSpark needs dspark_target_layer_ids and num_nextn_predict_layers");
    if (c.dspark_noise_token_id < 0 || c.dspark_noise_token_id >= c.vocab_size) return bad("dspark_noise_token_id " + std::to_string(c.dspark_noise_token_id) + " is outside the vocabulary (vocab_size " + std::to_string(c.vocab_size) + ")");
    if (c.engram_pad_token_id < 0 || c.engram_pad_token_id >= c.vocab_size) return bad("engram_pad_token_id " + std::to_string(c.engram_pad_token_id) + " is outside the vocabulary");
    if (c.engram_max_ngram < 2 || c.engram_n_heads <= 0 || c.engram_head_dim % 32) return bad("engram_max_ngram_size >= 2, engram_n_heads > 0 and engram_head_dim % 32 == 0 are required");
  }
  if (c.n_hash_layers > c.n_layers) return bad("num_hash_layers exceeds num_hidden_layers");
  return c;
}

namespace {
bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

bool ModelConfig::is_kv_source(int layer) const { return contains(kv_source_layers, layer); }
bool ModelConfig::is_index_source(int layer) const { return contains(index_source_layers, layer); }
bool ModelConfig::is_engram_layer(int layer) const { return contains(engram_layers, layer); }
int ModelConfig::engram_index(int layer) const {
  for (size_t i = 0; i < engram_layers.size(); ++i) if (engram_layers[i] == layer) return int(i);
  return -1;
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
