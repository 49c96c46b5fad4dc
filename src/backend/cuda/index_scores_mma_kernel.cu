// The indexer's scores with the dot products on the tensor cores (DEEPINFER_CUDA_INDEX_SCORES=mma; kernels.h:
// IndexScoreLaunch::tensor_cores). index_scores_kernel makes each q_h . K_j a chain of 128 fp32 FMAs, a lane per
// head: at 64k tokens of context, 16k keys x 64 heads x 128 a ratio-4 layer and token, from shared memory. Here a
// block takes 64 keys and every head as mma.sync m16n8k16 tiles (heads x keys, bf16 operands, fp32 sums).
//
// Exactness. The operands are bf16 terms whose sum is the value: q split in three (linear_mma_fragments.cuh's
// split3; a warp runs the mid and lo mmas only where one of its q values has low bits), the keys likewise where a
// block's keys are not all bf16 values (the decoded FP4 keys always are: e2m1 codes times a power of two). So
// every product is exact and each dot product is summed in fp32, 16 dimensions an mma. The rest is
// index_scores_kernel's: bf16(relu(bf16(dot)) * w_h) added over the heads in its order (lane h, then h + 32, then
// the warp's butterfly), rounded to bf16. Where the dot products come out the same as its FMA chains the scores are
// its bits: mostly so where every partial sum is exact (FP4 q and keys whose block scales are not far apart), but
// not always, as the tensor cores align a step's products to the largest and truncate (a sum that cancels a large
// product may lose a small one's low bits). Elsewhere they differ in the last bits of a dot product, within the
// reference's bound; no test expects the FMA kernel's bits from this one. A key's score never depends on the other
// keys of its block or on the token count (each mma output depends only on its own row and column).
//
// Layout: 4 warps; warp w computes keys 16 w .. 16 w + 15 (two n8 tiles) against all heads (up to four m16 tiles)
// over the dimension in 32-wide chunks, lane (g, tig) taking dims 8 tig .. 8 tig + 7 of a chunk (the K
// permutation of linear_mma_kernel.cu: A and B share it), so that it reads its q and key rows as float4 runs.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_launch.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_mma_fragments.cuh"
#include "backend/cuda/packed_rows.cuh"
#include "backend/cuda/ptx_instructions.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kKeysPerBlock = 64;
constexpr int kMaxHeadTiles = kIndexScoresMmaMaxHeads / 16;

// Shared floats per row: the dimension padded to whole 32-wide chunks, plus 4 so that the 8 rows a quarter-warp
// reads fall in different banks.
__host__ __device__ constexpr int64_t row_pitch(int64_t dim) { return (dim + 31) / 32 * 32 + 4; }

// A float4 run of 8 values from shared memory.
__device__ __forceinline__ void load8(const float* at, float v[8]) {
  const float4 a = reinterpret_cast<const float4*>(at)[0], b = reinterpret_cast<const float4*>(at)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <bool kPacked>
__global__ void __launch_bounds__(kThreads) index_scores_mma_kernel(const IndexScoreLaunch p) {
  DI_DYNAMIC_SHARED(float, smem);
  const int64_t t = blockIdx.y;
  const int64_t n_keys = p.token_keys ? p.token_keys[t] : p.n_keys;  // this token's keys
  const int64_t j0 = int64_t(blockIdx.x) * kKeysPerBlock;
  if (j0 >= n_keys) return;  // the whole block: no barrier waits
  const int dim = int(p.dim), n_heads = int(p.n_heads), pitch = int(row_pitch(dim)), dim_pad = pitch - 4;
  const int n_head_tiles = (n_heads + 15) / 16;
  int* keys_low_bits = reinterpret_cast<int*>(smem);    // a key value of the block is not a bf16 value
  float* q_s = smem + 4;                                 // [n_head_tiles * 16][pitch], 16-byte aligned
  float* k_s = q_s + n_head_tiles * 16 * pitch;          // [kKeysPerBlock][pitch]
  const float* q = p.q + t * n_heads * dim;
  const float* weights = p.weights + t * n_heads;
  float* scores = p.scores + (p.token_scores_at ? p.token_scores_at[t] : t * p.n_keys);
  const int64_t first_row = p.token_keys_at ? p.token_keys_at[t] : 0;  // this token's key rows

  if (threadIdx.x == 0) *keys_low_bits = 0;
  // q and the block's keys into shared memory, zero past the heads, the dimension and the token's keys.
  for (int i = threadIdx.x; i < n_head_tiles * 16 * dim_pad; i += kThreads) {
    const int h = i / dim_pad, d = i % dim_pad;
    q_s[h * pitch + d] = h < n_heads && d < dim ? q[h * dim + d] : 0.0f;
  }
  bool low_bits = false;
  const PackedRowFormat key_format{PackedRowKind::kE2m1E8m0Scales, dim, 0, int32_t(p.key_block)};  // kPacked
  for (int i = threadIdx.x; i < kKeysPerBlock * dim_pad; i += kThreads) {
    const int u = i / dim_pad, d = i % dim_pad;
    const int64_t j = j0 + u;
    float v = 0.0f;
    if (j < n_keys && d < dim) {
      if constexpr (kPacked) {
        v = packed_row_value(key_format, p.packed_keys + p.key_slots[first_row + j] * p.key_row_bytes, d);
      } else {
        v = p.keys[(first_row + j) * dim + d];
      }
    }
    low_bits |= (__float_as_uint(v) & 0xffffu) != 0;
    k_s[u * pitch + d] = v;
  }
  __syncthreads();  // keys_low_bits is 0 before any thread sets it
  if (low_bits) *keys_low_bits = 1;
  __syncthreads();
  const bool split_keys = *keys_low_bits != 0;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  float acc[kMaxHeadTiles][2][4] = {};
  for (int c0 = 0; c0 < dim_pad; c0 += 32) {  // chunks in ascending order
    float kh[2][8], km[2][8], kl[2][8];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float k[8];
      load8(k_s + (warp * 16 + nt * 8 + g) * pitch + c0 + 8 * tig, k);
      split8(k, kh[nt], km[nt], kl[nt]);
    }
#pragma unroll
    for (int mt = 0; mt < kMaxHeadTiles; ++mt) {
      if (mt >= n_head_tiles) break;  // block-uniform
      float qa[8], qb[8], ha[8], ma[8], la[8], hb[8], mb[8], lb[8];
      load8(q_s + (mt * 16 + g) * pitch + c0 + 8 * tig, qa);
      load8(q_s + (mt * 16 + g + 8) * pitch + c0 + 8 * tig, qb);
      const bool q_low = __any_sync(0xffffffffu, split8(qa, ha, ma, la) | split8(qb, hb, mb, lb));
#pragma unroll
      for (int s = 0; s < 2; ++s) {  // the chunk's two 16-wide steps
        auto a_of = [&](const float* x, const float* y, uint32_t a[4]) {
          a[0] = pack_bf16(x[4 * s], x[4 * s + 1]);
          a[1] = pack_bf16(y[4 * s], y[4 * s + 1]);
          a[2] = pack_bf16(x[4 * s + 2], x[4 * s + 3]);
          a[3] = pack_bf16(y[4 * s + 2], y[4 * s + 3]);
        };
        uint32_t a_hi[4], a_mid[4], a_lo[4];
        a_of(ha, hb, a_hi);
        if (q_low) {
          a_of(ma, mb, a_mid);
          a_of(la, lb, a_lo);
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          // q's terms in order, each against the keys' terms in order: a fixed sequence of mmas per output.
          auto times_keys = [&](const uint32_t a[4]) {
            mma_bf16(acc[mt][nt], a, pack_bf16(kh[nt][4 * s], kh[nt][4 * s + 1]), pack_bf16(kh[nt][4 * s + 2], kh[nt][4 * s + 3]));
            if (split_keys) {
              mma_bf16(acc[mt][nt], a, pack_bf16(km[nt][4 * s], km[nt][4 * s + 1]), pack_bf16(km[nt][4 * s + 2], km[nt][4 * s + 3]));
              mma_bf16(acc[mt][nt], a, pack_bf16(kl[nt][4 * s], kl[nt][4 * s + 1]), pack_bf16(kl[nt][4 * s + 2], kl[nt][4 * s + 3]));
            }
          };
          times_keys(a_hi);
          if (q_low) {
            times_keys(a_mid);
            times_keys(a_lo);
          }
        }
      }
    }
  }

  // The dot products into shared memory, [key][head] (over q, which every warp is done with), then each warp
  // finishes its keys: lane h takes heads h, h + 32, ..., as index_scores_kernel does.
  __syncthreads();
  const int dot_pitch = n_head_tiles * 16 + 1;
  float* dot_s = q_s;  // [kKeysPerBlock][dot_pitch]
#pragma unroll
  for (int mt = 0; mt < kMaxHeadTiles; ++mt) {
    if (mt >= n_head_tiles) break;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int key = warp * 16 + nt * 8 + 2 * tig, head = mt * 16 + g;
      dot_s[key * dot_pitch + head] = acc[mt][nt][0];
      dot_s[(key + 1) * dot_pitch + head] = acc[mt][nt][1];
      dot_s[key * dot_pitch + head + 8] = acc[mt][nt][2];
      dot_s[(key + 1) * dot_pitch + head + 8] = acc[mt][nt][3];
    }
  }
  __syncwarp();  // a warp reads only its own keys' dot products
  for (int u = 0; u < 16; ++u) {
    const int key = warp * 16 + u;
    const int64_t j = j0 + key;
    if (j >= n_keys) break;  // warp-uniform
    float total = 0.0f;
    for (int h = lane; h < n_heads; h += 32) total += round_bf16(fmaxf(round_bf16(dot_s[key * dot_pitch + h]), 0.0f) * weights[h]);
    const float sum = warp_sum(total);
    if (lane == 0) scores[j] = round_bf16(sum);
  }
}

}  // namespace

size_t index_scores_mma_shared_bytes(int64_t n_heads, int64_t dim) {
  const int64_t head_rows = (n_heads + 15) / 16 * 16;
  const int64_t staged = (head_rows + kKeysPerBlock) * row_pitch(dim), dots = kKeysPerBlock * (head_rows + 1);
  return size_t(4 + (staged > dots ? staged : dots)) * sizeof(float);  // the flag's 16 bytes first
}

void launch_index_scores_mma(const IndexScoreLaunch& p, cudaStream_t stream) {
  if (p.n_keys == 0) return;
  DI_CHECK(p.n_heads > 0 && p.n_heads <= kIndexScoresMmaMaxHeads && p.dim > 0 && p.n_tokens > 0 && p.n_tokens <= 65535);
  const bool packed = p.key_slots != nullptr;
  DI_CHECK(!packed || (p.packed_keys && p.key_row_bytes > 0 && p.key_block > 0));
  const size_t smem = index_scores_mma_shared_bytes(p.n_heads, p.dim);
  auto* kernel = packed ? index_scores_mma_kernel<true> : index_scores_mma_kernel<false>;
  if (smem > 48 * 1024) DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const unsigned key_blocks = unsigned((p.n_keys + kKeysPerBlock - 1) / kKeysPerBlock);
  launch_kernel(kernel, dim3(key_blocks, unsigned(p.n_tokens)), kThreads, smem, stream, p);
  DI_CUDA_CHECK_LAUNCH();
}

}  // namespace deepinfer::cuda
