// wgmma.mma_async on the CPU (ptx_wgmma_emulation.h), from the PTX ISA ("Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate", "Matrix Descriptor Format", the canonical K-major layout without swizzle):
//   descriptor: bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
//   49-51 base offset, 62-63 swizzle mode (both must be 0 here: the only layout the kernel uses);
//   operand element (mn, k) of a K-major tile of 8-bit codes: core matrix (mn / 8, k / 16), each 8 rows x 16
//   bytes, at start + (mn / 8) * SBO + (k / 16) * LBO, the element at (mn % 8) * 16 + k % 16 inside it;
//   D (m64n128, f32): register i of lane l in warp w of the warpgroup holds row 16 w + l / 4 + 8 ((i / 2) % 2),
//   column 8 (i / 4) + 2 (l % 4) + i % 2.
// The sum: products exact in double, added in k order, rounded to fp32 once, as the mma.sync emulation does
// (ptx_emulation.cpp says why that is not the tensor core's rounding).
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "ptx_wgmma_emulation.h"

namespace deepinfer::device_emulation {
namespace {

constexpr int kM = 64, kN = 128, kK = 32;

struct Descriptor {
  uint64_t start, leading, stride;
};

Descriptor decode(uint64_t desc) {
  if ((desc >> 62) != 0 || ((desc >> 49) & 7u) != 0) fail("wgmma: a descriptor with swizzle or base offset (not emulated)");
  return {(desc & 0x3fffu) << 4, ((desc >> 16) & 0x3fffu) << 4, ((desc >> 32) & 0x3fffu) << 4};
}

// Operand element (mn, k) of a K-major no-swizzle tile.
double element(const Descriptor& t, int mn, int k) {
  const uint64_t at = t.start + uint64_t(mn / 8) * t.stride + uint64_t(k / 16) * t.leading + uint64_t(mn % 8) * 16 + uint64_t(k % 16);
  return e4m3_value(*shared_pointer(at, 1));
}

// The calling thread's 64 D registers from shared memory as it is now.
std::array<float, 64> compute(int rank, uint64_t a_desc, uint64_t b_desc) {
  const Descriptor a = decode(a_desc), b = decode(b_desc);
  const int w = (rank / 32) % 4, lane = rank % 32;
  double a_rows[2][kK], b_cols[32][kK];  // the thread's 2 rows of A, its 32 columns of B
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < kK; ++k) a_rows[h][k] = element(a, 16 * w + lane / 4 + 8 * h, k);
  }
  for (int q = 0; q < 16; ++q) {
    for (int e = 0; e < 2; ++e) {
      for (int k = 0; k < kK; ++k) b_cols[2 * q + e][k] = element(b, 8 * q + 2 * (lane % 4) + e, k);
    }
  }
  static_assert(kM == 64 && kN == 128);
  std::array<float, 64> d;
  for (int i = 0; i < 64; ++i) {
    const double* row = a_rows[(i / 2) % 2];
    const double* col = b_cols[2 * (i / 4) + i % 2];
    double sum = 0.0;
    for (int k = 0; k < kK; ++k) sum += row[k] * col[k];
    d[size_t(i)] = float(sum);
  }
  return d;
}

bool same(const std::array<float, 64>& x, const std::array<float, 64>& y) {
  for (size_t i = 0; i < 64; ++i) {
    if (std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i]) && !(std::isnan(x[i]) && std::isnan(y[i]))) return false;
  }
  return true;
}

}  // namespace

void wgmma_m64n128k32_e4m3(float* d, uint64_t a, uint64_t b, const char* file, int line) {
  // .sync.aligned, and the descriptors must be the warpgroup's: the collective's key is both.
  warpgroup_collective("wgmma.mma_async.m64n128k32.e4m3", a * 0x9e3779b97f4a7c15ull ^ b, file, line);
  const int rank = thread_rank();
  const auto at_issue = std::make_shared<const std::array<float, 64>>(compute(rank, a, b));
  for (int i = 0; i < 64; ++i) d[i] = NAN;  // undefined until the wait
  const std::string where = std::string(file) + ":" + std::to_string(line);
  async_issue([d, a, b, rank, at_issue, where] {
    const std::array<float, 64> late = compute(rank, a, b);  // shared memory as late as the GPU may read it
    if (!same(late, *at_issue)) {
      fail(("wgmma.mma_async (" + where + "): shared memory it reads changed between issue and wait_group").c_str());
    }
    std::memcpy(d, late.data(), sizeof late);
  });
}

}  // namespace deepinfer::device_emulation
