// The continuous-batching scheduler: a pure function from the engine's queue state to one step's plan.
// It mixes decode tokens of running sequences with prefill chunks of continuing and new sequences under a
// token budget, keeps the pages charged to resident sequences (CacheFootprint::charge_pages, less the full pages
// an older resident sequence already holds) within the page budget, preempting the newest resident sequences
// when they would not fit (recompute later, nothing lost), and admits waiting sequences in FIFO order. Pages
// only the prefix cache holds count as free: the engine evicts snapshots before a step needs their pages, so
// the cache never preempts a running sequence. It never touches a model, a SequenceState or the page pool;
// tested in tests/unit/scheduler_test.cpp.
// Invariants: a chunk never crosses the prompt/generated boundary, a multiple of snapshot_interval, the
// sequence's own snapshot point or the snapshot point before the last prompt token; every resident sequence left out of a plan stays resident.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cache_footprint.h"

namespace deepinfer {

struct SchedSequence {
  uint64_t key = 0;
  int64_t n_computed = 0;  // tokens already in its cache state (waiting: the prefix-cache match, if any)
  int64_t n_prompt = 0;    // prompt tokens (laid out as a prompt)
  int64_t n_known = 0;     // prompt + generated tokens known so far; the step after the last is sampled
  int64_t snapshot_at = 0; // a prompt position a chunk must end at (a prefix-cache snapshot point), 0: none
  // Full (never again written) pages of its state that an older resident sequence also holds: charged there,
  // not here. Waiting: those of its prefix-cache match. Preempting newest first keeps this true.
  int64_t n_shared_pages = 0;
};

struct SchedulerConfig {
  int64_t max_batch_tokens = 256;
  int max_running = 64;
  int64_t budget_pages = 0;  // the cache budget in pool pages (cache_budget_bytes / page_bytes)
  CacheFootprint footprint;
  int64_t snapshot_interval = 0;       // 0: chunks are not aligned
  bool snapshot_before_last_prompt_token = false;
};

struct SchedulerInput {
  std::vector<SchedSequence> running;  // resident, oldest first
  std::vector<SchedSequence> waiting;  // not resident, in queue order (preempted ones first)
};

struct ScheduledChunk {
  uint64_t key = 0;
  int64_t n_tokens = 0;
  bool admit = false;  // a waiting sequence that becomes resident this step
};

struct SchedulePlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> preempted;  // resident sequences to drop (newest first); they recompute later
  std::vector<uint64_t> rejected;   // can never fit the cache budget on its own
  int64_t projected_pages = 0;      // pages charged to resident sequences after the step
};

// Tokens of the next chunk of `s` given `budget` tokens left (0 when nothing is left to compute).
int64_t next_chunk_tokens(const SchedSequence& s, int64_t budget, const SchedulerConfig& config);

SchedulePlan schedule(const SchedulerInput& input, const SchedulerConfig& config);

}  // namespace deepinfer
