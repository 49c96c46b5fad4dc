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
    if (ticket_generation(t) != gen) return;
    // The chunk count comes from the same ticket value that the claim below swaps: a count read from anywhere
    // else could belong to the next generation, and a worker holding an exhausted ticket of this one would then
    // claim a chunk that does not exist (and count it into the next generation's done_).
    const int64_t i = ticket_next(t);
    if (i >= ticket_chunks(t)) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    // Claimed chunk i of generation gen: the caller cannot start another generation before it is done, so
    // body_ and bounds_ are this generation's.
    (*body_.load(std::memory_order_relaxed))(bounds_[size_t(i)], bounds_[size_t(i) + 1]);
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
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (n < 2 * min_chunk || workers_.empty()) {
    body(0, n);
    return;
  }
  const int64_t n_threads = size();
  const int64_t smallest = std::max({min_chunk, (n + kTailChunksPerThread * n_threads - 1) / (kTailChunksPerThread * n_threads),
                                     (n + kMaxChunks - 1) / kMaxChunks});
  bounds_.assign(1, 0);
  for (int64_t b = 0; b < n;) {
    b += std::max(smallest, (n - b + 2 * n_threads - 1) / (2 * n_threads));
    if (n - b < min_chunk) b = n;  // no last chunk shorter than min_chunk
    bounds_.push_back(b);
  }
  const int64_t n_chunks = int64_t(bounds_.size()) - 1;
  body_.store(&body, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  ticket_.store(make_ticket(gen, n_chunks, 0), std::memory_order_release);
  generation_.store(gen);  // seq_cst: ordered before the sleeping_ check
  if (sleeping_.load() > 0) generation_.notify_all();
  run_chunks(gen);
  while (done_.load(std::memory_order_acquire) != n_chunks) DI_CPU_RELAX();
}

}  // namespace deepinfer::cpu
