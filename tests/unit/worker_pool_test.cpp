// The fast backend's worker pool: every index of every parallel_for runs exactly once, and the call returns,
// over many back-to-back calls whose chunk counts change from one call to the next. That is the regime of a
// decode step (~150 small parallel ops) and of the race this guards against: a worker holding the exhausted
// ticket of one call read the next call's larger chunk count, claimed a chunk that did not exist, ran it and
// counted it into the next call, whose caller then waited forever (and the phantom chunk could run a body
// whose stack frame was gone).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <vector>

#include "backend/cpu/worker_pool.h"

namespace deepinfer::cpu {
namespace {

TEST(WorkerPool, EveryIndexOnceAcrossChangingChunkCounts) {
  constexpr int kCalls = 300000;
  auto run = std::async(std::launch::async, [] {
    WorkerPool pool(2);
    std::vector<std::atomic<int>> hits(64);
    int64_t wrong = 0;
    for (int call = 0; call < kCalls; ++call) {
      const int64_t n = 1 + (call * 7) % 40, min_chunk = 1 + call % 3;  // 1..8 chunks, changing every call
      for (int64_t i = 0; i < n; ++i) hits[size_t(i)].store(0, std::memory_order_relaxed);
      pool.parallel_for(n, min_chunk, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n; ++i) wrong += hits[size_t(i)].load(std::memory_order_relaxed) != 1;
    }
    return wrong;
  });
  if (run.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    // A hung parallel_for cannot be interrupted: report and leave (the test binary fails instead of hanging).
    std::fprintf(stderr, "WorkerPool.EveryIndexOnceAcrossChangingChunkCounts: parallel_for did not return in 120 s\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
  EXPECT_EQ(run.get(), 0) << "indices run other than exactly once";
}

}  // namespace
}  // namespace deepinfer::cpu
