// The linear op on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulation; sm_80 and later,
// so the same code runs on sm_89, sm_90a, sm_100a and sm_120). The backend's default linear since its tests
// passed on an H200 (2026-12-04); DEEPINFER_CUDA_LINEAR=fma selects the portable FMA kernel instead. From 64
// tokens on, launch_linear_mma may run the staged kernel (linear_mma_staged_kernel.cu) instead: the same bits,
// built from the same fragments (linear_mma_fragments.cuh).
//
// Exact operands. Each weight is decoded in registers to bf16 with its e8m0 scale applied: e4m3 and e2m1
// values have at most 4 significant bits, so value * 2^e is a bf16 exactly while it stays in bf16's normal
// range, which the weight cache checks once per weight (DeviceWeight::mma_exact; a weight with extreme
// scale bytes keeps the FMA path). The activations are fp32 values (bf16 values in most calls, not all):
// x = hi + mid + lo with three bf16 terms is exact, so a step runs three mmas where x has low bits. For a
// bf16 x, mid and lo are zero: their mmas would add nothing and are skipped, so a result does not depend on
// whether x had low bits elsewhere in the call.
//
// Layout. A warp owns 16 weight rows and 8 * NT tokens, over a slice of K: K is split into S slices by K
// alone (never by the token count), the S warps of a block take one slice each and the block adds their
// partial sums in warp order. A token's outputs are therefore the same whatever batch it is computed in
// (each mma output element depends only on its own A row, B column and accumulator).
//
// K permutation. The fragment layout wants lane (g, tig) = (lane / 4, lane % 4) to hold k = 2 tig, 2 tig + 1
// and 2 tig + 8, 2 tig + 9 of each 16-wide step. Any permutation of k works if A and B share it, so within
// a 32-wide chunk lane tig takes the 8 consecutive k at 8 tig: step s of the chunk gets its k pairs from
// 8 tig + 4 s + {0, 1} and 8 tig + 4 s + {2, 3}. Weight rows and x rows are then read in 8-element runs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_mma_fragments.cuh"

namespace deepinfer::cuda {

namespace {

// One block's tile: S warps (one per K slice) x 32 lanes; the grid's x and y are (row tiles of 16, token tiles
// of 8 * NT). `partial`: S * 32 lanes * 4 * NT floats of shared memory.
template <WeightKind K, int NT>
__device__ __forceinline__ void linear_mma_tile(const LinearLaunch& p, int slice_chunks, float* partial) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * 16;
  const int64_t t0 = int64_t(blockIdx.y) * 8 * NT;
  const int n_chunks = int(p.k_pad / 32);
  const int c_begin = warp * slice_chunks, c_end = min(n_chunks, c_begin + slice_chunks);
  // Rows g and g + 8 of the tile (a spare row repeats the last); tokens g of each n-tile (spare: zero x).
  const int64_t n_a = p.row_begin + min(row0 + g, p.n_rows - 1), n_b = p.row_begin + min(row0 + g + 8, p.n_rows - 1);
  const float* xrow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t t = t0 + 8 * j + g;
    xrow[j] = t < p.n_tokens ? p.x + t * p.k_pad : nullptr;
  }

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;

  // One 32-wide chunk: rows g and g + 8 (raw) times the n-tiles' x, two 16-wide mma steps per x term.
  auto multiply = [&](int c, const Raw8& raw_a, const Raw8& raw_b) {
    const int k0 = c * 32 + 8 * tig;
    float wa[8], wb[8];
    decode8<K>(raw_a, wa);
    decode8<K>(raw_b, wb);
    uint32_t a[2][4];  // per step s: rows g / g + 8, k pairs {0, 1} and {2, 3} of the step's 4
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      a[s][0] = pack_bf16(wa[4 * s], wa[4 * s + 1]);
      a[s][1] = pack_bf16(wb[4 * s], wb[4 * s + 1]);
      a[s][2] = pack_bf16(wa[4 * s + 2], wa[4 * s + 3]);
      a[s][3] = pack_bf16(wb[4 * s + 2], wb[4 * s + 3]);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      float xv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (xrow[j]) {
        const float4 x0 = __ldg(reinterpret_cast<const float4*>(xrow[j] + k0));
        const float4 x1 = __ldg(reinterpret_cast<const float4*>(xrow[j] + k0 + 4));
        xv[0] = x0.x, xv[1] = x0.y, xv[2] = x0.z, xv[3] = x0.w, xv[4] = x1.x, xv[5] = x1.y, xv[6] = x1.z, xv[7] = x1.w;
      }
      float hi[8], mid[8], lo[8];
      // The mid and lo mmas only add zeros (leaving the accumulators as they are) unless some x of this
      // chunk and n-tile has low bits: skipped then, warp-uniformly, without changing any result.
      const bool exact_terms = __any_sync(0xffffffffu, split8(xv, hi, mid, lo));
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        mma_bf16(acc[j], a[s], pack_bf16(hi[4 * s], hi[4 * s + 1]), pack_bf16(hi[4 * s + 2], hi[4 * s + 3]));
        if (exact_terms) {
          mma_bf16(acc[j], a[s], pack_bf16(mid[4 * s], mid[4 * s + 1]), pack_bf16(mid[4 * s + 2], mid[4 * s + 3]));
          mma_bf16(acc[j], a[s], pack_bf16(lo[4 * s], lo[4 * s + 1]), pack_bf16(lo[4 * s + 2], lo[4 * s + 3]));
        }
      }
    }
  };
  // Chunks in ascending order. A single n-tile (decode) has few mmas to hide a load behind, so its chunks go
  // U at a time, software-pipelined: the next group's weight loads are issued before this group's decode and
  // mmas, so that U chunks' loads are always in flight (run 2, H200: 0.65 TB/s at one token when each group's
  // loads waited for the previous group's mmas); the rest, and every chunk of a multi-tile warp, one at a
  // time. The mma order is the same for every U.
  constexpr int U = NT == 1 ? 4 : 1;
  int c = c_begin;
  if constexpr (U > 1) {
    auto load_group = [&](int c0, Raw8 (&ra)[U], Raw8 (&rb)[U]) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        ra[u] = load_raw8<K>(p, n_a, (c0 + u) * 32 + 8 * tig);
        rb[u] = load_raw8<K>(p, n_b, (c0 + u) * 32 + 8 * tig);
      }
    };
    const int n_groups = (c_end - c_begin) / U;  // c_end < c_begin (an idle slice) leaves n_groups <= 0
    Raw8 ra[U], rb[U];
    if (n_groups > 0) load_group(c, ra, rb);
#pragma unroll 1
    for (int gi = 0; gi < n_groups; ++gi, c += U) {
      Raw8 next_a[U], next_b[U];
      const bool more = gi + 1 < n_groups;  // warp-uniform
      if (more) load_group(c + U, next_a, next_b);
#pragma unroll
      for (int u = 0; u < U; ++u) multiply(c + u, ra[u], rb[u]);
      if (more) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          ra[u] = next_a[u];
          rb[u] = next_b[u];
        }
      }
    }
  }
#pragma unroll 1
  for (; c < c_end; ++c) multiply(c, load_raw8<K>(p, n_a, c * 32 + 8 * tig), load_raw8<K>(p, n_b, c * 32 + 8 * tig));

  // The slices' partial sums, added in warp order by the warp-0 lanes that own each output.
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[((warp * NT + j) * 4 + i) * 32 + lane] = acc[j][i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float total = partial[((0 * NT + j) * 4 + i) * 32 + lane];
      for (int w = 1; w < n_warps; ++w) total += partial[((w * NT + j) * 4 + i) * 32 + lane];
      // c0, c1: row g, tokens 2 tig, 2 tig + 1; c2, c3: row g + 8, the same tokens (of n-tile j).
      const int64_t r = row0 + g + (i >= 2 ? 8 : 0);
      const int64_t t = t0 + 8 * j + 2 * tig + (i & 1);
      if (r < p.n_rows && t < p.n_tokens) {
        const int64_t o = t * p.n_rows + r;
        p.out[o] = apply_epilogue(p.epilogue, total, p.bias ? p.bias[o] : 0.0f);
      }
    }
  }
}

template <WeightKind K, int NT>
__global__ void __launch_bounds__(kMaxSlices * 32, 1) linear_mma_kernel(const LinearLaunch p, int slice_chunks) {
  DI_DYNAMIC_SHARED(float, partial);
  linear_mma_tile<K, NT>(p, slice_chunks, partial);
}

// Grouped: blockIdx.z picks the op; the grid covers the largest op, and a block past its own op's rows or
// tokens returns at once (the whole block: no barrier is left waiting).
template <WeightKind K, int NT>
__global__ void __launch_bounds__(kMaxSlices * 32, 1) linear_mma_grouped_kernel(const LinearLaunch* ops, int slice_chunks) {
  DI_DYNAMIC_SHARED(float, partial);
  const LinearLaunch& p = ops[blockIdx.z];
  if (int64_t(blockIdx.x) * 16 >= p.n_rows || int64_t(blockIdx.y) * 8 * NT >= p.n_tokens) return;
  linear_mma_tile<K, NT>(p, slice_chunks, partial);
}

template <WeightKind K>
void launch_kind_mma_grouped(const LinearLaunch* ops, int n_ops, int64_t k_pad, int64_t max_rows, int64_t max_tokens,
                             cudaStream_t stream) {
  const SliceSplit split = slice_split(k_pad);
  const unsigned row_tiles = unsigned((max_rows + 15) / 16);
  if (max_tokens <= 8) {  // the tile shape does not change any sum (file comment): chosen by the largest op
    const size_t smem = size_t(split.slices) * 32 * 4 * 1 * sizeof(float);
    launch_kernel(linear_mma_grouped_kernel<K, 1>, dim3(row_tiles, unsigned((max_tokens + 7) / 8), unsigned(n_ops)),
                  split.slices * 32, smem, stream, ops, split.slice_chunks);
  } else {
    const size_t smem = size_t(split.slices) * 32 * 4 * 4 * sizeof(float);
    launch_kernel(linear_mma_grouped_kernel<K, 4>, dim3(row_tiles, unsigned((max_tokens + 31) / 32), unsigned(n_ops)),
                  split.slices * 32, smem, stream, ops, split.slice_chunks);
  }
  DI_CUDA_CHECK_LAUNCH();
}

template <WeightKind K>
void launch_kind_mma(const LinearLaunch& p, cudaStream_t stream) {
  const SliceSplit split = slice_split(p.k_pad);
  const int slices = split.slices, slice_chunks = split.slice_chunks;
  const unsigned row_tiles = unsigned((p.n_rows + 15) / 16);
  if (p.n_tokens <= 8) {
    const size_t smem = size_t(slices) * 32 * 4 * 1 * sizeof(float);
    launch_kernel(linear_mma_kernel<K, 1>, dim3(row_tiles, unsigned((p.n_tokens + 7) / 8)), slices * 32, smem, stream, p,
                  slice_chunks);
  } else {
    const size_t smem = size_t(slices) * 32 * 4 * 4 * sizeof(float);
    launch_kernel(linear_mma_kernel<K, 4>, dim3(row_tiles, unsigned((p.n_tokens + 31) / 32)), slices * 32, smem, stream, p,
                  slice_chunks);
  }
  DI_CUDA_CHECK_LAUNCH();
}

// The multiprocessors of the current device, looked up once per device.
int sm_count() {
  static std::atomic<int> counts[64] = {};
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 64) {
    int n = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }
  int n = counts[device].load(std::memory_order_relaxed);
  if (n == 0) {
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Which kernel runs an op (all give the same bits). The staged kernel decodes each weight once per 64 tokens
// instead of once per 32-token warp tile, but a block walks all of K and an SM holds two: it is chosen where
// its tiles give every SM two blocks, split over K where only the slices' blocks fill the device.
enum class MmaPlan { kRegisters, kStaged, kStagedSplit };
MmaPlan plan(const LinearLaunch& p, MmaKernelChoice choice) {
  if (p.n_tokens < 64) return MmaPlan::kRegisters;
  const bool can_split = linear_mma_staged_partial_floats(p) > 0;
  if (choice == MmaKernelChoice::kStaged) return MmaPlan::kStaged;
  if (choice == MmaKernelChoice::kStagedSplit) return can_split ? MmaPlan::kStagedSplit : MmaPlan::kStaged;
  const int64_t blocks = ((p.n_rows + 63) / 64) * ((p.n_tokens + 63) / 64), n_sms = sm_count();
  if (blocks >= 2 * n_sms) return MmaPlan::kStaged;
  if (can_split && blocks * slice_split(p.k_pad).slices >= n_sms) return MmaPlan::kStagedSplit;
  return MmaPlan::kRegisters;
}

}  // namespace

int64_t linear_mma_partial_floats(const LinearLaunch& p, MmaKernelChoice choice) {
  return plan(p, choice) == MmaPlan::kStagedSplit ? linear_mma_staged_partial_floats(p) : 0;
}

void launch_linear_mma_registers(const LinearLaunch& p, cudaStream_t stream) {
  DI_CHECK(p.k_pad % 32 == 0 && p.n_rows > 0 && p.n_tokens > 0);
  DI_CHECK_MSG((p.n_tokens + 7) / 8 <= 65535, "too many tokens for one linear launch");
  switch (p.kind) {
    case WeightKind::kBf16: launch_kind_mma<WeightKind::kBf16>(p, stream); break;
    case WeightKind::kFp8: launch_kind_mma<WeightKind::kFp8>(p, stream); break;
    case WeightKind::kFp4: launch_kind_mma<WeightKind::kFp4>(p, stream); break;
  }
}

void launch_linear_mma(const LinearLaunch& p, cudaStream_t stream, MmaKernelChoice choice) {
  switch (plan(p, choice)) {
    case MmaPlan::kRegisters: launch_linear_mma_registers(p, stream); break;
    case MmaPlan::kStaged: launch_linear_mma_staged(p, stream); break;
    case MmaPlan::kStagedSplit:  // a caller without scratch gets the unsplit kernel: the same bits
      if (p.partials) launch_linear_mma_staged_split(p, stream);
      else launch_linear_mma_staged(p, stream);
      break;
  }
}

void launch_linear_mma_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad, int64_t max_rows,
                               int64_t max_tokens, cudaStream_t stream, MmaKernelChoice choice) {
  if (n_ops == 0) return;
  // The grouped launch does not split K: its ops' blocks share the device. Staged where its tiles of the
  // largest op, times the ops, give every SM two blocks (fewer may have work: an op's tiles past its own
  // tokens return at once).
  const bool staged = max_tokens >= 64 && (choice != MmaKernelChoice::kFastest ||
                                           ((max_rows + 63) / 64) * ((max_tokens + 63) / 64) * n_ops >= 2 * sm_count());
  if (staged) {
    launch_linear_mma_staged_grouped(ops, n_ops, kind, k_pad, max_rows, max_tokens, stream);
    return;
  }
  DI_CHECK(k_pad % 32 == 0 && max_rows > 0 && max_tokens > 0 && n_ops <= 65535);
  DI_CHECK_MSG((max_tokens + 7) / 8 <= 65535, "too many tokens for one linear launch");
  switch (kind) {
    case WeightKind::kBf16: launch_kind_mma_grouped<WeightKind::kBf16>(ops, n_ops, k_pad, max_rows, max_tokens, stream); break;
    case WeightKind::kFp8: launch_kind_mma_grouped<WeightKind::kFp8>(ops, n_ops, k_pad, max_rows, max_tokens, stream); break;
    case WeightKind::kFp4: launch_kind_mma_grouped<WeightKind::kFp4>(ops, n_ops, k_pad, max_rows, max_tokens, stream); break;
  }
}

}  // namespace deepinfer::cuda
