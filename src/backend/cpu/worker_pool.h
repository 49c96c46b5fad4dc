// The fast backend's worker threads. parallel_for splits [0, n) into contiguous chunks (each at least
// min_chunk long) that the caller and the workers claim in order from a shared counter, and returns when every
// chunk is done. The chunks shrink as they go ("guided"): each takes 1 / (2 * threads) of what is left, down to
// 1 / (kTailChunksPerThread * threads) of n, so the threads finish within a small chunk of each other while
// the early chunks stay long (each is one sequential stream of weights). With equal chunks of 1 / 8 of n on
// two threads, the caller of a decode step waited for the last chunk of the other thread for ~5% of the step.
// Two properties matter on a shared machine:
// idle workers spin on the work counter for a while (kSpinMicros) before blocking, so the ~150 parallel ops
// of a decode step do not each pay a futex wake-up (tens of microseconds on a VM); and a worker that is
// descheduled does not stall the op, because the caller claims the chunks it has not started (the caller
// waits for chunks, never for workers). What a chunk computes never depends on which thread runs it.
// Not re-entrant: a body must not call parallel_for on the same pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace deepinfer::cpu {

class WorkerPool {
 public:
  explicit WorkerPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // body(begin, end) over contiguous ranges covering [0, n); ranges are at least min_chunk long (except
  // when n is shorter). A thread may run several ranges.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body);

  static constexpr int64_t kSpinMicros = 2000;   // how long an idle worker polls before it blocks
  static constexpr int64_t kTailChunksPerThread = 16;  // the smallest chunk: n / (16 * threads)

 private:
  void worker_loop();
  // Claims and runs chunks of generation `gen` until none is left.
  void run_chunks(uint32_t gen);

  std::vector<std::thread> workers_;
  // Work of the current generation: written before ticket_ / generation_ are released.
  std::atomic<const std::function<void(int64_t, int64_t)>*> body_{nullptr};
  // Chunk i is [bounds_[i], bounds_[i + 1]); written, like body_, before the generation's ticket is released.
  std::vector<int64_t> bounds_;
  // (generation << 32) | (chunk count << 16) | next chunk to claim: a claim (compare-exchange of the whole
  // value) checks the generation and the count it was made against at once.
  std::atomic<uint64_t> ticket_{0};
  static constexpr int64_t kMaxChunks = 0xFFFF;
  static uint64_t make_ticket(uint32_t gen, int64_t n_chunks, int64_t next) {
    return (uint64_t(gen) << 32) | (uint64_t(n_chunks) << 16) | uint64_t(next);
  }
  static uint32_t ticket_generation(uint64_t t) { return uint32_t(t >> 32); }
  static int64_t ticket_chunks(uint64_t t) { return int64_t((t >> 16) & 0xFFFF); }
  static int64_t ticket_next(uint64_t t) { return int64_t(t & 0xFFFF); }
  std::atomic<uint32_t> generation_{0};  // what idle workers wait on
  std::atomic<int64_t> done_{0};         // chunks finished in the current generation
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace deepinfer::cpu
