// A fixed pool of worker threads for data-parallel loops: parallel_for splits [0, n) into contiguous
// ranges, one per thread, and returns when all are done. The calling thread takes the first range.
// Not re-entrant: a parallel_for body must not call parallel_for on the same pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // body(begin, end) over contiguous ranges covering [0, n); ranges are at least min_chunk long.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body);

 private:
  void worker_loop(int index);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace deepinfer
