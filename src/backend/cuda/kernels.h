// The launch interface of the CUDA kernels: plain structs of device pointers and sizes, one launcher per
// op. Shared by the .cu files (which define the launchers) and the host side of the backend
// (cuda_backend.h and its .cpp files) and the timing program; nothing outside src/backend/cuda includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// Host and device code alike (nvcc), plain host code elsewhere (the emulations' compilers).
#if defined(__CUDACC__)
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif

namespace deepinfer::cuda {

// Stored weight kinds as they sit in device memory: every row padded with zero codes to k_pad elements
// (a multiple of 32), so each row starts 16-byte aligned and a 16-byte chunk never straddles a scale block.
enum class WeightKind : int { kBf16 = 0, kFp8 = 1, kFp4 = 2 };

// The epilogues of backend.h's Epilogue, in the same order.
enum class LinearEpilogue : int { kBf16 = 0, kF32 = 1, kF32AddBias = 2, kSqrtSoftplus = 3 };

// out[t, n] = epilogue( sum_k x[t, k] * W[row_begin + n, k] ), decoded in registers, fp32 accumulation.
struct LinearLaunch {
  WeightKind kind = WeightKind::kBf16;
  const uint8_t* w = nullptr;      // [n_out, row_pitch bytes]
  int64_t row_pitch = 0;           // bytes
  const uint8_t* scale = nullptr;  // fp8: e8m0 [ceil(n_out/block), scale_pitch]; fp4: e8m0 [n_out, scale_pitch]
  int64_t scale_pitch = 0;         // scale bytes per scale row
  int block = 0;                   // fp8 scale block edge (32 or 128)
  int64_t k_pad = 0;               // multiple of 32
  const float* x = nullptr;        // [n_tokens, k_pad], zero past the real K
  int64_t n_tokens = 0;
  int64_t row_begin = 0, n_rows = 0;
  LinearEpilogue epilogue = LinearEpilogue::kBf16;
  const float* bias = nullptr;     // [n_tokens, n_rows] for kF32AddBias
  float* out = nullptr;            // [n_tokens, n_rows]
  float* partials = nullptr;       // device scratch of linear_mma_partial_floats floats (a split launch), or nullptr
  // The FP8-operand linear only (section below): LinearParams::x_e4m3_block, and where the prepass puts x's
  // codes [n_tokens, k_pad] and scales [n_tokens, ceil(k_pad / x_e4m3_block)] (set_linear_fp8_scratch).
  int64_t x_e4m3_block = 0;
  uint8_t* x_codes = nullptr;
  float* x_scales = nullptr;
};
void launch_linear(const LinearLaunch& p, cudaStream_t stream);
// The same op on the tensor cores (the backend's default). Only for weights whose scaled values are exact
// bf16s (DeviceWeight::mma_exact). Two kernels with the same bits, so a token's outputs never depend on which
// ran: registers (linear_mma_kernel.cu: each warp loads and decodes its own operands; any token count) and
// staged (linear_mma_staged_kernel.cu: 64 x 64 block tiles through shared memory, for 64 tokens and more),
// which can also split K over blocks (one block per tile and K slice, the slices' sums in p.partials, then
// added in slice order by a second kernel, as the register kernel's warps are).
// kFastest: staged where its grid fills the device, split where only the slices' blocks do, else registers.
// kStaged and kStagedSplit (test paths): staged, or split where K has several slices, from 64 tokens on.
enum class MmaKernelChoice { kFastest, kStaged, kStagedSplit };
// The floats launch_linear_mma needs in p.partials for this op to split (0: it will not; without them it runs
// the unsplit staged kernel).
int64_t linear_mma_partial_floats(const LinearLaunch& p, MmaKernelChoice choice);
void launch_linear_mma(const LinearLaunch& p, cudaStream_t stream, MmaKernelChoice choice = MmaKernelChoice::kFastest);
void launch_linear_mma_registers(const LinearLaunch& p, cudaStream_t stream);
void launch_linear_mma_staged(const LinearLaunch& p, cudaStream_t stream);
// Split over K; p.partials holds linear_mma_staged_partial_floats(p) floats (> 0: K has several slices).
int64_t linear_mma_staged_partial_floats(const LinearLaunch& p);
void launch_linear_mma_staged_split(const LinearLaunch& p, cudaStream_t stream);
// Several such ops in one launch (an MoE group's experts, which one at a time leave most multiprocessors
// idle at decode's few tokens): `ops` is a device array of n_ops launches that share the weight kind and
// k_pad, max_rows / max_tokens the largest n_rows / n_tokens among them. Each op's outputs are those of
// launch_linear_mma.
void launch_linear_mma_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad, int64_t max_rows,
                               int64_t max_tokens, cudaStream_t stream,
                               MmaKernelChoice choice = MmaKernelChoice::kFastest);
void launch_linear_mma_staged_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t k_pad,
                                      int64_t max_rows, int64_t max_tokens, cudaStream_t stream);

// ---- The FP8-operand linear for prompt tokens (linear_fp8_kernel.cu; DEEPINFER_CUDA_PROMPT_LINEAR=fp8) ----
// For an op whose caller applied the activation QDQ in blocks of B = x_e4m3_block columns (a multiple of 32), so
// that each block of a token's x is e4m3 values times a power of two, with e4m3 weights (scale blocks a multiple
// of 32) or e2m1 weights, both with DeviceWeight::mma_exact scales. Per output (token t, row n), exactly:
//   sx[t, b]  = the smallest power of two s with max |x[t, bB .. bB + B - 1]| / s <= 448, never below 2^-126
//               (1 for an all-zero block); xq[t, k] = e4m3(x[t, k] / sx[t, k / B]), exact by the promise
//               (subnormals included; a block under 2^-118, which the model's QDQ never makes, would round);
//   wq[n, k]  = the stored e4m3 code of W[row_begin + n, k] (e2m1: the e4m3 code of the same value, exact);
//   sw[n, j]  = W's e8m0 scale for row row_begin + n at k = 32 j (fp8: block (row / block, 32 j / block); fp4:
//               (row, j));
//   acc = +0; for j = 0, 1, .., k_pad / 32 - 1 in this order:
//     p   = the tensor core's fp32 sum of the 32 products xq[t, 32 j + i] * wq[n, 32 j + i] (one
//           mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32 from a zero accumulator). The sum is not exactly
//           associative, so which k feeds which k-slot is part of the bits: lane (g, c) feeds k = 32 j + 8 c + i
//           to slots 4 c + i and k = 32 j + 8 c + 4 + i to slots 16 + 4 c + i (i < 4), for A and B alike;
//     acc = fmaf(p, sx[t, 32 j / B] * sw[n, j], acc)   (a product of powers of two: exact while it stays >=
//           2^-126, which the model's QDQ floor and real scale bytes keep; the padding's steps add +0);
//   out[t, n] = epilogue(acc), apply_epilogue as every linear kernel applies it.
// Nothing there depends on n_tokens, the other tokens, the tile a token lands in or the op's group: a token's
// outputs are batch invariant. They differ from launch_linear_mma's (p rounds inside the tensor core), which is
// why the backend runs this for prompt tokens only (Backend::kernels_differ_by_token_kind).
// Launch: the prepass writes p.x_codes / p.x_scales from p.x (launch_linear_fp8_codes, once per distinct x), then
// the main kernel reads them (launch_linear_fp8, or grouped like launch_linear_mma_grouped, grouped by kind only).
bool linear_fp8_supports(WeightKind kind, int weight_block, int64_t x_block);
// Device scratch for one x's codes and scales, and the pointers into it.
int64_t linear_fp8_scratch_bytes(int64_t n_tokens, int64_t k_pad, int64_t x_block);
void set_linear_fp8_scratch(LinearLaunch& p, uint8_t* scratch);
// The prepass's work items (token, x block) of an op: a grouped prepass covers the largest op's.
int64_t linear_fp8_code_items(const LinearLaunch& p);
void launch_linear_fp8_codes(const LinearLaunch& p, cudaStream_t stream);
void launch_linear_fp8_codes_grouped(const LinearLaunch* ops, int n_ops, int64_t max_items, cudaStream_t stream);
// Two block tiles, 128 rows x 128 tokens (8 warps) and 64 x 64 (4 warps); neither changes a bit of any output.
// kFastest: the big one where the tokens fill more than half of it and its grid gives every SM a block; kBig and
// kSmall (test paths, so that small test shapes reach the big tile): that tile always.
enum class Fp8TileChoice { kFastest, kBig, kSmall };
void launch_linear_fp8(const LinearLaunch& p, cudaStream_t stream, Fp8TileChoice choice = Fp8TileChoice::kFastest);
void launch_linear_fp8_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows, int64_t max_tokens,
                               cudaStream_t stream, Fp8TileChoice choice = Fp8TileChoice::kFastest);

// ---- The FP8-operand linear on wgmma (linear_fp8_wgmma_kernel.cu; DEEPINFER_CUDA_PROMPT_LINEAR=wgmma) ----
// The same ops, the same prepass (launch_linear_fp8_codes: sx, xq) and the same per-output sequence as the section
// above, on Hopper's warpgroup MMA; sm_90a only (linear_fp8_wgmma_runs_on; elsewhere the kernel traps). Per
// output (token t, row n), with sx, xq, wq and sw as above, exactly:
//   acc = +0; for j = 0, 1, .., k_pad / 32 - 1 in this order:
//     p   = the tensor core's fp32 sum of the 32 products xq[t, 32 j + i] * wq[n, 32 j + i] (one
//           wgmma.mma_async.m64n128k32.f32.e4m3.e4m3 with scale-d = 0: from no accumulator), k = 32 j + i fed to
//           the instruction's k-slot i (A and B alike);
//     acc = fmaf(p, sx[t, 32 j / B] * sw[n, j], acc);
//   out[t, n] = epilogue(acc).
// Only the inner sum's hardware differs from the fp8 path's (wgmma's k32 sum against mma.sync's, whose k-slot
// order is another permutation too); whether the two give the same bits is unmeasured (cuda_tests prints how many
// outputs differ). A step's p of -0, should the tensor core give one for an all-zero sum, changes nothing: acc
// starts at +0 and fmaf(-0, s, acc) is acc. Batch invariant as above: a token's outputs depend on nothing but its own x, the
// weight and the op, never on n_tokens, the other tokens, its tile position or the op's group.
// Launch: after the prepass, one op, or grouped like launch_linear_fp8_grouped (128 rows x 128 tokens a block).
bool linear_fp8_wgmma_runs_on(int cc_major, int cc_minor);
void launch_linear_fp8_wgmma(const LinearLaunch& p, cudaStream_t stream);
void launch_linear_fp8_wgmma_grouped(const LinearLaunch* ops, int n_ops, WeightKind kind, int64_t max_rows,
                                     int64_t max_tokens, cudaStream_t stream);

// mHC mixes: out[t, m] = f32((x_t . fn[m]) / sqrt(mean(x_t^2) + eps)).
struct HcMixLaunch {
  const float* x = nullptr;   // [n_tokens, width]
  int64_t n_tokens = 0, width = 0;
  const float* fn = nullptr;  // [n_mix, width]
  int64_t n_mix = 0;
  double eps = 0;
  float* out = nullptr;       // [n_tokens, n_mix]
};
void launch_hc_mix(const HcMixLaunch& p, cudaStream_t stream);

// An mHC side's halves around its sub-block on the device (mhc_kernels.cu), with the host's bits: the model's
// steps (model/mhc_side.cpp) operation by operation. A token's coefficients are kept as model/ops.h's
// HcCoefficients are laid out: pre[4], post[4], comb[4][4].
constexpr int64_t kHcCoefficientFloats = 24;
// B2-B8 (hc_split_sinkhorn, hc_collapse, rmsnorm), one block per token, its u row in shared memory: dim at most
// kHcPreMaxDim (32 KB; V4-Pro's dim is 7168). The head's input the same way: V4's H2-H4 (head_pre: hc_head_pre's
// pre from 4 mixes, then the collapse and the norm) and V4.1's step 43 (mixes nullptr: the collapse with
// collapse_pre, then the norm).
inline constexpr int64_t kHcPreMaxDim = 8192;
struct HcPreLaunch {
  const float* h = nullptr;             // [n_tokens, 4 * dim]
  const float* mixes = nullptr;         // [n_tokens, 24] ([n_tokens, 4] with head_pre), or nullptr with collapse_pre
  int64_t n_tokens = 0, dim = 0;
  const float* scale = nullptr;         // [3] ([1] with head_pre)
  const float* base = nullptr;          // [24] ([4] with head_pre)
  const float* norm = nullptr;          // [dim] the bf16 norm weights' values, or nullptr (no weight)
  const float* collapse_pre = nullptr;  // [n_tokens, 4] the pre B7 takes, or nullptr: the token's own
  int sinkhorn_iters = 0;
  double eps = 0, hc_eps = 0;
  bool head_pre = false;                // the mixes are the head's 4 (H2): the pre alone, no coefficients
  float* coeffs = nullptr;              // [n_tokens, kHcCoefficientFloats], or nullptr (not written)
  float* u = nullptr;                   // [n_tokens, u_stride]; columns dim..u_stride-1 are set to 0
  int64_t u_stride = 0;
};
void launch_hc_pre(const HcPreLaunch& p, cudaStream_t stream);
// P1 / P2 (hc_expand_columns): h_out[t, k, i] = bf16(post_k x[t, i] + sum_j comb[j][k] h[t, j, i]).
struct HcPostLaunch {
  const float* h = nullptr;       // [n_tokens, 4 * dim]
  const float* x = nullptr;       // [n_tokens, x_stride] the sub-block's output
  int64_t x_stride = 0;
  const float* coeffs = nullptr;  // [n_tokens, kHcCoefficientFloats] as launch_hc_pre writes them
  int64_t n_tokens = 0, dim = 0;
  float* h_out = nullptr;         // [n_tokens, 4 * dim], not h
};
void launch_hc_post(const HcPostLaunch& p, cudaStream_t stream);
// V4.1's DSpark tap (backend.h's StreamTapParams): out[t * out_stride + i] = bf16((h[t, 0, i] + h[t, 1, i] +
// h[t, 2, i] + h[t, 3, i]) / 4), summed in double in copy order.
struct StreamTapLaunch {
  const float* h = nullptr;  // [n_tokens, 4 * dim]
  int64_t n_tokens = 0, dim = 0;  // n_tokens at most 65535
  float* out = nullptr;
  int64_t out_stride = 0;
};
void launch_stream_tap(const StreamTapLaunch& p, cudaStream_t stream);
// V4.1's Engram gate and update (backend.h's EngramGateParams, model/ops.h's engram_gate on each copy), in place on
// h: one block per token, one warp per copy.
struct EngramGateLaunch {
  float* h = nullptr;               // [n_tokens, 4 * dim]
  const float* kv = nullptr;        // [n_tokens, 5 * dim]: the copies' keys, then the value
  int64_t n_tokens = 0, dim = 0;
  const float* q_weight = nullptr;  // [4, dim] the bf16 weights' values
  const float* k_weight = nullptr;  // [4, dim]
  double eps = 0;
};
void launch_engram_gate(const EngramGateLaunch& p, cudaStream_t stream);
// V4.1's Engram rows from their stored bytes, as wkv reads them (moe_kernels.cu): x[t, k] = e4m3(codes[t, k]) *
// e8m0(scales[t, k / 32]) for k < width (model/engram.h's engram_table_row, the same float product), then V4.1's
// activation QDQ of the row in blocks of qdq_block (launch_act_qdq's kV41 rule). A multiple of 32 wide, the rows
// are wkv's whole x: a linear's K is padded to a multiple of 32.
struct EngramRowsLaunch {
  const uint8_t* codes = nullptr;   // [n_tokens, width]: each token's gathered rows' e4m3 codes side by side
  const uint8_t* scales = nullptr;  // [n_tokens, width / 32]: their e8m0 scales, one per 32 codes
  int64_t n_tokens = 0, width = 0;  // width a multiple of 32
  float* x = nullptr;               // [n_tokens, x_stride]
  int64_t x_stride = 0;
  int64_t qdq_block = 0;
};
void launch_engram_rows(const EngramRowsLaunch& p, cudaStream_t stream);

// Per-head work on a device: token t's n_heads x head_dim values at x + t * x_stride, written at out + t * out_stride
// (out may be x), each token with its angles.
struct HeadRows {
  const float* x = nullptr;
  int64_t x_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t n_tokens = 0, n_heads = 0, head_dim = 0, rope_dim = 0;  // n_tokens at most 65535
  const float* cos_sin = nullptr;  // [n_tokens, rope_dim]
};
// backend.h's HeadRope, the host's bits (head_rms_normalize, then rope_rotate_heads).
struct HeadRopeLaunch {
  HeadRows rows;
  bool inverse = false, normalize = false;
  double eps = 0;
};
void launch_head_rope(const HeadRopeLaunch& p, cudaStream_t stream);
// backend.h's IndexQueryWork, the host's bits (the model's I2-I4 / steps 21-22): head_dim 128, rope_dim a multiple of 4.
struct IndexQueryLaunch {
  HeadRows rows;
  bool v41 = false;           // V4.1's QDQ and no Hadamard transform
  double hadamard_scale = 0;  // V4: f32(128^-0.5), as hadamard_128 takes it
};
void launch_index_query(const IndexQueryLaunch& p, cudaStream_t stream);

// Packed cache rows' layouts (model/kv_format.h): kE4m3 (V4 and V4.1 window rows, V4 compressed rows):
// n_values - n_rope e4m3 codes, n_rope bf16 values, one e8m0 scale per block codes; kE2m1E4m3Scales (V4.1
// compressed rows) and kE2m1E8m0Scales (index keys): packed e2m1 codes (value 2i in the low nibble of byte i),
// then one scale per block values.
enum class PackedRowKind { kE4m3, kE2m1E4m3Scales, kE2m1E8m0Scales };

// Rows [first_row, first_row + n_rows) of an attention launch, read packed: row first_row + i is at
// bytes + (slots ? slots[i] : i) * row_bytes.
struct AttentionPackedRows {
  int64_t first_row = 0, n_rows = 0;
  const uint8_t* bytes = nullptr;
  const int64_t* slots = nullptr;
  int64_t row_bytes = 0;
  PackedRowKind kind{};
  int32_t n_rope = 0, block = 0;  // the format's (n_values is the launch's head_dim)
};
constexpr int kMaxAttentionPackedGroups = 3;  // a model's attention reads at most two packed formats (V4.1)

// Sparse attention with sink for n_tokens query tokens that share the rows array; slot j of token t holds
// row slot_row[t, j] of rows, or is empty (-1).
struct AttentionLaunch {
  const float* q = nullptr;        // [n_tokens, n_heads, head_dim]
  int64_t n_heads = 0, head_dim = 0;
  const float* rows = nullptr;     // [n_filled, head_dim] (K = V); with packed groups, the rows before theirs
  const int32_t* slot_row = nullptr;  // [n_tokens, n_slots]
  int64_t n_slots = 0;             // a multiple of 64
  const float* sink = nullptr;     // [n_heads]
  double softmax_scale = 0;
  bool block_running_max = true;
  float* out = nullptr;            // [n_tokens, n_heads, head_dim] bf16 values
  int64_t n_tokens = 1;            // at most 65535
  // DEEPINFER_CUDA_ATTENTION_ROWS=packed: the rows from packed[0].first_row on are read from their packed bytes
  // (each value decoded as launch_unpack_rows decodes it, so the outputs are the decoded floats' bit for bit),
  // the groups in ascending first_row, together covering every row from there to the last.
  int n_packed = 0;
  AttentionPackedRows packed[kMaxAttentionPackedGroups] = {};
};
void launch_sparse_attention(const AttentionLaunch& p, cudaStream_t stream);
// The fused kernel's shared memory: it must fit the device's opt-in limit (n_slots up to ~57000 on an H200;
// with packed rows, whose slots' row addresses it keeps too, ~19000).
size_t sparse_attention_shared_bytes(int64_t n_slots, bool packed_rows = false);
// The same op as two kernels (scores, then softmax and P.V; attention_kernels.cu says why). `scores` is
// device scratch of [n_tokens, n_heads, n_slots] floats. The second kernel keeps 8 heads' weights in shared memory:
// sparse_attention_split_shared_bytes(n_slots) must fit the device's opt-in limit (n_slots up to ~5900 on an
// H200, ~2300 on sm_89 / sm_120; with packed rows ~4800 and ~1900).
size_t sparse_attention_split_shared_bytes(int64_t n_slots, bool packed_rows = false);
void launch_sparse_attention_split(const AttentionLaunch& p, float* scores, cudaStream_t stream);

// Packed cache rows decoded on the device to the floats unpack_kv_row gives: the attention's rows when the
// model hands cache rows over packed (and the attention does not read them packed), and the index keys.
struct UnpackRowsLaunch {
  PackedRowKind kind = PackedRowKind::kE4m3;
  int64_t n_values = 0, n_rope = 0, block = 0, row_bytes = 0;
  const uint8_t* rows = nullptr;  // [n_rows, row_bytes], or an arena of rows that row_slots index
  int64_t n_rows = 0;
  float* out = nullptr;           // [n_rows, n_values]
  const int64_t* row_slots = nullptr;  // [n_rows]: row i is rows + row_slots[i] * row_bytes (nullptr: i)
};
void launch_unpack_rows(const UnpackRowsLaunch& p, cudaStream_t stream);
// Copies n_rows packed rows of row_bytes from src [n_rows, row_bytes] into the arena's slots: row i to arena +
// slots[i] * row_bytes (a RowMirror's new rows). In 4-byte words: row_bytes a multiple of 4 (V4's 584, V4.1's
// 528 and 288 at head_dim 512; another head_dim may not be, and its rows are then copied whole every call), src
// and arena 4-byte aligned.
void launch_scatter_rows(const uint8_t* src, int64_t n_rows, int64_t row_bytes, const int64_t* slots, uint8_t* arena,
                         cudaStream_t stream);
// A row's draw (model/token_draw.h's TokenDraw, as the device reads it): temperature <= 0 greedy; top_k > 0 the top-k
// draw (the host sets it only where draws_top_k holds), or with nucleus the nucleus draw (draws_nucleus: top_k is then
// min(kNucleusCandidates, width); in the log-probabilities' pass logprob_candidates), whose candidates launch_row_top_k
// finds (candidates_at: where they start in its out, so that the rows' candidates lie one after another); else the
// plain temperature draw. skip: no draw of this row (a launch for some rows only: the log-probabilities' pass at
// temperature 1).
struct DeviceTokenDraw {
  double uniform = 0.0;
  float temperature = 0.0f;
  int32_t top_k = 0;
  int32_t nucleus = 0;
  int32_t skip = 0;
  int32_t candidates_at = 0;
};
// A top-k candidate as the device writes it: token_draw.h's DrawCandidate.
struct DeviceDrawCandidate {
  float value = 0.0f;
  int32_t id = 0;
};
inline constexpr int kRowTopKMax = 1024;
// (Its spans' sums, 8 bytes a 256-id span, beside the kernel's static 2.4 KB within 48 KB of shared memory.)
inline constexpr int64_t kRowDrawMaxWidth = int64_t(5632) * 256;
// out[r] = model/token_draw.h's draw_token of row r of x [n_rows, width] (rows `stride` floats apart) with draws[r]
// (a device array; nullptr: every row greedy): the argmax as model/ops.h's argmax gives it (the first index holding
// the row's largest value, NaNs passed over, 0 where the row is all NaN), or the plain temperature draw, bit for bit
// (row_draw_kernel.cu: the head's draws, Backend::linear_draws). width <= kRowDrawMaxWidth. Top-k rows get their
// argmax, which draw_from_top_k takes where the best s is not finite. Nucleus rows get the argmax where the largest
// s is not finite, else -1 and totals[r] = the plain draw's total (totals may be nullptr where no row is one). Rows
// with skip are not written. split_scratch: nullptr for one block a row, or row_draw_split_scratch_bytes(n_rows, width)
// bytes of device memory (8-byte aligned; n_rows <= 65535) to spread each row over row_draw_chunks(width) blocks of
// kRowDrawChunkIds ids (three launches, two where draws is nullptr; the same answers bit for bit): a launch of fewer
// rows than the device has SMs would otherwise run on that many SMs, one row's 129,280 exps on each.
void launch_row_draws(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int32_t* out, double* totals, void* split_scratch, cudaStream_t stream);
inline constexpr int64_t kRowDrawSpanIds = 256, kRowDrawChunkIds = 2048;  // (token_draw.h's span; a split row's block)
inline int64_t row_draw_chunks(int64_t width) { return (width + kRowDrawChunkIds - 1) / kRowDrawChunkIds; }
// Row r's spans' sums (8 bytes a span), then its chunks' largest s, argmax value and id and last weighed id (4 bytes each).
inline size_t row_draw_split_scratch_bytes(int64_t n_rows, int64_t width) {
  const int64_t n_spans = (width + kRowDrawSpanIds - 1) / kRowDrawSpanIds;
  return size_t(n_rows) * (size_t(n_spans) * 8 + size_t(row_draw_chunks(width)) * 16);
}
// A logit edit as the device reads it: model/token_draw.h's LogitEdit.
struct DeviceLogitEdit {
  int32_t id = 0;
  float divide = 1.0f;
  float subtract = 0.0f;
};
// model/token_draw.h's apply_edits on each row of x [n_rows, width] (rows `stride` floats apart), in place: row r's
// edits are edits[at[r], at[r + 1]) (device arrays), each on its own id (ids outside [0, width) passed over). Where
// originals is not nullptr, originals[e] = the logit edit e changed (a log-probability's chosen id's, before the edits;
// not written for an id outside the row).
void launch_logit_edits(float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceLogitEdit* edits,
                        const int32_t* at, float* originals, cudaStream_t stream);
// model/token_draw.h's apply_mask on each row of x [n_rows, width] with mask_of[r] >= 0, in place: -inf where bit i of
// bits[mask_of[r] * ceil(width / 32) ...] (word i / 32, bit i % 32) is 0 (device arrays).
void launch_logit_masks(float* x, int64_t n_rows, int64_t width, int64_t stride, const uint32_t* bits,
                        const int32_t* mask_of, cudaStream_t stream);
// Where draws[r].top_k > 0 (<= max_k <= kRowTopKMax, <= width): out[draws[r].candidates_at + j] for j < top_k =
// token_draw.h's top_k_candidates of row r at draws[r].temperature, in their order (larger s first, ties to the lower
// id), except that an s of -0 is written as +0 (which the draw's arithmetic cannot tell apart); other rows are not
// written (row_top_k_kernel.cu). split_scratch: nullptr for one block a row, or row_top_k_split_scratch_bytes(n_rows,
// width, max_k) bytes of device memory (8-byte aligned; n_rows <= 65535) to spread each row over row_draw_chunks(width)
// blocks (a memset and six launches: a count a digit, the placement, the sort; the same candidates).
void launch_row_top_k(const float* x, int64_t n_rows, int64_t width, int64_t stride, const DeviceTokenDraw* draws,
                      int max_k, DeviceDrawCandidate* out, void* split_scratch, cudaStream_t stream);
// Row r's entries (8 bytes each of max_k), then its histograms (4 digits of 256 counts), its count of entries placed,
// and its chunks' counts of the last digit (256 each), 4 bytes a count.
inline size_t row_top_k_split_scratch_bytes(int64_t n_rows, int64_t width, int max_k) {
  return size_t(n_rows) * (size_t(max_k) * 8 + (4 * 256 + 1) * 4 + size_t(row_draw_chunks(width)) * 256 * 4);
}
// The logits a log-probability's chosen id may have, after launch_row_draws (drawn) and launch_row_top_k (draws,
// candidates; draws may be nullptr: no row has candidates) of the same rows: for each row r of x (rows `stride` floats
// apart) with asks[r].skip == 0, drawn_logit[r] = x[r, drawn[r]] where drawn[r] >= 0, and for each of its candidates
// candidate_logits[draws[r].candidates_at + j] = x[r, that candidate's id] (device arrays).
void launch_drawn_logits(const float* x, int64_t n_rows, int64_t stride, const DeviceTokenDraw* asks, const int32_t* drawn,
                         const DeviceTokenDraw* draws, const DeviceDrawCandidate* candidates, float* drawn_logit,
                         float* candidate_logits, cudaStream_t stream);

// Indexer scores: score[j] = bf16( sum_h bf16( relu(bf16(q_h . K_j)) * w_h ) ).
// n_tokens query tokens score against keys, token t against token_keys[t] rows from row token_keys_at[t]
// (several sequences' key caches side by side: a batched decode step's tokens in one launch).
struct IndexScoreLaunch {
  const float* q = nullptr;        // [n_tokens, n_heads, dim]
  const float* weights = nullptr;  // [n_tokens, n_heads]
  int64_t n_heads = 0, dim = 0;
  const float* keys = nullptr;     // [n_keys, dim]
  int64_t n_keys = 0;              // the most any token reads
  float* scores = nullptr;         // token t's at scores + token_scores_at[t] ([n_keys] at t * n_keys without it)
  int64_t n_tokens = 1;            // at most 65535
  const int64_t* token_keys = nullptr;       // [n_tokens] (nullptr: n_keys each)
  const int64_t* token_scores_at = nullptr;  // [n_tokens] (nullptr: t * n_keys)
  const int64_t* token_keys_at = nullptr;    // [n_tokens] (nullptr: every token's keys start at row 0)
  // Keys read packed instead (where key_slots is set; keys is then unused): key row r is the e2m1 row at
  // packed_keys + key_slots[r] * key_row_bytes (PackedRowKind::kE2m1E8m0Scales, one e8m0 scale per key_block values),
  // decoded as launch_unpack_rows decodes it.
  const uint8_t* packed_keys = nullptr;
  const int64_t* key_slots = nullptr;
  int64_t key_row_bytes = 0, key_block = 0;
};
// Its dynamic shared memory (q, and the warps' decoded keys where packed): it must fit the device's opt-in limit.
size_t index_scores_shared_bytes(int64_t n_heads, int64_t dim, bool packed_keys);
void launch_index_scores(const IndexScoreLaunch& p, cudaStream_t stream);
// The same scores with the dot products on the tensor cores (index_scores_mma_kernel.cu says how they stay
// exact): up to kIndexScoresMmaMaxHeads heads, any dim; index_scores_mma_shared_bytes must fit the device's
// opt-in limit (69 KB at 64 heads x 128).
constexpr int64_t kIndexScoresMmaMaxHeads = 64;
size_t index_scores_mma_shared_bytes(int64_t n_heads, int64_t dim);
void launch_index_scores_mma(const IndexScoreLaunch& p, cudaStream_t stream);

// The indexer's top-k selection (index_select_kernel.cu) on index_scores' output: token t's selected indices are
// the token_select[t] keys of largest score among its token_keys[t], ties to the lower index, best first. Where
// keep_blocks is set and token_keep[t] >= 0, keys outside the token's kept blocks (keys [b * block_size, (b + 1) *
// block_size) for each listed b) score -inf (V4.1's candidate blocks).
constexpr int64_t kIndexSelectMax = 2048;  // the most keys a token selects
struct IndexSelectLaunch {
  const float* scores = nullptr;             // bf16 values; token t's at scores + token_scores_at[t]
  const int64_t* token_keys = nullptr;       // [n_tokens]
  const int64_t* token_scores_at = nullptr;  // [n_tokens]
  const int64_t* token_select = nullptr;     // [n_tokens], each <= token_keys[t] and <= kIndexSelectMax
  const int64_t* token_selected_at = nullptr;  // [n_tokens]: token t's indices at selected + token_selected_at[t]
  const int64_t* keep_blocks = nullptr;      // token t's [token_keep[t]] blocks at keep_blocks + token_keep_at[t]
  const int64_t* token_keep = nullptr;       // [n_tokens] (< 0: no mask for t)
  const int64_t* token_keep_at = nullptr;    // [n_tokens]
  int64_t block_size = 0;
  int64_t max_keys = 0;                      // the most keys a token has
  int32_t* selected = nullptr;
  int64_t n_tokens = 0;                      // at most 65535
};
// The kernel's dynamic shared memory (the kept blocks' bits): it must fit the device's opt-in limit.
size_t index_select_shared_bytes(int64_t max_keys, int64_t block_size);
void launch_index_select(const IndexSelectLaunch& p, cudaStream_t stream);
// V4.1's candidate blocks (step 25) before their selection: token t's block b scores the largest of its keys
// [b * block_size, (b + 1) * block_size) (fmaxf: equal to std::max's value), except the newest block (the one with
// the token's last key), which scores +inf; written at block_scores + token_blocks_at[t].
struct CandidateBlocksLaunch {
  const float* scores = nullptr;             // token t's [token_keys[t]] at scores + token_scores_at[t]
  const int64_t* token_keys = nullptr;       // [n_tokens]
  const int64_t* token_scores_at = nullptr;  // [n_tokens]
  int64_t block_size = 0;
  float* block_scores = nullptr;
  const int64_t* token_blocks_at = nullptr;  // [n_tokens]
  int64_t max_blocks = 0;                    // the most blocks a token has
  int64_t n_tokens = 0;                      // at most 65535
};
void launch_candidate_blocks(const CandidateBlocksLaunch& p, cudaStream_t stream);
// An attention's compressed slots from selections kept on the device (SparseAttentionParams::kept_selection): token
// t's selection s (token_words[t]: n <= kIndexSelectMax, the selection's offset in selected, the slot `at` it starts
// at, its table's offset in tables, the table's rows token_rows, ascending 0/1) writes slot_row[t, at + i] =
// tables[table_at + s[i]] for i < n, the i-th in the selection's order, or with ascending the i-th smallest (a
// selection names distinct rows). A selected row outside [0, token_rows) leaves its slot empty (-1) rather than read
// past the table.
struct SelectedSlotsLaunch {
  int32_t* slot_row = nullptr;              // [n_tokens, n_slots]
  int64_t n_slots = 0;
  const int32_t* selected = nullptr;
  const int32_t* tables = nullptr;
  const int64_t* token_words = nullptr;     // [n_tokens, kSelectedSlotsWords]
  int64_t n_tokens = 0;                     // at most 65535
};
constexpr int64_t kSelectedSlotsWords = 6;  // n, selected_at, at, table_at, token_rows, ascending
void launch_selected_slots(const SelectedSlotsLaunch& p, cudaStream_t stream);

// ---- The MoE of a block on the device (moe_kernels.cu; CudaBackend::moe, DEEPINFER_CUDA_MOE=device) ----
// Each kernel computes what model/moe.cpp and model/ops.cpp compute on the host for the same step, bit for bit:
// the double arithmetic goes through the _rn intrinsics (nvcc would otherwise contract a * b + c into one
// rounding), and every rounding point is the host's.

// The model's activation QDQ (Model::act_qdq_rows) of each row's first `width` values, in blocks of `block`
// (the last may be short): kV4 is qdq_fp8, kV41 qdq_fp8_v41. out[r, width .. out_pad) are written as zeros (a
// linear's x is zero past K). out may be x when the strides match.
enum class ActQdqRule : int { kV4 = 0, kV41 = 1 };
struct ActQdqLaunch {
  const float* x = nullptr;  // [n_rows, x_stride]
  int64_t x_stride = 0;
  int64_t n_rows = 0, width = 0, block = 0;
  ActQdqRule rule = ActQdqRule::kV4;
  float* out = nullptr;      // [n_rows, out_stride]
  int64_t out_stride = 0, out_pad = 0;  // width <= out_pad <= out_stride
  // Before the QDQ where rmsnorm is set (its own kernel then, rmsnorm_qdq_kernel): the row's rmsnorm (model/ops.h)
  // with these bf16 weights' values (nullptr: none), the normed row also written to normed [n_rows, normed_stride].
  bool rmsnorm = false;
  const float* norm = nullptr;
  double eps = 0;
  float* normed = nullptr;
  int64_t normed_stride = 0;
};
void launch_act_qdq(const ActQdqLaunch& p, cudaStream_t stream);

// The MoE's SwiGLU (model/ops.h swiglu: M5 for a routed row with its route weight, M7 for the shared expert
// with weight 1), then the activation QDQ of the row, as the next linear reads it:
//   out[r, i] = qdq(bf16(silu(min(a, limit)) * clamp(b, -limit, limit) * weight[r])), zeros past width to out_pad.
struct SwigluQdqLaunch {
  const float* a = nullptr;  // [n_rows, in_stride]
  const float* b = nullptr;  // [n_rows, in_stride]
  int64_t in_stride = 0;
  int64_t n_rows = 0, width = 0;
  double limit = 0;                  // infinity: no clamp
  const float* row_weight = nullptr; // [n_rows] route weights (f32 values), or nullptr: 1
  int64_t block = 0;
  ActQdqRule rule = ActQdqRule::kV4;
  float* out = nullptr;              // [n_rows, out_stride]
  int64_t out_stride = 0, out_pad = 0;
};
void launch_swiglu_qdq(const SwigluQdqLaunch& p, cudaStream_t stream);

// M2 / M3 (route_token, model/moe.h) for every token, then the plan of the routed rows as moe.cpp lays
// them out: rows grouped by expert in ascending expert order, a group's rows in token order. It writes each
// row's token and route weight, each token's rows in ascending expert order (the order M8 adds them in), and
// the linear descriptors of the experts that have rows: slot j (the j-th such expert) gets w1 at
// w13_ops[2 j], w3 at w13_ops[2 j + 1] and w2 at w2_ops[j], copied from the expert's templates with x, out and
// n_tokens set (x rows [first_row, first_row + n) of x_rows / h_rows, outputs the same rows of a / b / y); the
// slots past the last such expert get n_tokens = 0 (a grouped launch's blocks skip them). One block.
struct MoeRouteLaunch {
  const float* scores = nullptr;       // [n_tokens, n_experts] M1's sqrt-softplus scores
  const float* bias = nullptr;         // [n_experts] score routing; nullptr: hash routing
  const int32_t* hash_chosen = nullptr;  // [n_tokens, top_k] the tokens' tid2eid rows (hash routing)
  int64_t n_tokens = 0, n_experts = 0, top_k = 0;
  bool v41 = false;
  double route_scale = 0;
  int32_t* row_token = nullptr;        // [n_tokens * top_k]
  float* row_weight = nullptr;         // [n_tokens * top_k]
  int32_t* token_rows = nullptr;       // [n_tokens, top_k]
  // Descriptors: templates [n_experts] each (every field but x, out, n_tokens), outputs [2 n_slots] and [n_slots].
  const LinearLaunch* w1 = nullptr;
  const LinearLaunch* w3 = nullptr;
  const LinearLaunch* w2 = nullptr;
  int64_t n_slots = 0;                 // min(n_experts, n_tokens * top_k)
  LinearLaunch* w13_ops = nullptr;
  LinearLaunch* w2_ops = nullptr;
  const float* x_rows = nullptr;       // [rows, x_stride] the gathered inputs of w1 / w3
  int64_t x_stride = 0;
  float* a = nullptr;                  // [rows, inter] w1's outputs
  float* b = nullptr;                  // [rows, inter] w3's outputs
  int64_t inter = 0;
  const float* h_rows = nullptr;       // [rows, h_stride] w2's inputs
  int64_t h_stride = 0;
  float* y = nullptr;                  // [rows, dim] w2's outputs
  int64_t dim = 0;
};
// Slot j's descriptors for expert e's rows [first, first + n) (count 0: the slot runs nothing; its copies keep
// each group's weight kind and k_pad). moe_route_kernel's plan writes them so, and its CPU stand-in too.
inline DI_HOST_DEVICE void set_moe_slot(const MoeRouteLaunch& p, int64_t j, int64_t e, int64_t first, int64_t n) {
  LinearLaunch w1 = p.w1[e], w3 = p.w3[e], w2 = p.w2[e];
  w1.x = w3.x = p.x_rows + first * p.x_stride;
  w1.n_tokens = w3.n_tokens = w2.n_tokens = n;
  w1.out = p.a + first * p.inter;
  w3.out = p.b + first * p.inter;
  w2.x = p.h_rows + first * p.h_stride;
  w2.out = p.y + first * p.dim;
  p.w13_ops[2 * j] = w1;
  p.w13_ops[2 * j + 1] = w3;
  p.w2_ops[j] = w2;
}
// n_tokens * top_k at most kMoeMaxRows and n_experts at most 1024 (the plan's scratch is the block's shared memory).
inline constexpr int64_t kMoeMaxRows = 4096;
void launch_moe_route(const MoeRouteLaunch& p, cudaStream_t stream);

// dst[r, 0 .. width) = src[index[r], 0 .. width) for r < n_rows (the routed rows' inputs; the head's logit rows of the
// kept stream, and their pre).
void launch_gather_rows(const float* src, int64_t src_stride, const int32_t* index, int64_t n_rows, int64_t width,
                        float* dst, int64_t dst_stride, cudaStream_t stream);

// M8: out[t, i] = bf16(sum of y[token_rows[t, k], i] over k in order, in double from +0, + shared_y[t, i]).
struct MoeCombineLaunch {
  const float* y = nullptr;            // [rows, dim]
  const int32_t* token_rows = nullptr; // [n_tokens, top_k]
  const float* shared_y = nullptr;     // [n_tokens, dim]
  int64_t n_tokens = 0, top_k = 0, dim = 0;
  float* out = nullptr;                // [n_tokens, dim]
};
void launch_moe_combine(const MoeCombineLaunch& p, cudaStream_t stream);

}  // namespace deepinfer::cuda
