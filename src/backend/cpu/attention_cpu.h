// Drivers of the fast sparse-attention and indexer-score ops: slot compaction, packing into the family's
// format, the split of heads (attention) or keys (indexer) across threads, and the portable loops used at
// SimdLevel::kScalar. Buffers live in the workspaces and only grow (no allocation once warm).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/worker_pool.h"
#include "core/aligned_vector.h"

namespace deepinfer::cpu {

struct AttentionWorkspace {
  std::vector<const float*> rows;
  std::vector<int64_t> seg_begin, seg_valid;
  AlignedVector<uint8_t> k, v, q;
};

// Spec AT1-AT3 for one token (same rounding points as the reference: P rounded to bf16, the output once), its
// heads split across the pool's threads, or all on the calling thread when pool is nullptr (the same result).
void sparse_attention_fast(const SparseAttentionParams& p, SimdLevel level, WorkerPool* pool, AttentionWorkspace& ws);
// Several tokens (Backend::sparse_attentions): a token per thread when there are at least two per thread, each
// with a thread-local workspace; otherwise one after another as sparse_attention_fast.
void sparse_attentions_fast(std::span<const SparseAttentionParams> ps, SimdLevel level, WorkerPool& pool,
                            AttentionWorkspace& ws);

struct IndexWorkspace {
  AlignedVector<uint8_t> keys, q;
};

// Spec I7-I9 for one token: bf16 per-head scores, the head sum in fp32, rounded to bf16.
void index_scores_fast(const IndexScoreParams& p, SimdLevel level, WorkerPool& pool, IndexWorkspace& ws);

// Spec B1/H1: out[t, m] = f32((x_t . fn_m) / sqrt(mean(x_t^2) + eps)), fp32 sums.
void hc_mix_fast(const HcMixParams& p, SimdLevel level, WorkerPool& pool);

}  // namespace deepinfer::cpu
