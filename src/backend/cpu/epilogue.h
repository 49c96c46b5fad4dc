// The output roundings of a linear layer (see Epilogue in backend.h), for an exact (double) or fp32
// accumulator. Shared by both CPU backends so the rounding rule lives in one place.
#pragma once

#include <cmath>

#include "backend/backend.h"
#include "core/dtypes.h"

namespace deepinfer {

inline float apply_epilogue(Epilogue epilogue, double acc, float bias) {
  switch (epilogue) {
    case Epilogue::kBf16: return round_bf16(acc);
    case Epilogue::kF32: return round_f32(acc);
    case Epilogue::kF32AddBias: return round_f32(acc + double(bias));
    case Epilogue::kSqrtSoftplus: {
      const double softplus = acc > 30 ? acc + std::log1p(std::exp(-acc)) : std::log1p(std::exp(acc));
      return round_f32(std::sqrt(softplus));
    }
  }
  return 0.0f;
}

}  // namespace deepinfer
