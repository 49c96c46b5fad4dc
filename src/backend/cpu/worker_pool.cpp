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
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void WorkerPool::run_chunks(uint32_t gen) {
  while (true) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    if (uint32_t(t >> 32) != gen) return;
    const int64_t n_chunks = n_chunks_.load(std::memory_order_relaxed);  // stale values fail the CAS below
    const int64_t i = int64_t(t & 0xffffffffu);
    if (i >= n_chunks) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    const int64_t n = n_.load(std::memory_order_relaxed);
    (*body_.load(std::memory_order_relaxed))(n * i / n_chunks, n * (i + 1) / n_chunks);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void WorkerPool::worker_loop() {
  using Clock = std::chrono::steady_clock;
  uint32_t seen = 0;
  while (true) {
    uint32_t g = generation_.load(std::memory_order_acquire);
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
    run_chunks(g);
  }
}

void WorkerPool::parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
  const int64_t n_chunks = std::min<int64_t>(max_chunks, int64_t(size()) * kChunksPerThread);
  if (n_chunks == 1 || workers_.empty()) {
    body(0, n);
    return;
  }
  body_.store(&body, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  n_chunks_.store(n_chunks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  ticket_.store(uint64_t(gen) << 32, std::memory_order_release);
  generation_.store(gen);  // seq_cst: ordered before the sleeping_ check
  if (sleeping_.load() > 0) generation_.notify_all();
  run_chunks(gen);
  while (done_.load(std::memory_order_acquire) != n_chunks) DI_CPU_RELAX();
}

}  // namespace deepinfer::cpu
