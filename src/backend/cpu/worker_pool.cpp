#include "backend/cpu/worker_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DI_CPU_RELAX() _mm_pause()
#else
#define DI_CPU_RELAX() std::this_thread::yield()
#endif

namespace deepinfer::cpu {

WorkerPool::WorkerPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  ranges_.assign(size_t(n_threads), {0, 0});
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void WorkerPool::worker_loop(int index) {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = 0;
  while (true) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto spin_start = Clock::now();
      for (uint32_t spins = 1; (g = generation_.load(std::memory_order_acquire)) == seen; ++spins) {
        DI_CPU_RELAX();
        if (spins % 256 == 0 && Clock::now() - spin_start > std::chrono::microseconds(kSpinMicros)) {
          sleeping_.fetch_add(1);
          generation_.wait(seen);  // returns at once if the generation moved meanwhile
          sleeping_.fetch_sub(1);
        }
      }
    }
    if (stop_.load()) return;
    seen = g;
    const auto range = ranges_[size_t(index)];
    if (range.first < range.second) (*body_)(range.first, range.second);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void WorkerPool::parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t n_parts =
      std::max<int64_t>(1, std::min<int64_t>(size(), (n + min_chunk - 1) / std::max<int64_t>(1, min_chunk)));
  if (n_parts == 1 || workers_.empty()) {
    body(0, n);
    return;
  }
  for (int64_t p = 0; p < int64_t(ranges_.size()); ++p) {
    ranges_[size_t(p)] = p < n_parts ? std::pair<int64_t, int64_t>{n * p / n_parts, n * (p + 1) / n_parts}
                                     : std::pair<int64_t, int64_t>{0, 0};
  }
  body_ = &body;
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes ranges_ / body_ and orders against the sleeping_ check
  if (sleeping_.load() > 0) generation_.notify_all();
  body(ranges_[0].first, ranges_[0].second);
  while (pending_.load(std::memory_order_acquire) != 0) DI_CPU_RELAX();
}

}  // namespace deepinfer::cpu
