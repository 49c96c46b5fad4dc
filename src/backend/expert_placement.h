// Which routed experts a device keeps when its memory cannot hold every weight (Backend::place_experts), apart
// from any device API so that the CPU tests cover it: every other weight goes on the device first, then the
// experts in the model's order while their bytes fit in what is left; the rest stay in host memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/weights.h"

namespace deepinfer {

// The bytes the CUDA weight cache allocates for w: its rows padded to a multiple of 32 values, and its scale
// bytes (e4m3: one per block x block tile; e2m1: one per 32 codes).
int64_t device_weight_bytes(const LinearWeight& w);

struct ExpertPlacement {
  bool other_weights_fit = true;             // false: budget < other_weight_bytes (nothing placed)
  int64_t n_on_device = 0;
  std::vector<const LinearWeight*> on_host;  // in the given order
};

// budget: bytes the weights may take on the device.
ExpertPlacement place_experts_within(double budget, int64_t other_weight_bytes, std::span<const LinearWeight* const> experts);

}  // namespace deepinfer
