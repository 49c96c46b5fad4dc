#include "backend/expert_placement.h"

namespace deepinfer {

int64_t device_weight_bytes(const LinearWeight& w) {
  const int64_t k_pad = (w.n_in + 31) / 32 * 32;
  switch (w.dtype) {
    case DType::kBF16: return w.n_out * k_pad * 2;
    case DType::kF8E4M3: return w.n_out * k_pad + (w.n_out + w.block - 1) / w.block * ((w.n_in + w.block - 1) / w.block);
    case DType::kI8: return w.n_out * k_pad / 2 + w.n_out * (w.n_in / 32);
    default: return 0;
  }
}

ExpertPlacement place_experts_within(double budget, int64_t other_weight_bytes, std::span<const LinearWeight* const> experts) {
  ExpertPlacement placement;
  double left = budget - double(other_weight_bytes);
  if (left < 0) {
    placement.other_weights_fit = false;
    return placement;
  }
  for (const LinearWeight* w : experts) {
    const double bytes = double(device_weight_bytes(*w));
    if (bytes <= left) {  // a smaller expert after one that did not fit may still fit
      left -= bytes;
      ++placement.n_on_device;
    } else {
      placement.on_host.push_back(w);
    }
  }
  return placement;
}

}  // namespace deepinfer
