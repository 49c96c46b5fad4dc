// The device emulation checked on its own: mma.sync against the PTX ISA's per-element fragment formulas, the
// e4m3 and bf16 conversions against their definitions, __match_any_sync, and the rules it enforces (shared memory starts as
// NaN, cp.async lands at the wait, a skipped barrier or shuffle fails loudly).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "device_emulation.h"
#include "ptx_emulation.h"
#include "ptx_wgmma_emulation.h"
#include "cuda_bf16.h"
#include "cuda_fp8.h"
#include "launch_emulation.h"

namespace deepinfer::cuda {
namespace {

// ---- mma.sync: fragments gathered by the ISA's formulas for element a_i, b_i, c_i of lane (g, t) ----
struct MmaCase {
  std::vector<uint8_t> a_codes;   // [16][32] e4m3 (k32) or unused
  std::vector<uint16_t> a_bf16;   // [16][16] (k16)
  std::vector<uint16_t> b_bf16;   // [16][8] (k, n)
  std::vector<uint8_t> b_codes;   // [32][8]
  float c[16][8];
  float d[16][8];
};

__global__ void mma_bf16_kernel(MmaCase* m) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane % 4;
  uint16_t a[8], b[4];
  for (int i = 0; i < 8; ++i) {
    const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    a[i] = m->a_bf16[size_t(row * 16 + col)];
  }
  for (int i = 0; i < 4; ++i) b[i] = m->b_bf16[size_t((t * 2 + (i & 1) + (i >= 2 ? 8 : 0)) * 8 + g)];
  uint32_t ar[4];
  for (int r = 0; r < 4; ++r) ar[r] = uint32_t(a[2 * r]) | uint32_t(a[2 * r + 1]) << 16;
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = m->c[i < 2 ? g : g + 8][t * 2 + (i & 1)];
  mma_bf16(c, ar, uint32_t(b[0]) | uint32_t(b[1]) << 16, uint32_t(b[2]) | uint32_t(b[3]) << 16);
  for (int i = 0; i < 4; ++i) m->d[i < 2 ? g : g + 8][t * 2 + (i & 1)] = c[i];
}

__global__ void mma_e4m3_kernel(MmaCase* m) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane % 4;
  uint32_t ar[4] = {0, 0, 0, 0}, br[2] = {0, 0};
  for (int i = 0; i < 16; ++i) {
    const int row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8;
    const int col = t * 4 + (i & 3) + (i >= 8 ? 16 : 0);
    ar[i / 4] |= uint32_t(m->a_codes[size_t(row * 32 + col)]) << (8 * (i % 4));
  }
  for (int i = 0; i < 8; ++i) br[i / 4] |= uint32_t(m->b_codes[size_t((t * 4 + (i & 3) + (i >= 4 ? 16 : 0)) * 8 + g)]) << (8 * (i % 4));
  float d[4];
  mma_e4m3(d, ar, br[0], br[1]);
  for (int i = 0; i < 4; ++i) m->d[i < 2 ? g : g + 8][t * 2 + (i & 1)] = d[i];
}

double e4m3(uint8_t code) {  // the e4m3fn definition, finite codes only
  const int e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (code & 0x80) ? -v : v;
}

void run(void (*kernel)(MmaCase*), MmaCase* m) {
  launch_kernel(kernel, dim3(1), dim3(32), 0, nullptr, m);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
}

TEST(DeviceEmulation, MmaBf16MatchesTheIsaFragmentLayout) {
  std::mt19937 rng(7);
  MmaCase m;
  m.a_bf16.resize(16 * 16);
  m.b_bf16.resize(16 * 8);
  // Small integers: every sum is exact, so the emulation's one rounding cannot hide a misplaced element.
  auto small = [&] { return uint16_t(std::bit_cast<uint32_t>(float(int(rng() % 33) - 16)) >> 16); };
  for (auto& v : m.a_bf16) v = small();
  for (auto& v : m.b_bf16) v = small();
  for (auto& row : m.c) for (float& v : row) v = float(int(rng() % 1001) - 500);
  run(mma_bf16_kernel, &m);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      double want = m.c[r][n];
      for (int k = 0; k < 16; ++k) {
        want += double(std::bit_cast<float>(uint32_t(m.a_bf16[size_t(r * 16 + k)]) << 16)) *
                double(std::bit_cast<float>(uint32_t(m.b_bf16[size_t(k * 8 + n)]) << 16));
      }
      EXPECT_EQ(m.d[r][n], float(want)) << "row " << r << " col " << n;
    }
  }
}

TEST(DeviceEmulation, MmaE4m3MatchesTheIsaFragmentLayout) {
  std::mt19937 rng(8);
  MmaCase m;
  m.a_codes.resize(16 * 32);
  m.b_codes.resize(32 * 8);
  auto finite = [&] {
    uint8_t c;
    do c = uint8_t(rng()); while ((c & 0x7f) == 0x7f);
    return c;
  };
  for (auto& v : m.a_codes) v = finite();
  for (auto& v : m.b_codes) v = finite();
  run(mma_e4m3_kernel, &m);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      double want = 0;
      for (int k = 0; k < 32; ++k) want += e4m3(m.a_codes[size_t(r * 32 + k)]) * e4m3(m.b_codes[size_t(k * 8 + n)]);
      EXPECT_EQ(m.d[r][n], float(want)) << "row " << r << " col " << n;
    }
  }
}

// ---- Conversions ----
TEST(DeviceEmulation, E4m3ConversionRoundsToNearestEvenAndSaturates) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(__nv_cvt_float_to_fp8(float(e4m3(uint8_t(code))), __NV_SATFINITE, __NV_E4M3), code) << code;
    // The midpoint to the next code up rounds to the even one of the two.
    if ((code & 0x7f) < 0x7e) {
      const double mid = (e4m3(uint8_t(code)) + e4m3(uint8_t(code + 1))) / 2;
      EXPECT_EQ(__nv_cvt_float_to_fp8(float(mid), __NV_SATFINITE, __NV_E4M3), (code & 1) ? code + 1 : code) << code;
    }
  }
  EXPECT_EQ(__nv_cvt_float_to_fp8(464.0f, __NV_SATFINITE, __NV_E4M3), 0x7e);
  EXPECT_EQ(__nv_cvt_float_to_fp8(-INFINITY, __NV_SATFINITE, __NV_E4M3), 0xfe);
  EXPECT_EQ(__nv_cvt_float_to_fp8(NAN, __NV_SATFINITE, __NV_E4M3), 0x7f);
  EXPECT_EQ(__nv_cvt_float_to_fp8(0x1p-10f, __NV_SATFINITE, __NV_E4M3), 0x00);  // half the smallest step: even
  EXPECT_EQ(__nv_cvt_float_to_fp8(0x1.8p-10f, __NV_SATFINITE, __NV_E4M3), 0x01);
}

TEST(DeviceEmulation, Bf16ConversionRoundsToNearestEven) {
  EXPECT_EQ(__float2bfloat16_rn(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);  // tie, even below
  EXPECT_EQ(__float2bfloat16_rn(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);  // tie, even above
  EXPECT_EQ(__float2bfloat16_rn(std::bit_cast<float>(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(__float2bfloat16_rn(NAN).bits, 0x7fff);
  EXPECT_EQ(__bfloat162float(__float2bfloat16_rn(0x1p-130f)), 0x1p-130f);  // subnormals kept
}

// ---- Shared memory and cp.async ----
__global__ void shared_kernel(float* out, const uint4* src) {
  __shared__ float scratch[64];
  DI_DYNAMIC_SHARED(uint4, dynamic);
  if (threadIdx.x == 0) scratch[0] = 1.0f;
  cp_async16(&dynamic[threadIdx.x], &src[threadIdx.x]);
  float early;
  std::memcpy(&early, &dynamic[threadIdx.x], 4);  // before the wait: not landed
  cp_async_wait_all();
  __syncthreads();
  float landed;
  std::memcpy(&landed, &dynamic[(threadIdx.x + 1) % 32], 4);
  out[threadIdx.x * 4 + 0] = scratch[0];
  out[threadIdx.x * 4 + 1] = scratch[1];  // never written
  out[threadIdx.x * 4 + 2] = early;
  out[threadIdx.x * 4 + 3] = landed;
}

TEST(DeviceEmulation, SharedMemoryStartsAsNanAndCpAsyncLandsAtTheWait) {
  std::vector<float> out(32 * 4);
  std::vector<uint4> src(32);
  for (unsigned i = 0; i < 32; ++i) src[i] = make_uint4(std::bit_cast<uint32_t>(float(i)), 0, 0, 0);
  launch_kernel(shared_kernel, dim3(2), dim3(32), 32 * sizeof(uint4), nullptr, out.data(), src.data());
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(out[size_t(t * 4)], 1.0f);
    EXPECT_TRUE(std::isnan(out[size_t(t * 4 + 1)]));
    EXPECT_TRUE(std::isnan(out[size_t(t * 4 + 2)]));
    EXPECT_EQ(out[size_t(t * 4 + 3)], float((t + 1) % 32));
  }
}

// __match_any_sync: each lane gets the lanes holding its value (lane l holds l % 3, lane 31 a value of its own).
__global__ void match_any_kernel(uint32_t* out) {
  const unsigned lane = threadIdx.x;
  out[lane] = __match_any_sync(0xffffffffu, lane == 31 ? 99u : lane % 3);
}

TEST(DeviceEmulation, MatchAnyGivesTheLanesOfEqualValues) {
  std::vector<uint32_t> out(32);
  launch_kernel(match_any_kernel, dim3(1), dim3(32), 0, nullptr, out.data());
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  for (unsigned l = 0; l < 32; ++l) {
    uint32_t want = 0;
    for (unsigned m = 0; m < 31; ++m) want |= l != 31 && m % 3 == l % 3 ? 1u << m : 0u;
    if (l == 31) want = 1u << 31;
    EXPECT_EQ(out[l], want) << "lane " << l;
  }
  EXPECT_EQ(__popc(out[0]), 11);  // lanes 0, 3, ..., 30
  EXPECT_EQ(__ffs(int(out[1])) - 1, 1);
}

// cp.async groups: wait_group 1 lands the older group only, wait_group 0 the newer too.
__global__ void cp_async_groups_kernel(float* out, const uint4* src) {
  DI_DYNAMIC_SHARED(uint4, dynamic);
  cp_async16(&dynamic[0], &src[0]);
  cp_async_commit();
  cp_async16(&dynamic[1], &src[1]);
  cp_async_commit();
  cp_async_wait<1>();
  std::memcpy(&out[0], &dynamic[0], 4);
  std::memcpy(&out[1], &dynamic[1], 4);
  cp_async_wait<0>();
  std::memcpy(&out[2], &dynamic[1], 4);
}

TEST(DeviceEmulation, CpAsyncWaitGroupLandsAllButTheNewestGroups) {
  std::vector<float> out(3);
  std::vector<uint4> src = {make_uint4(std::bit_cast<uint32_t>(1.0f), 0, 0, 0), make_uint4(std::bit_cast<uint32_t>(2.0f), 0, 0, 0)};
  launch_kernel(cp_async_groups_kernel, dim3(1), dim3(1), 2 * sizeof(uint4), nullptr, out.data(), src.data());
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 2.0f);
}

// ---- wgmma: operands placed by the ISA's no-swizzle K-major formula, D read back by its register layout ----
constexpr int kWgLbo = 128, kWgSbo = 256;  // core matrices adjacent in K, in M / N (2 in K: a 32-wide row)
int wg_offset(int mn, int k) { return (mn / 8) * kWgSbo + (k / 16) * kWgLbo + (mn % 8) * 16 + k % 16; }
uint64_t wg_descriptor(const uint8_t* tile) {
  return (__cvta_generic_to_shared(tile) >> 4) | uint64_t(kWgLbo >> 4) << 16 | uint64_t(kWgSbo >> 4) << 32;
}

// A [64][32] and B [128][32] e4m3 codes (K-major), D [64][128]; `race`: a thread rewrites A before the wait.
__global__ void wgmma_kernel(const uint8_t* a, const uint8_t* b, float* d, bool race) {
  DI_DYNAMIC_SHARED(uint8_t, smem);
  const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  for (int i = tid; i < 64 * 32; i += 128) smem[wg_offset(i / 32, i % 32)] = a[i];
  for (int i = tid; i < 128 * 32; i += 128) smem[8192 + wg_offset(i / 32, i % 32)] = b[i];
  __syncthreads();
  float r[64];
  wgmma_fence();
  wgmma_m64n128k32(r, wg_descriptor(smem), wg_descriptor(smem + 8192));
  wgmma_commit();
  const bool early_nan = std::isnan(r[0]);
  if (race && tid == 0) smem[0] ^= 0x08;
  wgmma_wait<0>();
  for (int i = 0; i < 64; ++i) {
    const int row = 16 * w + lane / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    d[row * 128 + col] = early_nan ? r[i] : -1.0f;
  }
}

TEST(DeviceEmulation, WgmmaMatchesTheIsaLayouts) {
  std::mt19937 rng(7);
  std::vector<uint8_t> a(64 * 32), b(128 * 32);
  for (auto& c : a) c = uint8_t(rng() % 0x7e);  // finite codes, both signs below
  for (auto& c : b) c = uint8_t((rng() % 0x7e) | (rng() & 0x80));
  std::vector<float> d(64 * 128);
  launch_kernel(wgmma_kernel, dim3(1), dim3(128), 8192 + 4096, nullptr, a.data(), b.data(), d.data(), false);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  for (int m = 0; m < 64; ++m) {
    for (int n = 0; n < 128; ++n) {
      double sum = 0.0;
      for (int k = 0; k < 32; ++k) {
        sum += e4m3(a[size_t(m * 32 + k)]) * e4m3(b[size_t(n * 32 + k)]);
      }
      ASSERT_EQ(d[size_t(m * 128 + n)], float(sum)) << m << ", " << n;
    }
  }
}

// ---- Divergence fails loudly ----
__global__ void skipped_barrier_kernel(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void partial_shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
__global__ void two_barriers_kernel(int* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

TEST(DeviceEmulationDeathTest, DivergentSynchronisationFails) {
  std::vector<int> ints(64);
  std::vector<float> floats(32);
  EXPECT_DEATH(
      {
        launch_kernel(skipped_barrier_kernel, dim3(1), dim3(64), 0, nullptr, ints.data());
        cudaStreamSynchronize(nullptr);
      },
      "exited while others wait at __syncthreads");
  EXPECT_DEATH(
      {
        launch_kernel(partial_shuffle_kernel, dim3(1), dim3(32), 0, nullptr, floats.data());
        cudaStreamSynchronize(nullptr);
      },
      "exited while its warp waits");
  EXPECT_DEATH(
      {
        launch_kernel(two_barriers_kernel, dim3(1), dim3(64), 0, nullptr, ints.data());
        cudaStreamSynchronize(nullptr);
      },
      "different barriers");
}

__global__ void partial_wgmma_kernel(const uint8_t*, const uint8_t*, float*, bool) {
  if (threadIdx.x >= 32) wgmma_fence();
}

TEST(DeviceEmulationDeathTest, WgmmaDivergenceAndRacesFail) {
  std::vector<uint8_t> a(64 * 32, 0x38), b(128 * 32, 0x38);
  std::vector<float> d(64 * 128);
  EXPECT_DEATH(
      {
        launch_kernel(partial_wgmma_kernel, dim3(1), dim3(128), 0, nullptr, a.data(), b.data(), d.data(), false);
        cudaStreamSynchronize(nullptr);
      },
      "warpgroup has exited|exited while its warpgroup waits");
  EXPECT_DEATH(
      {
        launch_kernel(wgmma_kernel, dim3(1), dim3(128), 8192 + 4096, nullptr, a.data(), b.data(), d.data(), true);
        cudaStreamSynchronize(nullptr);
      },
      "changed between issue and wait_group");
}

}  // namespace
}  // namespace deepinfer::cuda
