// Which routed experts a device keeps when its memory cannot hold every weight (Backend::place_experts), apart
// from any device API so that the CPU tests cover it: every other weight goes on the device first, then the
// experts in the model's order while their bytes fit in what is left; the rest stay in host memory. The bytes
// are those of the layout the CUDA weight cache gives each weight (device_weight_layout, which it uses).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/weights.h"

namespace deepinfer {

// How the CUDA weight cache lays w out on the device: n_out rows padded to k_pad values (a multiple of 32) at
// row_pitch bytes, then scale_rows x scale_pitch scale bytes (e4m3: one per block x block tile; e2m1: one per
// 32 codes; bf16: none). All zero for a dtype the cache does not take.
struct DeviceWeightLayout {
  int64_t k_pad = 0, row_pitch = 0, scale_rows = 0, scale_pitch = 0;
};
DeviceWeightLayout device_weight_layout(const LinearWeight& w);
int64_t device_weight_bytes(const LinearWeight& w);  // the layout's rows and scale bytes

struct ExpertPlacement {
  bool other_weights_fit = true;             // false: budget < other_weight_bytes (nothing placed)
  int64_t n_on_device = 0;
  std::vector<const LinearWeight*> on_host;  // in the given order
};

// budget: bytes the weights may take on the device.
ExpertPlacement place_experts_within(double budget, int64_t other_weight_bytes, std::span<const LinearWeight* const> experts);

}  // namespace deepinfer
