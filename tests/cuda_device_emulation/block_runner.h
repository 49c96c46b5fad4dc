// The execution model of the device emulation: a grid's blocks run one at a time on the calling OS thread,
// each block's threads as cooperative fibers that switch only at barriers, warp collectives (votes, shuffles,
// mma.sync) and exit. The rules a GPU leaves undefined fail loudly here (file:line, block, thread): a
// barrier some thread skips or reaches at another line, a warp collective a lane of its mask misses or
// meets at another line, a thread that exits while others wait for it, a cp.async never waited for.
// What it cannot show: timing, races between blocks (they never overlap), the memory model's reorderings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace deepinfer::device_emulation {

[[noreturn]] void fail(const char* what);
inline void require(bool ok, const char* what) {
  if (!ok) fail(what);
}

struct BlockInfo {
  dim3 block_idx, block_dim, grid_dim;
};
const BlockInfo& current_block();
const dim3& current_thread_index();

void block_barrier(const char* file, int line);

// One lane's part in a warp collective: its inputs, then the outputs the combine step gave it.
struct LaneIo {
  uint64_t in[10];
  uint64_t out[4];
};
// Runs once, when the last lane of the mask arrives, over the 32 lanes' slots (only the mask's are valid).
using Combine = void (*)(LaneIo* lanes, uint32_t mask);
void warp_collective(const char* op, uint32_t mask, LaneIo& io, Combine combine, const char* file, int line);
void combine_any(LaneIo* lanes, uint32_t mask);
void combine_shfl_xor(LaneIo* lanes, uint32_t mask);

// The running block's dynamic shared memory (the launch's bytes, filled with 0xff before the block).
void* dynamic_shared(size_t* bytes);
// Whether [p, p + bytes) lies in the block's shared memory, static or dynamic.
bool is_shared(const void* p, size_t bytes);

// A cp.async of this thread: lands at its next cp_async_wait_all (the destination reads 0xff bytes until then).
void cp_async_issue(void* shared_dst, const void* global_src, size_t bytes, size_t src_bytes);
void cp_async_wait_all();

// Runs `thread_body` for every thread of every block of the grid, blocks in x, y, z order.
void run_grid(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const std::function<void()>& thread_body);

}  // namespace deepinfer::device_emulation
