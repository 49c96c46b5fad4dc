// The host side of the FP8-operand linear (kernels.h): which ops it takes, where the prepass puts an x's
// codes and scales, and which devices run the wgmma kernel. Plain C++ apart from the kernels
// (linear_fp8_kernel.cu, linear_fp8_wgmma_kernel.cu), so that the emulated-device tests (tests/cuda_emulation)
// check the backend's scratch plan with these very functions.
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {
namespace {

int64_t x_blocks(int64_t k_pad, int64_t x_block) { return (k_pad + x_block - 1) / x_block; }

}  // namespace

bool linear_fp8_supports(WeightKind kind, int weight_block, int64_t x_block) {
  if (x_block <= 0 || x_block % 32 != 0) return false;
  return kind == WeightKind::kFp4 || (kind == WeightKind::kFp8 && weight_block > 0 && weight_block % 32 == 0);
}

int64_t linear_fp8_scratch_bytes(int64_t n_tokens, int64_t k_pad, int64_t x_block) {
  const int64_t codes = (n_tokens * k_pad + 255) / 256 * 256;
  return codes + (n_tokens * x_blocks(k_pad, x_block) * 4 + 255) / 256 * 256;
}

void set_linear_fp8_scratch(LinearLaunch& p, uint8_t* scratch) {
  p.x_codes = scratch;
  p.x_scales = reinterpret_cast<float*>(scratch + (p.n_tokens * p.k_pad + 255) / 256 * 256);
}

int64_t linear_fp8_code_items(const LinearLaunch& p) { return p.n_tokens * x_blocks(p.k_pad, p.x_e4m3_block); }

// wgmma with e4m3 operands is sm_90a's alone (Blackwell's tensor cores take tcgen05, not wgmma).
bool linear_fp8_wgmma_runs_on(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

}  // namespace deepinfer::cuda
