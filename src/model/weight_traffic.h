// What one decoded token must read from the weights (batch 1): every dense tensor once, the shared
// expert, the routed experts it activates (n_activated of n_routed), one embedding row and the head.
// Computed from the tensor inventory, so it holds for any config.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace deepinfer {

struct WeightTraffic {
  int64_t checkpoint_bytes = 0;       // all tensors as stored
  int64_t decode_bytes_per_token = 0; // batch-1 decode, main model (MTP excluded)
  int64_t decode_macs_per_token = 0;  // multiply-adds of the weight GEMVs for one token
};

WeightTraffic weight_traffic(const ModelConfig& config);

}  // namespace deepinfer
