// The continuous-batching scheduler as a pure function: decode first, prefill chunks under the token budget,
// chunk boundaries (prompt end, snapshot points), FIFO admission under the page budget, preemption of the
// newest resident sequence when pages run out, full pages shared with an older sequence charged once, rejection
// of what can never fit.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

SchedulerConfig config_with(int64_t budget_tokens, int64_t budget_pages, int max_running = 16) {
  SchedulerConfig c;
  c.max_batch_tokens = budget_tokens;
  c.max_running = max_running;
  c.budget_pages = budget_pages;
  c.footprint.page_bytes = 8;
  c.footprint.fixed_bytes = 80;             // 10 pages per sequence
  c.footprint.streams = {{4, 8, 1}};        // + 1 page (one 8-byte row) per 4 tokens
  return c;
}

SchedSequence decoding(uint64_t key, int64_t n_prompt, int64_t n_generated) {
  return {key, n_prompt + n_generated - 1, n_prompt, n_prompt + n_generated};
}

SchedSequence fresh(uint64_t key, int64_t n_prompt) { return {key, 0, n_prompt, n_prompt}; }

TEST(Scheduler, DecodeTokensFirstThenPrefillUnderTheTokenBudget) {
  SchedulerInput in;
  in.running = {decoding(1, 10, 3), decoding(2, 20, 1)};
  in.waiting = {fresh(3, 100)};
  const SchedulePlan plan = schedule(in, config_with(50, 1 << 20));
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.chunks[0].key, 1u);
  EXPECT_EQ(plan.chunks[0].n_tokens, 1);
  EXPECT_EQ(plan.chunks[1].n_tokens, 1);
  EXPECT_EQ(plan.chunks[2].key, 3u);
  EXPECT_EQ(plan.chunks[2].n_tokens, 48);  // the rest of the budget
  EXPECT_TRUE(plan.chunks[2].admit);
  EXPECT_TRUE(plan.preempted.empty());
}

TEST(Scheduler, ContinuingPrefillBeforeNewSequences) {
  SchedulerInput in;
  in.running = {{1, 48, 100, 100}};  // half-way through its prompt
  in.waiting = {fresh(2, 10)};
  const SchedulePlan plan = schedule(in, config_with(60, 1 << 20));
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].n_tokens, 52);
  EXPECT_EQ(plan.chunks[1].n_tokens, 8);
}

TEST(Scheduler, ChunksStopAtThePromptEndAndAtSnapshotPoints) {
  SchedulerConfig c = config_with(1000, 1 << 20);
  // A preempted sequence recomputing prompt + generated tokens: the prompt is one chunk, the generated another.
  EXPECT_EQ(next_chunk_tokens({1, 0, 30, 40}, 1000, c), 30);
  EXPECT_EQ(next_chunk_tokens({1, 30, 30, 40}, 1000, c), 10);
  c.snapshot_interval = 16;
  c.snapshot_before_last_prompt_token = true;
  EXPECT_EQ(next_chunk_tokens({1, 0, 30, 30}, 1000, c), 16);
  EXPECT_EQ(next_chunk_tokens({1, 16, 30, 30}, 1000, c), 13);  // ends before the last prompt token
  EXPECT_EQ(next_chunk_tokens({1, 29, 30, 30}, 1000, c), 1);
  EXPECT_EQ(next_chunk_tokens({1, 30, 30, 31}, 1000, c), 1);   // decode
  EXPECT_EQ(next_chunk_tokens({1, 31, 30, 31}, 1000, c), 0);   // nothing to compute
  EXPECT_EQ(next_chunk_tokens({1, 0, 30, 30}, 5, c), 5);       // budget-limited
  // A sequence's own snapshot point (the end of a chat's shared history).
  EXPECT_EQ(next_chunk_tokens({1, 0, 30, 30, 11}, 1000, c), 11);
  EXPECT_EQ(next_chunk_tokens({1, 11, 30, 30, 11}, 1000, c), 5);
}

TEST(Scheduler, AdmitsInFifoOrderWhileMemoryLasts) {
  // Each fresh 40-token sequence needs 10 + 10 = 20 pages once its prompt is in.
  SchedulerInput in;
  in.waiting = {fresh(1, 40), fresh(2, 40), fresh(3, 4)};
  const SchedulePlan plan = schedule(in, config_with(1000, 45));
  ASSERT_EQ(plan.chunks.size(), 2u);  // 1 and 2 fit (40 pages); 3 (11 more) does not
  EXPECT_EQ(plan.chunks[0].key, 1u);
  EXPECT_EQ(plan.chunks[1].key, 2u);
}

TEST(Scheduler, HeadOfLineBlocksLaterAdmissions) {
  SchedulerInput in;
  in.running = {decoding(1, 40, 1)};
  in.waiting = {fresh(2, 200), fresh(3, 4)};  // 2 needs 10 + 50 pages: does not fit next to 1 (20)
  const SchedulePlan plan = schedule(in, config_with(1000, 70));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].key, 1u);
  EXPECT_TRUE(plan.rejected.empty());
}

TEST(Scheduler, RespectsMaxRunning) {
  SchedulerInput in;
  in.running = {decoding(1, 4, 1), decoding(2, 4, 1)};
  in.waiting = {fresh(3, 4), fresh(4, 4)};
  const SchedulePlan plan = schedule(in, config_with(1000, 1 << 20, 3));
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.chunks[2].key, 3u);
}

TEST(Scheduler, PreemptsNewestWhenOutOfMemory) {
  // Three decoding sequences at a row boundary: the next token of each adds a row (a page).
  SchedulerInput in;
  in.running = {decoding(1, 3, 1), decoding(2, 3, 1), decoding(3, 3, 1)};  // n_computed 3 → 4 after the step
  // Before: 3 * 10 = 30 pages. After the step: 3 * 11 = 33.
  const SchedulePlan plan = schedule(in, config_with(1000, 32));
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0], 3u);  // the newest
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].key, 1u);
  EXPECT_EQ(plan.chunks[1].key, 2u);
  EXPECT_EQ(plan.projected_pages, 22);
}

TEST(Scheduler, NoAdmissionsInAStepThatPreempts) {
  SchedulerInput in;
  in.running = {decoding(1, 3, 1), decoding(2, 3, 1)};
  in.waiting = {fresh(3, 1)};
  const SchedulePlan plan = schedule(in, config_with(1000, 21));
  EXPECT_EQ(plan.preempted.size(), 1u);
  for (const ScheduledChunk& c : plan.chunks) EXPECT_FALSE(c.admit);
}

TEST(Scheduler, RejectsWhatCanNeverFit) {
  SchedulerInput in;
  in.waiting = {fresh(1, 1000), fresh(2, 4)};  // 1 needs 10 + 250 pages
  const SchedulePlan plan = schedule(in, config_with(1000, 50));
  ASSERT_EQ(plan.rejected.size(), 1u);
  EXPECT_EQ(plan.rejected[0], 1u);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].key, 2u);
}

TEST(Scheduler, PrefixHitStartsFromTheCachedLength) {
  SchedulerInput in;
  in.waiting = {{1, 64, 100, 100}};  // 64 tokens came from the prefix cache
  const SchedulePlan plan = schedule(in, config_with(1000, 1 << 20));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].n_tokens, 36);
}

TEST(Scheduler, StarvedResidentSequencesStayResident) {
  SchedulerInput in;
  in.running = {decoding(1, 4, 1), decoding(2, 4, 1), decoding(3, 4, 1)};
  const SchedulePlan plan = schedule(in, config_with(2, 1 << 20));
  EXPECT_EQ(plan.chunks.size(), 2u);
  EXPECT_TRUE(plan.preempted.empty());
}

TEST(Scheduler, FullPagesSharedWithAnOlderSequenceAreChargedOnce) {
  // Two sequences restored from one 40-token snapshot share its 10 full pages: 20 + 10 pages, not 40.
  SchedulerInput in;
  in.running = {decoding(1, 40, 1), {2, 40, 40, 41, 0, 10}};
  SchedulePlan plan = schedule(in, config_with(1000, 31));
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_EQ(plan.projected_pages, 30);
  // A waiting prefix hit whose match shares 10 pages with a resident sequence is admitted on the same terms.
  in.running = {decoding(1, 40, 1)};
  in.waiting = {{2, 40, 41, 41, 0, 10}};
  plan = schedule(in, config_with(1000, 31));
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_TRUE(plan.chunks[1].admit);
  in.waiting[0].n_shared_pages = 0;  // nothing shared: 20 + 20 pages do not fit
  plan = schedule(in, config_with(1000, 31));
  EXPECT_EQ(plan.chunks.size(), 1u);
}

TEST(CacheFootprint, GrowsOnePagePerRowsPerPageRows) {
  CacheFootprint f;
  f.fixed_bytes = 10;
  f.page_bytes = 6;
  f.streams = {{4, 3, 2}, {128, 5, 1}};  // 2 rows per page; 1 row per page
  EXPECT_EQ(f.pages_at(3), 0);
  EXPECT_EQ(f.pages_at(4), 1);
  EXPECT_EQ(f.pages_at(8), 1);
  EXPECT_EQ(f.pages_at(12), 2);
  EXPECT_EQ(f.pages_at(128), 16 + 1);
  EXPECT_EQ(f.bytes_at(0), 10);
  EXPECT_EQ(f.bytes_at(128), 10 + 17 * 6);
  EXPECT_EQ(f.fixed_pages(), 2);
  EXPECT_EQ(f.charge_pages(128), 19);
}

}  // namespace
}  // namespace deepinfer
