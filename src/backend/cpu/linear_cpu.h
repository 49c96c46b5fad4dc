// The fast linear op's driver: activation packing, the split of the weight rows across threads (each
// thread streams its own contiguous slice of row tiles), the per-ISA tile kernels and the epilogue.
// Must not allocate per call once warm: the packing buffer lives in LinearWorkspace and grows only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/worker_pool.h"
#include "core/aligned_vector.h"

namespace deepinfer::cpu {

struct LinearWorkspace {
  AlignedVector<uint8_t> x_packed;
  AlignedVector<uint8_t> x_tiled;  // tile mode: x_packed interleaved by token blocks (SimdKernels::tile_x)
  std::vector<uint8_t> token_packed;  // the last pack's tokens: 1 where the family took the token's values
};

// p.out = epilogue(x . W^T) with the family of `level` (falling back to a wider-input family when the weight
// layout needs it, or for the tokens whose activations need it: a token's family depends on its own x alone, so
// its sums never depend on the other tokens of the call). fp32 accumulation.
void linear_fast(const LinearParams& p, SimdLevel level, WorkerPool& pool, LinearWorkspace& ws);
// Several independent linear ops as one parallel region (one workspace each: their packed activations
// coexist): the threads stream from one weight matrix into the next with no wait between them.
void linears_fast(std::span<const LinearParams> ps, SimdLevel level, WorkerPool& pool,
                  std::vector<LinearWorkspace>& wss);

// The epilogue applied to an fp32 accumulator (same rounding points as apply_epilogue).
float fast_epilogue(Epilogue epilogue, float acc, float bias);

}  // namespace deepinfer::cpu
