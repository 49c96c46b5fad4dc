#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtypes.h"

namespace deepinfer {

bool routes_before(double key_a, int64_t a, double key_b, int64_t b) {
  const bool nan_a = std::isnan(key_a), nan_b = std::isnan(key_b);
  if (nan_a != nan_b) return nan_b;
  if (!nan_a && key_a != key_b) return key_a > key_b;
  return a < b;
}

void route_token(const float* g, const float* bias, const int64_t* hash_row, int64_t n_experts, int64_t top_k, bool v41,
                 double route_scale, int64_t* chosen, double* weight, int64_t* order) {
  if (hash_row) {
    std::copy_n(hash_row, top_k, chosen);
  } else {
    std::iota(order, order + n_experts, 0);
    // V4: the exact sum; V4.1: an fp32 add.
    auto key = [&](int64_t e) { return v41 ? double(g[e] + bias[e]) : double(g[e]) + double(bias[e]); };
    std::partial_sort(order, order + top_k, order + n_experts,
                      [&](int64_t a, int64_t b) { return routes_before(key(a), a, key(b), b); });
    std::copy_n(order, top_k, chosen);
  }
  double total = 0;
  for (int64_t i = 0; i < top_k; ++i) total += g[chosen[i]];
  for (int64_t i = 0; i < top_k; ++i) {
    double wi = double(g[chosen[i]]) / total * route_scale;                                           // V4 M3
    if (v41) wi = top_k > 1 ? route_scale * g[chosen[i]] / (total + 1e-20) : route_scale * g[chosen[i]];  // V4.1 step 37
    weight[i] = round_f32(wi);
  }
}

}  // namespace deepinfer
