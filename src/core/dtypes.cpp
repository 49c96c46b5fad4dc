// Dtype names and the code tables of the small float formats.
#include "core/dtypes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace deepinfer {

const float kE2M1Values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  int size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBF16, "BF16", 2},     {DType::kF16, "F16", 2},         {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},       {DType::kF8E4M3, "F8_E4M3", 1},  {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI8, "I8", 1},         {DType::kI16, "I16", 2},         {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},       {DType::kU8, "U8", 1},           {DType::kBool, "BOOL", 1},
};
}  // namespace

int dtype_size(DType dtype) {
  for (const auto& info : kDTypes) if (info.dtype == dtype) return info.size;
  return 0;
}

const char* dtype_name(DType dtype) {
  for (const auto& info : kDTypes) if (info.dtype == dtype) return info.name;
  return "?";
}

bool dtype_from_name(const char* name, DType* out) {
  for (const auto& info : kDTypes) {
    if (std::strcmp(info.name, name) == 0) { *out = info.dtype; return true; }
  }
  return false;
}

bool is_scaled_e4m3_block(const float* x, int64_t n) {
  double amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
    amax = std::max(amax, std::fabs(double(x[i])));
  }
  if (amax == 0) return true;
  const double s = pow2_scale_at_least(amax, 448.0);
  for (int64_t i = 0; i < n; ++i) {
    const double q = double(x[i]) / s;  // exact: s is a power of two
    if (e4m3_round(q) != q) return false;
  }
  return true;
}

uint8_t e4m3_code(double grid_value) {
  for (int code = 0; code < 0x7f; ++code) {
    if (double(e4m3_to_float(uint8_t(code))) == std::fabs(grid_value)) {
      return uint8_t(code | (std::signbit(grid_value) ? 0x80 : 0));
    }
  }
  return 0x7f;  // not on the grid: NaN code
}

uint8_t e2m1_code(double grid_value) {
  for (int code = 0; code < 8; ++code) {
    if (double(kE2M1Values[code]) == std::fabs(grid_value)) {
      return uint8_t(code | (std::signbit(grid_value) ? 8 : 0));
    }
  }
  return 0;
}

}  // namespace deepinfer
