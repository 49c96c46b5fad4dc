#include "engine/scheduler.h"

#include <algorithm>

namespace deepinfer {

int64_t next_chunk_tokens(const SchedSequence& s, int64_t budget, const SchedulerConfig& config) {
  if (budget <= 0 || s.n_computed >= s.n_known) return 0;
  int64_t end = s.n_computed < s.n_prompt ? s.n_prompt : s.n_known;  // prompt and generated layouts differ
  end = std::min(end, s.n_computed + budget);
  if (s.n_known - s.n_computed > 1) {  // alignment concerns prefill-like chunks only
    if (config.snapshot_interval > 0) {
      const int64_t next_boundary = (s.n_computed / config.snapshot_interval + 1) * config.snapshot_interval;
      end = std::min(end, next_boundary);
    }
    if (config.snapshot_before_last_prompt_token && s.n_computed < s.n_prompt - 1) end = std::min(end, s.n_prompt - 1);
    if (s.snapshot_at > s.n_computed) end = std::min(end, s.snapshot_at);
  }
  return end - s.n_computed;
}

SchedulePlan schedule(const SchedulerInput& input, const SchedulerConfig& config) {
  SchedulePlan plan;
  const CacheFootprint& fp = config.footprint;
  auto charge = [&](const SchedSequence& s, int64_t n_tokens) { return fp.charge_pages(n_tokens) - s.n_shared_pages; };
  // 1. Resident sequences, oldest first. Preempt the newest while the projected pages exceed the budget.
  size_t n_resident = input.running.size();
  std::vector<int64_t> want(n_resident, 0);
  while (true) {
    int64_t budget = config.max_batch_tokens, pages = 0;
    for (size_t i = 0; i < n_resident; ++i) {
      const SchedSequence& s = input.running[i];
      want[i] = next_chunk_tokens(s, budget, config);
      budget -= want[i];
      pages += charge(s, s.n_computed + want[i]);
    }
    if (pages <= config.budget_pages || n_resident == 0) {
      plan.projected_pages = pages;
      break;
    }
    if (n_resident == 1) {  // alone and still too big: it can never run
      plan.rejected.push_back(input.running[0].key);
      n_resident = 0;
      plan.projected_pages = 0;
      break;
    }
    plan.preempted.push_back(input.running[n_resident - 1].key);
    --n_resident;
  }
  int64_t budget = config.max_batch_tokens;
  for (size_t i = 0; i < n_resident; ++i) {
    budget -= want[i];
    if (want[i] > 0) plan.chunks.push_back({input.running[i].key, want[i], false});
  }
  // 2. Waiting sequences in order, while tokens, slots and memory last (none after a preemption: memory is
  // tight, and FIFO order is kept: a sequence that does not fit blocks the ones behind it).
  if (!plan.preempted.empty()) return plan;
  int n_running = int(n_resident);
  int64_t reserved = 0;  // pages of every resident sequence once all its known tokens are computed
  for (size_t i = 0; i < n_resident; ++i) reserved += charge(input.running[i], input.running[i].n_known);
  for (const SchedSequence& s : input.waiting) {
    if (budget <= 0 || n_running >= config.max_running) break;
    if (fp.charge_pages(s.n_known) > config.budget_pages) {  // could never run, even alone
      plan.rejected.push_back(s.key);
      continue;
    }
    const int64_t n = next_chunk_tokens(s, budget, config);
    if (n <= 0) break;
    // Admit only if the whole known sequence fits next to everyone's reserved pages.
    if (reserved + charge(s, s.n_known) > config.budget_pages) break;
    reserved += charge(s, s.n_known);
    plan.projected_pages += charge(s, s.n_computed + n);
    plan.chunks.push_back({s.key, n, true});
    budget -= n;
    ++n_running;
  }
  return plan;
}

}  // namespace deepinfer
