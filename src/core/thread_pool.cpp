#include "core/thread_pool.h"

#include <algorithm>

namespace deepinfer {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  while (true) {
    std::pair<int64_t, int64_t> range;
    const std::function<void(int64_t, int64_t)>* body;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      range = ranges_[size_t(index)];
      body = body_;
    }
    if (range.first < range.second) (*body)(range.first, range.second);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t n_parts = std::max<int64_t>(1, std::min<int64_t>(size(), (n + min_chunk - 1) / std::max<int64_t>(1, min_chunk)));
  if (n_parts == 1 || workers_.empty()) {
    body(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.assign(size_t(size()), {0, 0});
    for (int64_t p = 0; p < n_parts; ++p) ranges_[size_t(p)] = {n * p / n_parts, n * (p + 1) / n_parts};
    body_ = &body;
    pending_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  body(ranges_[0].first, ranges_[0].second);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace deepinfer
