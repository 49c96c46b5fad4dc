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
void combine_match_any(LaneIo* lanes, uint32_t mask);

// The running block's dynamic shared memory (the launch's bytes, filled with 0xff before the block).
void* dynamic_shared(size_t* bytes);
// Whether [p, p + bytes) lies in the block's shared memory, static or dynamic.
bool is_shared(const void* p, size_t bytes);

// A cp.async of this thread, in its open group: lands at the first wait that covers the group (the destination
// reads 0xff bytes until then). commit closes the open group; wait_group(n) lands every committed group but the
// newest n; wait_all is commit then wait_group(0), as the PTX ISA defines it.
void cp_async_issue(void* shared_dst, const void* global_src, size_t bytes, size_t src_bytes);
void cp_async_commit();
void cp_async_wait_group(int n);
void cp_async_wait_all();

// The calling thread's linear index in its block (x fastest), as warps and warpgroups count it.
int thread_rank();

// A warpgroup collective (wgmma's .sync.aligned instructions): the 128 threads of the caller's warpgroup (4
// consecutive warps) must all arrive at the same op, line and key (the operands that must be uniform), none may
// have exited; returns once all have arrived.
void warpgroup_collective(const char* op, uint64_t key, const char* file, int line);

// The calling thread's asynchronous operations that are not cp.async (wgmma.mma_async), in groups as cp.async's:
// `land` runs, in this thread, at the first async_wait_group that covers its group. A thread may not exit with any.
void async_issue(std::function<void()> land);
void async_commit();
void async_wait_group(int n);

// Shared-memory window addresses (__cvta_generic_to_shared, matrix descriptors): here the byte offset into the
// block's dynamic shared memory, which must hold [p, p + bytes); and back, checked the same way.
uint32_t shared_address(const void* p, size_t bytes);
const uint8_t* shared_pointer(uint64_t address, size_t bytes);

// Runs `thread_body` for every thread of every block of the grid, blocks in x, y, z order.
void run_grid(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const std::function<void()>& thread_body);

}  // namespace deepinfer::device_emulation
