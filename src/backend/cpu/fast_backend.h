// Internal construction of the fast CPU backend with a forced SIMD level (tests and benchmarks compare
// every level the CPU supports against the reference backend). The engine uses make_fast_backend(), which
// picks best_simd_level() and best_prompt_simd_level(), or the family DEEPINFER_SIMD names.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"

namespace deepinfer {

// `level` must be supported by this CPU (simd_level_supported). n_threads <= 0: one per hardware thread.
std::unique_ptr<Backend> make_fast_backend_with_level(int n_threads, SimdLevel level);
// Generated tokens on `level`, the linear ops of prompt tokens on `prompt_level` (Backend::set_token_kind).
std::unique_ptr<Backend> make_fast_backend_with_levels(int n_threads, SimdLevel level, SimdLevel prompt_level);

}  // namespace deepinfer
