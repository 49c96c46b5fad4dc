// Tensor inventory of the V4 family and strict binding of a checkpoint against it.
#include "model/weights.h"

#include <cstring>
#include <map>
#include <set>

namespace deepinfer {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Inventory {
  const ModelConfig& c;
  std::vector<TensorSpec> specs;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape) {
    specs.push_back({name, dtype, std::move(shape)});
  }
  void fp8_linear(const std::string& prefix, int64_t n_out, int64_t n_in) {
    const int64_t b = c.weight_block;
    add(prefix + ".weight", DType::kF8E4M3, {n_out, n_in});
    add(prefix + ".scale", DType::kF8E8M0, {ceil_div(n_out, b), ceil_div(n_in, b)});
  }
  void fp4_linear(const std::string& prefix, int64_t n_out, int64_t n_in) {
    add(prefix + ".weight", DType::kI8, {n_out, n_in / 2});
    add(prefix + ".scale", DType::kF8E8M0, {n_out, n_in / 32});
  }
  void compressor(const std::string& prefix, int ratio, int64_t d) {
    const int64_t width = (ratio == 4 ? 2 : 1) * d;
    add(prefix + ".ape", DType::kF32, {ratio, width});
    add(prefix + ".norm.weight", DType::kBF16, {d});
    add(prefix + ".wgate.weight", DType::kBF16, {width, c.dim});
    add(prefix + ".wkv.weight", DType::kBF16, {width, c.dim});
  }
  void block(const std::string& p, int layer_id, bool is_mtp) {
    const int64_t D = c.dim, hc = c.hc_mult, mix = (2 + hc) * hc;
    const int ratio = c.compress_ratio(layer_id);
    const int n_experts = c.is_v41() && is_mtp ? c.dspark_n_routed_experts : c.n_routed_experts;
    for (const char* side : {"attn", "ffn"}) {
      add(p + ".hc_" + side + "_base", DType::kF32, {mix});
      add(p + ".hc_" + side + "_fn", DType::kF32, {mix, hc * D});
      add(p + ".hc_" + side + "_scale", DType::kF32, {3});
    }
    add(p + ".attn_norm.weight", DType::kBF16, {D});
    add(p + ".ffn_norm.weight", DType::kBF16, {D});
    const std::string a = p + ".attn";
    add(a + ".attn_sink", DType::kF32, {c.n_heads});
    add(a + ".kv_norm.weight", DType::kBF16, {c.head_dim});
    add(a + ".q_norm.weight", DType::kBF16, {c.q_lora_rank});
    fp8_linear(a + ".wq_a", c.q_lora_rank, D);
    fp8_linear(a + ".wq_b", int64_t(c.n_heads) * c.head_dim, c.q_lora_rank);
    fp8_linear(a + ".wkv", c.head_dim, D);
    fp8_linear(a + ".wo_a", int64_t(c.o_groups) * c.o_lora_rank, int64_t(c.n_heads) * c.head_dim / c.o_groups);
    fp8_linear(a + ".wo_b", D, int64_t(c.o_groups) * c.o_lora_rank);
    if (c.is_v41()) {
      if (!is_mtp && c.is_kv_source(layer_id)) {
        add(a + ".compressor.norm.weight", DType::kBF16, {c.head_dim});
        add(a + ".compressor.wkv.weight", DType::kBF16, {c.head_dim, D});
        if (ratio == 2) add(a + ".compressor.wgate.weight", DType::kBF16, {c.head_dim, D});
        add(a + ".indexer.k_norm.weight", DType::kBF16, {c.index_head_dim});
        add(a + ".indexer.wk.weight", DType::kBF16, {c.index_head_dim, c.head_dim});
      }
      if (!is_mtp && c.is_index_source(layer_id)) {
        add(a + ".indexer.weights_proj.weight", DType::kBF16, {c.index_n_heads, D});
        fp8_linear(a + ".indexer.wq_b", int64_t(c.index_n_heads) * c.index_head_dim, c.q_lora_rank);
      }
      if (!is_mtp && c.is_engram_layer(layer_id)) {
        const std::string e = p + ".engram";
        const int64_t rows = c.engram_num_embeddings[size_t(c.engram_index(layer_id))];
        add(e + ".embed.weight", DType::kF8E4M3, {rows, c.engram_head_dim});
        add(e + ".embed.scale", DType::kF8E8M0, {rows, c.engram_head_dim / 32});
        fp8_linear(e + ".wkv", 5 * D, int64_t(c.engram_max_ngram - 1) * c.engram_n_heads * c.engram_head_dim);
        add(e + ".q_weight", DType::kBF16, {hc, D});
        add(e + ".k_weight", DType::kBF16, {hc, D});
      }
    } else if (ratio != 0) {
      compressor(a + ".compressor", ratio, c.head_dim);
    }
    if (!c.is_v41() && ratio == 4) {
      compressor(a + ".indexer.compressor", ratio, c.index_head_dim);
      add(a + ".indexer.weights_proj.weight", DType::kBF16, {c.index_n_heads, D});
      fp8_linear(a + ".indexer.wq_b", int64_t(c.index_n_heads) * c.index_head_dim, c.q_lora_rank);
    }
    const std::string f = p + ".ffn";
    add(f + ".gate.weight", DType::kBF16, {n_experts, D});
    if (!is_mtp && layer_id < c.n_hash_layers) {
      add(f + ".gate.tid2eid", DType::kI64, {c.vocab_size, c.n_activated_experts});
    } else {
      add(f + ".gate.bias", DType::kF32, {n_experts});
    }
    if (c.is_v41()) add(f + ".gate.bias_vl", DType::kF32, {n_experts});
    for (int e = 0; e < n_experts; ++e) {
      const std::string x = f + ".experts." + std::to_string(e);
      fp4_linear(x + ".w1", c.moe_inter_dim, D);
      fp4_linear(x + ".w2", D, c.moe_inter_dim);
      fp4_linear(x + ".w3", c.moe_inter_dim, D);
    }
    const int64_t shared_inter = int64_t(c.moe_inter_dim) * c.n_shared_experts;
    fp8_linear(f + ".shared_experts.w1", shared_inter, D);
    fp8_linear(f + ".shared_experts.w2", D, shared_inter);
    fp8_linear(f + ".shared_experts.w3", shared_inter, D);
  }
  void head(const std::string& p) {
    add(p + "hc_head_base", DType::kF32, {c.hc_mult});
    add(p + "hc_head_fn", DType::kF32, {c.hc_mult, int64_t(c.hc_mult) * c.dim});
    add(p + "hc_head_scale", DType::kF32, {1});
  }
};

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  Inventory inv{c, {}};
  inv.add("embed.weight", DType::kBF16, {c.vocab_size, c.dim});
  inv.add("head.weight", DType::kBF16, {c.vocab_size, c.dim});
  inv.add("norm.weight", DType::kBF16, {c.dim});
  if (c.is_v41()) {
    for (int l = 0; l < c.n_layers; ++l) inv.block("layers." + std::to_string(l), l, false);
    for (int m = 0; m < c.n_mtp_layers; ++m) inv.block("mtp." + std::to_string(m), c.n_layers + m, true);
    const std::string last = "mtp." + std::to_string(c.n_mtp_layers - 1);
    inv.fp8_linear("mtp.0.main_proj", c.dim, int64_t(c.dspark_target_layers.size()) * c.dim);
    inv.add("mtp.0.main_norm.weight", DType::kBF16, {c.dim});
    inv.add(last + ".norm.weight", DType::kBF16, {c.dim});
    inv.add(last + ".markov_head.embed.weight", DType::kBF16, {c.vocab_size, c.dspark_markov_rank});
    inv.add(last + ".markov_head.head.weight", DType::kBF16, {c.vocab_size, c.dspark_markov_rank});
    inv.add(last + ".confidence_head.proj.weight", DType::kBF16, {1, int64_t(c.dim) + c.dspark_markov_rank});
    return inv.specs;
  }
  inv.head("");
  for (int l = 0; l < c.n_layers; ++l) inv.block("layers." + std::to_string(l), l, false);
  for (int m = 0; m < c.n_mtp_layers; ++m) {
    const std::string p = "mtp." + std::to_string(m);
    inv.block(p, c.n_layers + m, true);
    inv.add(p + ".enorm.weight", DType::kBF16, {c.dim});
    inv.add(p + ".hnorm.weight", DType::kBF16, {c.dim});
    inv.add(p + ".norm.weight", DType::kBF16, {c.dim});
    inv.fp8_linear(p + ".e_proj", c.dim, c.dim);
    inv.fp8_linear(p + ".h_proj", c.dim, c.dim);
    inv.head(p + ".");
  }
  return inv.specs;
}

namespace {

class Binder {
 public:
  Binder(const ModelConfig& c, const Checkpoint& ckpt) : c_(c), ckpt_(ckpt) {
    for (auto& spec : expected_tensors(c)) specs_[spec.name] = spec;
  }
  std::string error;

  const TensorView* get(const std::string& name) {
    if (!error.empty()) return nullptr;
    auto spec = specs_.find(name);
    DI_CHECK_MSG(spec != specs_.end(), name);
    const TensorView* t = ckpt_.find(name);
    if (!t) {
      error = ckpt_.dir() + ": missing tensor '" + name + "' (expected " + dtype_name(spec->second.dtype) + " " + shape_str(spec->second.shape) + ")";
      return nullptr;
    }
    if (t->dtype != spec->second.dtype || t->shape != spec->second.shape) {
      error = *t->file + ": tensor '" + name + "' is " + dtype_name(t->dtype) + " " + t->shape_string() + " but config.json implies " +
              dtype_name(spec->second.dtype) + " " + shape_str(spec->second.shape);
      return nullptr;
    }
    return t;
  }
  // A table read a row at a time: get(), with its pages advised for row lookups (advise_row_lookups).
  const TensorView* table_view(const std::string& name) {
    const TensorView* t = get(name);
    if (t) advise_row_lookups(*t);
    return t;
  }
  template <typename T> const T* table(const std::string& name) { return data_of<T>(table_view(name)); }
  template <typename T> const T* ptr(const std::string& name) { return data_of<T>(get(name)); }
  // t's data as T, copied to an aligned buffer if the file does not align it for T.
  template <typename T> const T* data_of(const TensorView* t) {
    if (!t) return nullptr;
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(T) == 0) return t->as<T>();
    auto copy = std::make_unique<uint64_t[]>((t->n_bytes + 7) / 8);
    std::memcpy(copy.get(), t->data, t->n_bytes);
    const T* aligned = reinterpret_cast<const T*>(copy.get());
    aligned_copies.push_back(std::move(copy));
    return aligned;
  }
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies;
  LinearWeight linear(const std::string& prefix) {
    LinearWeight w;
    const TensorView* t = get(prefix + ".weight");
    if (!t) return w;
    w.dtype = t->dtype;
    w.n_out = t->shape[0];
    w.n_in = t->dtype == DType::kI8 ? t->shape[1] * 2 : t->shape[1];
    w.data = t->data;
    if (t->dtype != DType::kBF16) {
      const TensorView* s = get(prefix + ".scale");
      if (s) w.scale = s->data;
      w.block = t->dtype == DType::kF8E4M3 ? c_.weight_block : 32;
    }
    return w;
  }
  CompressorWeights compressor(const std::string& p) {
    CompressorWeights cw;
    cw.wkv = linear(p + ".wkv");
    cw.wgate = linear(p + ".wgate");
    cw.ape = ptr<float>(p + ".ape");
    cw.norm = ptr<uint16_t>(p + ".norm.weight");
    return cw;
  }
  BlockWeights block(const std::string& p, int layer_id, bool is_mtp) {
    BlockWeights b;
    b.compress_ratio = c_.compress_ratio(layer_id);
    b.hash_routed = !is_mtp && layer_id < c_.n_hash_layers;
    b.hc_attn_fn = ptr<float>(p + ".hc_attn_fn");
    b.hc_attn_base = ptr<float>(p + ".hc_attn_base");
    b.hc_attn_scale = ptr<float>(p + ".hc_attn_scale");
    b.hc_ffn_fn = ptr<float>(p + ".hc_ffn_fn");
    b.hc_ffn_base = ptr<float>(p + ".hc_ffn_base");
    b.hc_ffn_scale = ptr<float>(p + ".hc_ffn_scale");
    b.attn_norm = ptr<uint16_t>(p + ".attn_norm.weight");
    b.ffn_norm = ptr<uint16_t>(p + ".ffn_norm.weight");
    const std::string a = p + ".attn";
    b.wq_a = linear(a + ".wq_a");
    b.wq_b = linear(a + ".wq_b");
    b.wkv = linear(a + ".wkv");
    b.wo_a = linear(a + ".wo_a");
    b.wo_b = linear(a + ".wo_b");
    b.q_norm = ptr<uint16_t>(a + ".q_norm.weight");
    b.kv_norm = ptr<uint16_t>(a + ".kv_norm.weight");
    b.attn_sink = ptr<float>(a + ".attn_sink");
    if (c_.is_v41()) {
      if (!is_mtp && c_.is_kv_source(layer_id)) {
        b.compressor.wkv = linear(a + ".compressor.wkv");
        if (b.compress_ratio == 2) b.compressor.wgate = linear(a + ".compressor.wgate");
        b.compressor.norm = ptr<uint16_t>(a + ".compressor.norm.weight");
        b.index_wk = linear(a + ".indexer.wk");
        b.index_k_norm = ptr<uint16_t>(a + ".indexer.k_norm.weight");
      }
      if (!is_mtp && c_.is_index_source(layer_id)) {
        b.index_wq_b = linear(a + ".indexer.wq_b");
        b.index_weights_proj = linear(a + ".indexer.weights_proj");
      }
      if (!is_mtp && c_.is_engram_layer(layer_id)) {
        const std::string e = p + ".engram";
        b.has_engram = true;
        const TensorView* codes = table_view(e + ".embed.weight");
        const TensorView* scales = table_view(e + ".embed.scale");
        if (codes && scales) b.engram.table = {codes->data, scales->data, codes->shape[0], codes->shape[1]};
        b.engram.wkv = linear(e + ".wkv");
        b.engram.q_weight = ptr<uint16_t>(e + ".q_weight");
        b.engram.k_weight = ptr<uint16_t>(e + ".k_weight");
      }
    } else if (b.compress_ratio != 0) {
      b.compressor = compressor(a + ".compressor");
    }
    if (!c_.is_v41() && b.compress_ratio == 4) {
      b.index_compressor = compressor(a + ".indexer.compressor");
      b.index_wq_b = linear(a + ".indexer.wq_b");
      b.index_weights_proj = linear(a + ".indexer.weights_proj");
    }
    const std::string f = p + ".ffn";
    b.gate = linear(f + ".gate");
    if (b.hash_routed) {
      b.tid2eid = ptr<int64_t>(f + ".gate.tid2eid");
    } else {
      b.gate_bias = ptr<float>(f + ".gate.bias");
    }
    if (c_.is_v41()) b.gate_bias_vl = ptr<float>(f + ".gate.bias_vl");
    const int n_experts = c_.is_v41() && is_mtp ? c_.dspark_n_routed_experts : c_.n_routed_experts;
    b.n_activated_experts = c_.is_v41() && is_mtp ? c_.dspark_n_activated_experts : c_.n_activated_experts;
    for (int e = 0; e < n_experts; ++e) {
      const std::string x = f + ".experts." + std::to_string(e);
      b.experts.push_back({linear(x + ".w1"), linear(x + ".w2"), linear(x + ".w3")});
    }
    b.shared = {linear(f + ".shared_experts.w1"), linear(f + ".shared_experts.w2"), linear(f + ".shared_experts.w3")};
    return b;
  }
  HeadWeights head(const std::string& p, const std::string& norm_name) {
    return {ptr<float>(p + "hc_head_fn"), ptr<float>(p + "hc_head_base"), ptr<float>(p + "hc_head_scale"),
            ptr<uint16_t>(norm_name)};
  }
  Status check_no_extras() {
    for (const std::string& name : ckpt_.tensor_names()) {
      // V4.1's vision tower is not supported yet: its tensors are known and left unused.
      if (c_.is_v41() && (name.rfind("vision.", 0) == 0 || name.rfind("aligner.", 0) == 0 || name.rfind("image_", 0) == 0)) continue;
      if (!specs_.count(name)) {
        return Status::error(*ckpt_.find(name)->file + ": unexpected tensor '" + name +
                             "' (not part of this config; is config.json from another model?)");
      }
    }
    return Status();
  }

 private:
  static std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
  const ModelConfig& c_;
  const Checkpoint& ckpt_;
  std::map<std::string, TensorSpec> specs_;
};

}  // namespace

Result<ModelWeights> bind_weights(const ModelConfig& c, const Checkpoint& ckpt) {
  Binder b(c, ckpt);
  DI_RETURN_IF_ERROR(b.check_no_extras());
  ModelWeights w;
  w.embed = b.table<uint16_t>("embed.weight");
  w.head_proj = b.linear("head");
  if (c.is_v41()) {
    w.head.norm = b.ptr<uint16_t>("norm.weight");
    for (int l = 0; l < c.n_layers && b.error.empty(); ++l) w.layers.push_back(b.block("layers." + std::to_string(l), l, false));
    for (int m = 0; m < c.n_mtp_layers && b.error.empty(); ++m) {
      MtpWeights mw;
      mw.block = b.block("mtp." + std::to_string(m), c.n_layers + m, true);
      w.mtp.push_back(std::move(mw));
    }
    const std::string last = "mtp." + std::to_string(c.n_mtp_layers - 1);
    w.dspark.main_proj = b.linear("mtp.0.main_proj");
    w.dspark.main_norm = b.ptr<uint16_t>("mtp.0.main_norm.weight");
    w.dspark.norm = b.ptr<uint16_t>(last + ".norm.weight");
    w.dspark.markov_embed = b.table<uint16_t>(last + ".markov_head.embed.weight");
    w.dspark.markov_head = b.linear(last + ".markov_head.head");
    w.dspark.confidence_proj = b.linear(last + ".confidence_head.proj");
    if (!b.error.empty()) return Status::error(b.error);
    w.aligned_copies = std::move(b.aligned_copies);
    return w;
  }
  w.head = b.head("", "norm.weight");
  for (int l = 0; l < c.n_layers && b.error.empty(); ++l) w.layers.push_back(b.block("layers." + std::to_string(l), l, false));
  for (int m = 0; m < c.n_mtp_layers && b.error.empty(); ++m) {
    const std::string p = "mtp." + std::to_string(m);
    MtpWeights mw;
    mw.block = b.block(p, c.n_layers + m, true);
    mw.enorm = b.ptr<uint16_t>(p + ".enorm.weight");
    mw.hnorm = b.ptr<uint16_t>(p + ".hnorm.weight");
    mw.e_proj = b.linear(p + ".e_proj");
    mw.h_proj = b.linear(p + ".h_proj");
    mw.head = b.head(p + ".", p + ".norm.weight");
    w.mtp.push_back(std::move(mw));
  }
  if (!b.error.empty()) return Status::error(b.error);
  w.aligned_copies = std::move(b.aligned_copies);
  // Hash routes index experts: validate them once here so the forward pass can trust them.
  for (int l = 0; l < c.n_layers; ++l) {
    const int64_t* t = w.layers[size_t(l)].tid2eid;
    if (!t) continue;
    // safetensors does not align tensors (the goldens store tid2eid at 4 mod 8): load bytewise.
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(t);
    for (int64_t i = 0; i < int64_t(c.vocab_size) * c.n_activated_experts; ++i) {
      int64_t expert = 0;
      std::memcpy(&expert, bytes + i * 8, 8);
      if (expert < 0 || expert >= c.n_routed_experts) {
        return Status::error(*ckpt.find("layers." + std::to_string(l) + ".ffn.gate.tid2eid")->file + ": layers." + std::to_string(l) +
                             ".ffn.gate.tid2eid[" + std::to_string(i / c.n_activated_experts) + "] names expert " +
                             std::to_string(expert) + ", outside 0.." + std::to_string(c.n_routed_experts - 1));
      }
    }
  }
  return w;
}

}  // namespace deepinfer
