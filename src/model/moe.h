// The MoE of the V4 family (moe.cpp) as the model runs it through a backend's ops, and its router of one token,
// which the CPU stand-in of the CUDA backend's routing kernel shares.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace deepinfer {

// The MoE of one block through the backend's linear ops, its routing, SwiGLU, activation QDQ and sums on the
// host (the model's own code; Backend::moe is the whole of it in one call, where a backend has that).
void moe_on_backend(Backend& backend, const MoeParams& p);

// The score router's order: (key, expert) a before b where its key is larger, ties to the lower expert, and a NaN key
// (a corrupt gate or bias) after every number, so that the order is total, as partial_sort needs, and a device
// routes NaN keys as the host does (moe_kernels.cu's beats()).
bool routes_before(double key_a, int64_t a, double key_b, int64_t b);

// The router of one token (spec M2 / M3; V4.1 steps 36-37): which experts it goes to and with what weights.
// g: the token's [n_experts] sqrt-softplus gate scores (M1). Hash routing (hash_row, the token's tid2eid row of
// top_k experts, given): those experts in that order; score routing (hash_row nullptr): the top_k experts by
// g + bias, descending, ties to the lower index (V4: the exact sum; V4.1: an fp32 add). weight[i] is expert
// chosen[i]'s weight, an f32 value: V4 f32(g / total * route_scale), V4.1 f32(route_scale * g / (total + 1e-20))
// (no 1e-20 for top_k 1), total the double sum of the chosen g in the order chosen. order: n_experts scratch.
void route_token(const float* g, const float* bias, const int64_t* hash_row, int64_t n_experts, int64_t top_k, bool v41,
                 double route_scale, int64_t* chosen, double* weight, int64_t* order);

}  // namespace deepinfer
