// mma.sync on the CPU (ptx_emulation.h). The fragment layouts are the PTX ISA's ("Matrix Fragments for
// mma.m16n8k16 with floating point type" and "for mma.m16n8k32", .e4m3), with groupID g = lane >> 2 and
// threadID_in_group t = lane % 4, lower-numbered elements in the lower bits of a register:
//   m16n8k16 bf16: a0 = (row g, k 2t, 2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8, 2t+9), a3 = (g+8, 2t+8..);
//                  b0 = (k 2t, 2t+1; col g), b1 = (k 2t+8, 2t+9; col g)
//   m16n8k32 e4m3: a0 = (row g, k 4t..4t+3), a1 = (g+8, 4t..), a2 = (g, 16+4t..), a3 = (g+8, 16+4t..);
//                  b0 = (k 4t..4t+3; col g), b1 = (k 16+4t..; col g)
//   D and C (f32):  d0 = (row g, col 2t), d1 = (g, 2t+1), d2 = (g+8, 2t), d3 = (g+8, 2t+1).
// The sum: every product is exact in double, they and C are added in double in k order and the total rounded
// to fp32 once (round to nearest even). That is NOT the tensor core's internal rounding, which the PTX ISA
// leaves unspecified (it differs by architecture): a kernel whose bits depend on it is only checked on a GPU.
#include <bit>

#include "core/dtypes.h"
#include "ptx_emulation.h"

namespace deepinfer::device_emulation {
namespace {

double bf16_value(uint32_t bits16) { return double(bf16_to_float(uint16_t(bits16))); }

// lanes[l].in: a0..a3, b0, b1, c0..c3 (float bits); out: d0..d3 (float bits).
template <int K>
void combine_mma(LaneIo* lanes, uint32_t mask) {
  if (mask != 0xffffffffu) fail("mma.sync: the whole warp must execute it");
  double a[16][K], b[K][8], c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const uint64_t* in = lanes[lane].in;
    for (int r = 0; r < 4; ++r) {
      const uint32_t reg = uint32_t(in[r]);
      const int row = g + ((r & 1) ? 8 : 0);
      if constexpr (K == 16) {
        const int k0 = 2 * t + ((r & 2) ? 8 : 0);
        a[row][k0] = bf16_value(reg & 0xffffu);
        a[row][k0 + 1] = bf16_value(reg >> 16);
      } else {
        const int k0 = 4 * t + ((r & 2) ? 16 : 0);
        for (int i = 0; i < 4; ++i) a[row][k0 + i] = e4m3_value(reg >> (8 * i) & 0xffu);
      }
    }
    for (int r = 0; r < 2; ++r) {
      const uint32_t reg = uint32_t(in[4 + r]);
      if constexpr (K == 16) {
        const int k0 = 2 * t + 8 * r;
        b[k0][g] = bf16_value(reg & 0xffffu);
        b[k0 + 1][g] = bf16_value(reg >> 16);
      } else {
        const int k0 = 4 * t + 16 * r;
        for (int i = 0; i < 4; ++i) b[k0 + i][g] = e4m3_value(reg >> (8 * i) & 0xffu);
      }
    }
    for (int i = 0; i < 4; ++i) c[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = double(std::bit_cast<float>(uint32_t(in[6 + i])));
  }
  // Each output's sum in k order; the columns side by side (independent sums), so the loop vectorises. Every
  // product is exact in double, so whether the compiler fuses it into the add changes nothing.
  float d[16][8];
  for (int row = 0; row < 16; ++row) {
    double sum[8];
    for (int col = 0; col < 8; ++col) sum[col] = c[row][col];
    for (int k = 0; k < K; ++k) {
      for (int col = 0; col < 8; ++col) sum[col] += a[row][k] * b[k][col];
    }
    for (int col = 0; col < 8; ++col) d[row][col] = float(sum[col]);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) lanes[lane].out[i] = std::bit_cast<uint32_t>(d[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)]);
  }
}

void mma(Combine combine, const char* op, float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4],
         const char* file, int line) {
  LaneIo io{};
  for (int r = 0; r < 4; ++r) io.in[r] = a[r];
  io.in[4] = b0;
  io.in[5] = b1;
  for (int i = 0; i < 4; ++i) io.in[6 + i] = std::bit_cast<uint32_t>(c[i]);
  warp_collective(op, 0xffffffffu, io, combine, file, line);
  for (int i = 0; i < 4; ++i) d[i] = std::bit_cast<float>(uint32_t(io.out[i]));
}

}  // namespace

double e4m3_value(uint32_t code) { return double(e4m3_to_float(uint8_t(code))); }

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4], const char* file,
                       int line) {
  mma(combine_mma<16>, "mma.sync.m16n8k16.bf16", d, a, b0, b1, c, file, line);
}

void mma_m16n8k32_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4], const char* file,
                       int line) {
  mma(combine_mma<32>, "mma.sync.m16n8k32.e4m3", d, a, b0, b1, c, file, line);
}

}  // namespace deepinfer::device_emulation
