#include "model/weight_traffic.h"

#include "model/weights.h"

namespace deepinfer {

WeightTraffic weight_traffic(const ModelConfig& c) {
  WeightTraffic w;
  for (const TensorSpec& t : expected_tensors(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t bytes = n * dtype_size(t.dtype);
    w.checkpoint_bytes += bytes;
    if (t.name.rfind("mtp.", 0) == 0) continue;
    const bool is_weight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    const int64_t elements = t.dtype == DType::kI8 ? 2 * n : n;  // packed fp4: two per byte
    if (t.name == "embed.weight") {
      w.decode_bytes_per_token += bytes / c.vocab_size;  // one row
    } else if (t.name.find(".ffn.experts.") != std::string::npos) {
      w.decode_bytes_per_token += bytes * c.n_activated_experts / c.n_routed_experts;
      if (is_weight) w.decode_macs_per_token += elements * c.n_activated_experts / c.n_routed_experts;
    } else if (t.name.find(".tid2eid") != std::string::npos) {
      w.decode_bytes_per_token += bytes / c.vocab_size;  // one row
    } else {
      w.decode_bytes_per_token += bytes;
      if (is_weight && t.shape.size() == 2) w.decode_macs_per_token += elements;
    }
  }
  return w;
}

}  // namespace deepinfer
