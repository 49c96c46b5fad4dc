// The fast backend's worker threads: parallel_for splits [0, n) into contiguous ranges, one per thread
// (the caller takes the first), and returns when all are done. Unlike a sleeping pool, idle workers spin
// on the work counter for a while (kSpinMicros) before blocking, so the ~150 parallel ops of a decode step
// do not each pay a futex wake-up (tens of microseconds on a VM). Not re-entrant: a body must not call
// parallel_for on the same pool. Invariant: ranges_ and body_ are written before generation_ is released.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace deepinfer::cpu {

class WorkerPool {
 public:
  explicit WorkerPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // body(begin, end) over contiguous ranges covering [0, n); ranges are at least min_chunk long.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body);

  static constexpr int64_t kSpinMicros = 2000;  // how long an idle worker polls before it blocks

 private:
  void worker_loop(int index);
  std::vector<std::thread> workers_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace deepinfer::cpu
