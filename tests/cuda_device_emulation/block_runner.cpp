// The device emulation's block runner (block_runner.h): fibers (fiber.h), scheduled round robin.
// A fiber runs until it blocks at a barrier or a warp collective, or exits; the last thread to arrive at a
// barrier (or the last lane of a collective's mask) releases the others and goes on. A pass over the block in
// which no fiber could run, before all have exited, is a deadlock: reported with where each thread waits.
#include "block_runner.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fiber.h"

// The bounds of the section that __shared__ variables live in (device_emulation.h), from the linker; weak, so
// that a binary without any is still linked.
extern "C" __attribute__((weak)) char __start_devemu_shared[];
extern "C" __attribute__((weak)) char __stop_devemu_shared[];

namespace deepinfer::device_emulation {
namespace {

constexpr size_t kStackBytes = size_t(256) << 10;  // reserved, touched only as deep as a kernel goes
constexpr size_t kGuardBytes = size_t(4) << 10;     // below each stack: an overflow faults at once

enum class State { kRunnable, kAtBarrier, kInWarpOp, kInWarpgroupOp, kExited };

struct CopyInFlight {
  void* dst;
  const void* src;
  size_t bytes, src_bytes;
  uint64_t group;
};

struct AsyncInFlight {
  std::function<void()> land;
  uint64_t group;
};

struct Thread {
  Fiber fiber;
  dim3 index;
  State state = State::kRunnable;
  std::vector<CopyInFlight> copies;
  uint64_t copy_group = 0;  // the open cp.async group (committed ones are below it)
  std::vector<AsyncInFlight> async_ops;
  uint64_t async_group = 0;
};

// Where a thread waits: the barrier or collective it called and the source line it called it from. Every thread
// of a barrier or collective must call it from the same place.
struct CallSite {
  const char* op = nullptr;
  const char* file = nullptr;
  int line = 0;

  bool operator==(const CallSite& o) const {
    return line == o.line && (op == o.op || std::strcmp(op, o.op) == 0) &&
           (file == o.file || std::strcmp(file, o.file) == 0);
  }
  std::string text() const { return std::string(op) + " (" + file + ":" + std::to_string(line) + ")"; }
};

struct Warpgroup {
  int arrived = 0;
  CallSite site;
  uint64_t key = 0;
};

struct Warp {
  uint32_t arrived = 0, mask = 0;
  uint32_t lanes_present = 0, exited = 0;  // lanes the block has; lanes that have exited
  CallSite site;
  Combine combine = nullptr;
  LaneIo lanes[32];
};

struct Block {
  BlockInfo info;
  const std::function<void()>* body = nullptr;
  Fiber scheduler;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  std::vector<Warpgroup> warpgroups;  // only whole ones: a block of 160 threads has one
  int n_exited = 0;
  int barrier_arrived = 0;
  CallSite barrier;  // op "__syncthreads"
  uint8_t* dynamic_shared = nullptr;
  size_t dynamic_bytes = 0;
};

thread_local Block* t_block = nullptr;
thread_local int t_thread = -1;

Block& block() {
  require(t_block != nullptr && t_thread >= 0, "a device function ran outside a kernel launch");
  return *t_block;
}
Thread& self() { return block().threads[size_t(t_thread)]; }

std::string where() {
  const Block& b = *t_block;
  const Thread& t = b.threads[size_t(t_thread)];
  char text[160];
  std::snprintf(text, sizeof text, "block (%u, %u, %u) thread %d (%u, %u, %u)", b.info.block_idx.x, b.info.block_idx.y,
                b.info.block_idx.z, t_thread, t.index.x, t.index.y, t.index.z);
  return text;
}

[[noreturn]] void fail_here(const std::string& what) { fail((what + " [" + where() + "]").c_str()); }

void yield() {
  Block& b = block();
  Fiber::switch_to(b.threads[size_t(t_thread)].fiber, b.scheduler);
}

std::vector<void*>& stacks() {
  static thread_local std::vector<void*> pool;
  return pool;
}
void* stack_for(size_t i) {
  auto& pool = stacks();
  while (pool.size() <= i) {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    require(p != MAP_FAILED, "device emulation: no memory for a thread's stack");
    mprotect(p, kGuardBytes, PROT_NONE);
    pool.push_back(static_cast<char*>(p) + kGuardBytes);
  }
  return pool[i];
}

void finish_thread() {
  Block& b = block();
  Thread& t = self();
  if (!t.copies.empty()) fail_here("a thread exited with cp.async copies it never waited for");
  if (!t.async_ops.empty()) fail_here("a thread exited with asynchronous operations (wgmma) it never waited for");
  if (b.barrier_arrived > 0) {
    fail_here("a thread exited while others wait at " + b.barrier.text());
  }
  const Warp& w = b.warps[size_t(t_thread / 32)];
  if (w.arrived != 0 && (w.mask >> (t_thread % 32) & 1u)) {
    fail_here("a lane exited while its warp waits for it at " + w.site.text());
  }
  if (size_t(t_thread / 128) < b.warpgroups.size()) {
    const Warpgroup& g = b.warpgroups[size_t(t_thread / 128)];
    if (g.arrived != 0) {
      fail_here("a thread exited while its warpgroup waits for it at " + g.site.text());
    }
  }
  t.state = State::kExited;
  ++b.n_exited;
  b.warps[size_t(t_thread / 32)].exited |= 1u << (t_thread % 32);
}

void fiber_entry() {
  (*block().body)();
  finish_thread();
  Block& b = block();
  Fiber::switch_to(b.threads[size_t(t_thread)].fiber, b.scheduler);  // never resumed: this fiber is done
}

[[noreturn]] void report_deadlock(Block& b) {
  std::string text = "deadlock: no thread of the block can run. Waiting:";
  for (size_t i = 0; i < b.threads.size(); ++i) {
    const Thread& t = b.threads[i];
    if (t.state == State::kAtBarrier) {
      text += "\n  thread " + std::to_string(i) + " at " + b.barrier.text();
    } else if (t.state == State::kInWarpOp) {
      text += "\n  thread " + std::to_string(i) + " at " + b.warps[i / 32].site.text();
    } else if (t.state == State::kInWarpgroupOp) {
      text += "\n  thread " + std::to_string(i) + " at " + b.warpgroups[i / 128].site.text();
    } else if (t.state == State::kExited) {
      text += "\n  thread " + std::to_string(i) + " exited";
    }
  }
  t_thread = 0;
  fail_here(text);
}

void run_block(Block& b) {
  const size_t n = b.threads.size();
  for (size_t i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.state = State::kRunnable;
    t.copies.clear();
    t.copy_group = 0;
    t.async_ops.clear();
    t.async_group = 0;
    t.fiber.start(fiber_entry, stack_for(i), kStackBytes);
  }
  for (Warp& w : b.warps) w.arrived = w.exited = 0;
  for (Warpgroup& g : b.warpgroups) g.arrived = 0;
  b.n_exited = 0;
  b.barrier_arrived = 0;
  while (b.n_exited < int(n)) {
    bool ran = false;
    for (size_t i = 0; i < n; ++i) {
      if (b.threads[i].state != State::kRunnable) continue;
      t_thread = int(i);
      Fiber::switch_to(b.scheduler, b.threads[i].fiber);
      ran = true;
    }
    if (!ran) report_deadlock(b);
  }
  t_thread = -1;
}

}  // namespace

void fail(const char* what) {
  std::fprintf(stderr, "device emulation: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

const BlockInfo& current_block() { return block().info; }
const dim3& current_thread_index() { return self().index; }

void block_barrier(const char* file, int line) {
  Block& b = block();
  const CallSite site{"__syncthreads", file, line};
  if (b.n_exited > 0) fail_here(site.text() + " after a thread of the block exited");
  if (b.barrier_arrived == 0) {
    b.barrier = site;
  } else if (site != b.barrier) {
    fail_here("threads of one block at different barriers: " + site.text() + " and " + b.barrier.text());
  }
  if (++b.barrier_arrived == int(b.threads.size())) {
    for (Thread& t : b.threads) t.state = State::kRunnable;
    b.barrier_arrived = 0;
    return;
  }
  self().state = State::kAtBarrier;
  yield();
}

void warp_collective(const char* op, uint32_t mask, LaneIo& io, Combine combine, const char* file, int line) {
  Block& b = block();
  const int lane = t_thread % 32, warp = t_thread / 32;
  Warp& w = b.warps[size_t(warp)];
  const CallSite site{op, file, line};
  if (!(mask >> lane & 1u)) fail_here(site.text() + ": the calling lane is not in the mask");
  if (mask & ~w.lanes_present) fail_here(site.text() + ": the mask names lanes the block does not have");
  if (mask & w.exited) fail_here(site.text() + ": a lane of the mask has exited");
  if (w.arrived == 0) {
    w.mask = mask;
    w.site = site;
    w.combine = combine;
  } else if (w.mask != mask || site != w.site) {
    fail_here("lanes of one warp at different collectives: " + site.text() + " and " + w.site.text());
  }
  std::memcpy(w.lanes[lane].in, io.in, sizeof io.in);
  w.arrived |= 1u << lane;
  if (w.arrived == mask) {
    if (combine) combine(w.lanes, mask);
    for (int l = 0; l < 32; ++l) {
      if (mask >> l & 1u) b.threads[size_t(32 * warp + l)].state = State::kRunnable;
    }
    w.arrived = 0;
  } else {
    self().state = State::kInWarpOp;
    yield();
  }
  std::memcpy(io.out, w.lanes[lane].out, sizeof io.out);
}

void combine_any(LaneIo* lanes, uint32_t mask) {
  uint64_t any = 0;
  for (int l = 0; l < 32; ++l) {
    if (mask >> l & 1u) any |= lanes[l].in[0] != 0;
  }
  for (int l = 0; l < 32; ++l) lanes[l].out[0] = any;
}

void combine_shfl_xor(LaneIo* lanes, uint32_t mask) {
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    const int source = l ^ int(lanes[l].in[1] & 31);
    // A source lane outside the mask gives an undefined value on the GPU.
    if (!(mask >> source & 1u)) fail("__shfl_xor_sync: a lane reads a lane outside the mask");
    lanes[l].out[0] = lanes[source].in[0];
  }
}

void combine_match_any(LaneIo* lanes, uint32_t mask) {
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    uint64_t same = 0;
    for (int m = 0; m < 32; ++m) {
      if ((mask >> m & 1u) && lanes[m].in[0] == lanes[l].in[0]) same |= uint64_t(1) << m;
    }
    lanes[l].out[0] = same;
  }
}

void* dynamic_shared(size_t* bytes) {
  Block& b = block();
  if (bytes) *bytes = b.dynamic_bytes;
  return b.dynamic_shared;
}

bool is_shared(const void* p, size_t bytes) {
  Block& b = block();
  const auto* c = static_cast<const char*>(p);
  const auto* d = reinterpret_cast<const char*>(b.dynamic_shared);
  if (d && c >= d && c + bytes <= d + b.dynamic_bytes) return true;
  return __start_devemu_shared && c >= __start_devemu_shared && c + bytes <= __stop_devemu_shared;
}

void cp_async_issue(void* shared_dst, const void* global_src, size_t bytes, size_t src_bytes) {
  if (!is_shared(shared_dst, bytes)) fail_here("cp.async: the destination is not the block's shared memory");
  if (uintptr_t(shared_dst) % bytes != 0 || (src_bytes > 0 && uintptr_t(global_src) % bytes != 0)) {
    fail_here("cp.async: a misaligned address");
  }
  if (src_bytes > bytes) fail_here("cp.async: src-size exceeds cp-size");
  // Until the wait the destination holds garbage on the GPU: here 0xff bytes, so an early read shows.
  std::memset(shared_dst, 0xff, bytes);
  Thread& t = self();
  t.copies.push_back({shared_dst, global_src, bytes, src_bytes, t.copy_group});
}

void cp_async_commit() { ++self().copy_group; }

void cp_async_wait_group(int n) {
  Thread& t = self();
  require(n >= 0, "cp.async.wait_group: a negative count");
  const uint64_t landed_below = t.copy_group > uint64_t(n) ? t.copy_group - uint64_t(n) : 0;  // committed groups
  std::vector<CopyInFlight> still;
  for (const CopyInFlight& c : t.copies) {  // in issue order, as a later copy to the same bytes must win
    if (c.group >= landed_below) {
      still.push_back(c);
      continue;
    }
    std::memcpy(c.dst, c.src, c.src_bytes);
    std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
  }
  t.copies = std::move(still);
}

void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait_group(0);
}

int thread_rank() {
  block();
  return t_thread;
}

void warpgroup_collective(const char* op, uint64_t key, const char* file, int line) {
  Block& b = block();
  const size_t group = size_t(t_thread / 128);
  const CallSite site{op, file, line};
  if (group >= b.warpgroups.size()) fail_here(site.text() + ": the thread's warpgroup is not whole (128 threads)");
  for (size_t w = 4 * group; w < 4 * group + 4; ++w) {
    if (b.warps[w].exited) fail_here(site.text() + ": a thread of the warpgroup has exited");
  }
  Warpgroup& g = b.warpgroups[group];
  if (g.arrived == 0) {
    g.site = site;
    g.key = key;
  } else if (g.key != key || site != g.site) {
    fail_here("threads of one warpgroup at different collectives or operands: " + site.text() + " and " +
              g.site.text());
  }
  if (++g.arrived == 128) {
    for (size_t i = 128 * group; i < 128 * group + 128; ++i) b.threads[i].state = State::kRunnable;
    g.arrived = 0;
    return;
  }
  self().state = State::kInWarpgroupOp;
  yield();
}

void async_issue(std::function<void()> land) {
  Thread& t = self();
  t.async_ops.push_back({std::move(land), t.async_group});
}

void async_commit() { ++self().async_group; }

void async_wait_group(int n) {
  require(n >= 0, "wait_group: a negative count");
  const uint64_t open = self().async_group;
  const uint64_t landed_below = open > uint64_t(n) ? open - uint64_t(n) : 0;
  // Land in issue order; `land` may not issue more (it only writes results).
  std::vector<AsyncInFlight> ops = std::move(self().async_ops), still;
  for (AsyncInFlight& op : ops) {
    if (op.group >= landed_below) still.push_back(std::move(op));
    else op.land();
  }
  self().async_ops = std::move(still);
}

uint32_t shared_address(const void* p, size_t bytes) {
  Block& b = block();
  const auto* c = static_cast<const uint8_t*>(p);
  if (!b.dynamic_shared || c < b.dynamic_shared || c + bytes > b.dynamic_shared + b.dynamic_bytes) {
    fail_here("a shared-memory address of something outside the block's dynamic shared memory (static shared memory "
              "has no window address in this emulation)");
  }
  return uint32_t(c - b.dynamic_shared);
}

const uint8_t* shared_pointer(uint64_t address, size_t bytes) {
  Block& b = block();
  if (address + bytes > b.dynamic_bytes) fail_here("a shared-memory address past the block's dynamic shared memory");
  return b.dynamic_shared + address;
}

void run_grid(dim3 grid, dim3 block_dim, size_t dynamic_shared_bytes, const std::function<void()>& thread_body) {
  require(t_block == nullptr, "a kernel launched from inside a kernel");
  const size_t n_threads = size_t(block_dim.x) * block_dim.y * block_dim.z;
  Block b;
  b.body = &thread_body;
  b.info.block_dim = block_dim;
  b.info.grid_dim = grid;
  b.threads.resize(n_threads);
  b.warps.resize((n_threads + 31) / 32);
  b.warpgroups.resize(n_threads / 128);
  for (size_t w = 0; w < b.warps.size(); ++w) {
    const size_t lanes = std::min<size_t>(32, n_threads - 32 * w);
    b.warps[w].lanes_present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  for (size_t i = 0; i < n_threads; ++i) {
    b.threads[i].index = dim3(unsigned(i % block_dim.x), unsigned(i / block_dim.x % block_dim.y),
                              unsigned(i / (size_t(block_dim.x) * block_dim.y)));
  }
  b.dynamic_bytes = dynamic_shared_bytes;
  b.dynamic_shared = static_cast<uint8_t*>(std::aligned_alloc(1024, (dynamic_shared_bytes + 1023) / 1024 * 1024 + 1024));
  t_block = &b;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        b.info.block_idx = dim3(x, y, z);
        // Shared memory starts as garbage on the GPU: 0xff bytes here (a NaN in every float).
        std::memset(b.dynamic_shared, 0xff, dynamic_shared_bytes);
        if (__start_devemu_shared) std::memset(__start_devemu_shared, 0xff, size_t(__stop_devemu_shared - __start_devemu_shared));
        run_block(b);
      }
    }
  }
  t_block = nullptr;
  std::free(b.dynamic_shared);
}

}  // namespace deepinfer::device_emulation
