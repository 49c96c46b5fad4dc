#include "backend/expert_placement.h"

namespace deepinfer {

DeviceWeightLayout device_weight_layout(const LinearWeight& w) {
  DeviceWeightLayout l;
  l.k_pad = (w.n_in + 31) / 32 * 32;
  switch (w.dtype) {
    case DType::kBF16:
      l.row_pitch = l.k_pad * 2;
      break;
    case DType::kF8E4M3:
      l.row_pitch = l.k_pad;
      if (w.block > 0) {
        l.scale_rows = (w.n_out + w.block - 1) / w.block;
        l.scale_pitch = (w.n_in + w.block - 1) / w.block;
      }
      break;
    case DType::kI8:
      l.row_pitch = l.k_pad / 2;
      l.scale_rows = w.n_out;
      l.scale_pitch = w.n_in / 32;
      break;
    default:
      return {};
  }
  return l;
}

int64_t device_weight_bytes(const LinearWeight& w) {
  const DeviceWeightLayout l = device_weight_layout(w);
  return w.n_out * l.row_pitch + l.scale_rows * l.scale_pitch;
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
