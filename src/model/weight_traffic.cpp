#include "model/weight_traffic.h"

#include <algorithm>
#include <cmath>

#include "model/weights.h"

namespace deepinfer {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

WeightTraffic weight_traffic(const ModelConfig& c) {
  WeightTraffic w;
  for (const TensorSpec& t : expected_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t bytes = n * dtype_size(t.dtype);
    w.checkpoint_bytes += bytes;
    if (t.name.rfind("mtp.", 0) == 0) continue;
    const bool is_weight = ends_with(t.name, ".weight");
    const int64_t elements = t.dtype == DType::kI8 ? 2 * n : n;  // packed fp4: two per byte
    if (t.name == "embed.weight" || t.name.find(".tid2eid") != std::string::npos) {
      w.row_bytes_per_token += bytes / t.shape[0];  // one row
    } else if (t.name.find(".engram.embed.") != std::string::npos) {
      w.row_bytes_per_token += bytes / t.shape[0] * int64_t(c.engram_max_ngram - 1) * c.engram_n_heads;
    } else if (t.name.find(".ffn.experts.") != std::string::npos) {
      w.expert_bytes += bytes / c.n_routed_experts;
      if (is_weight) w.decode_macs_per_token += elements * c.n_activated_experts / c.n_routed_experts;
    } else {
      w.dense_bytes += bytes;
      if (is_weight && t.shape.size() == 2) w.decode_macs_per_token += elements;
      if (t.name == "head.weight") w.head_macs = elements;
    }
  }
  w.decode_bytes_per_token = w.dense_bytes + w.expert_bytes * c.n_activated_experts + w.row_bytes_per_token;
  return w;
}

double decode_step_bytes(const WeightTraffic& w, const ModelConfig& c, int batch) {
  const double e = c.n_routed_experts, k = c.n_activated_experts;
  const double distinct = e > 0 ? e * (1.0 - std::pow(1.0 - k / e, double(batch))) : 0.0;
  return double(w.dense_bytes) + distinct * double(w.expert_bytes) + double(batch) * double(w.row_bytes_per_token);
}

int64_t attention_macs_at(const ModelConfig& c, int64_t pos) {
  int64_t macs = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    int64_t slots = std::min<int64_t>(pos + 1, c.window_size);
    const int ratio = c.is_v41() ? 0 : c.compress_ratios[size_t(l)];
    if (ratio == 128) slots += (pos + 1) / 128;
    if (ratio == 4) {
      slots += std::min<int64_t>(c.index_topk, (pos + 1) / 4);
      macs += int64_t(c.index_n_heads) * c.index_head_dim * ((pos + 1) / 4);
    }
    macs += 2 * int64_t(c.n_heads) * c.head_dim * slots;
  }
  return macs;
}

}  // namespace deepinfer
