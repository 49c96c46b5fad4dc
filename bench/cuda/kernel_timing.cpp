// cuda_kernel_timing: per-kernel time, achieved bandwidth and rate of the CUDA backend's kernels (device
// buffers only, no host transfers), against two ceilings measured in the same run: a device-to-device copy
// (bytes read + written) and a cuBLASLt GEMM (FP8 e4m3 in, bf16 out, fp32 accumulation; bf16 for the bf16
// rows) at the same shape with the token count rounded up to 16 (cuBLASLt FP8 needs multiples of 16).
// Weights rotate over several copies (>= 128 MiB in all) so that the timings read HBM, not the 60 MB L2.
// Each time is the median over graph replays of 20 back-to-back launches (median_ms). Prints one table; no
// assertions (timings are reported, never tested).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels.h"
#include "core/dtypes.h"
#include "model/kv_format.h"
#include "model/mhc_side.h"
#include "model/ops.h"

namespace deepinfer::cuda {
namespace {

#define LT_CHECK(call)                                                                          \
  do {                                                                                          \
    const cublasStatus_t s_ = (call);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "cuBLASLt: %s failed (%d)\n", #call, int(s_));                       \
      return -1.0;                                                                              \
    }                                                                                           \
  } while (0)

// Median milliseconds of one launch of `run`. run(i, stream) makes the i-th of `per_replay` launches (the
// i-th weight set, where they rotate); they are captured once as a CUDA graph and each of `reps` replays is
// timed with events and divided by per_replay. METHOD.md: for many small launches, time graph replays,
// which leaves only the launch gaps a captured decode step would see (single launches between events added
// 5-10 us to the small kernels of the first run). Where capture fails (a library call that refuses it), the
// same launches run directly on the stream.
double median_ms(const std::function<void(int, cudaStream_t)>& run, int reps = 30, int per_replay = 20) {
  // The inputs went up by cudaMemcpy from pageable memory, which may return before its DMA lands, and the launches
  // below run on a non-blocking stream, which does not wait for the legacy stream's work.
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int i = 0; i < per_replay; ++i) run(i, stream);  // warm-up: module load, handle set-up
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess) {
    for (int i = 0; i < per_replay; ++i) run(i, stream);
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      exec = nullptr;
    }
  }
  (void)cudaGetLastError();  // a refused capture leaves its error behind; the direct launches below check theirs
  auto replay = [&] {
    if (exec) {
      DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      for (int i = 0; i < per_replay; ++i) run(i, stream);
    }
  };
  replay();
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> ms(static_cast<size_t>(reps));
  cudaEvent_t a, b;
  DI_CUDA_CHECK(cudaEventCreate(&a));
  DI_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    DI_CUDA_CHECK(cudaEventRecord(a, stream));
    replay();
    DI_CUDA_CHECK(cudaEventRecord(b, stream));
    DI_CUDA_CHECK(cudaEventSynchronize(b));
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(i)], a, b));
  }
  DI_CUDA_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] / per_replay;
}

DeviceBuffer upload_random_bytes(size_t n, std::mt19937& rng, int lo, int hi) {
  std::vector<uint8_t> h(n);
  std::uniform_int_distribution<int> d(lo, hi);
  for (auto& v : h) {
    v = uint8_t(d(rng));
    if ((v & 0x7f) == 0x7f) v ^= 1;  // no e4m3 NaN codes
  }
  DeviceBuffer b(n);
  DI_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), n, cudaMemcpyHostToDevice));
  return b;
}

DeviceBuffer upload_random_floats(size_t n, std::mt19937& rng, float stddev) {
  std::vector<float> h(n);
  std::normal_distribution<float> d(0.0f, stddev);
  for (auto& v : h) {
    uint32_t bits;
    const float f = d(rng);
    std::memcpy(&bits, &f, 4);
    bits &= 0xffff0000u;  // bf16 values, as the model's activations are
    std::memcpy(&v, &bits, 4);
  }
  DeviceBuffer b(n * 4);
  DI_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), n * 4, cudaMemcpyHostToDevice));
  return b;
}

double copy_gbs() {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer src(bytes), dst(bytes);
  DI_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
  const double ms = median_ms(
      [&](int, cudaStream_t st) { DI_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, st)); },
      10, 1);
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// TFLOP/s of D[n_out, T] = W[n_out, K] . X[T, K]^T through cuBLASLt (TN layout), or -1 when it cannot run.
double cublaslt_tflops(bool fp8, int64_t n_out, int64_t T, int64_t K) {
  static cublasLtHandle_t handle = nullptr;
  if (!handle) LT_CHECK(cublasLtCreate(&handle));
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const size_t in_size = fp8 ? 1 : 2;
  std::mt19937 rng(7);
  DeviceBuffer a = upload_random_bytes(size_t(n_out * K) * in_size, rng, 0x30, 0x48);  // small finite values
  DeviceBuffer b = upload_random_bytes(size_t(T * K) * in_size, rng, 0x30, 0x48);
  DeviceBuffer d(size_t(n_out * T) * 2);
  const size_t ws_bytes = size_t(64) << 20;
  DeviceBuffer ws(ws_bytes);
  cublasLtMatmulDesc_t op;
  LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtMatrixLayout_t la, lb, lc;
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, in_type, uint64_t(K), uint64_t(n_out), K));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, in_type, uint64_t(K), uint64_t(T), K));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, uint64_t(n_out), uint64_t(T), n_out));
  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int n_found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, 1, &heur, &n_found));
  if (n_found == 0) return -1.0;
  const float alpha = 1.0f, beta = 0.0f;
  bool failed = false;
  const double ms = median_ms([&](int, cudaStream_t st) {
    failed |= cublasLtMatmul(handle, op, &alpha, a.get(), la, b.get(), lb, &beta, d.get(), lc, d.get(), lc, &heur.algo,
                             ws.get(), ws_bytes, st) != CUBLAS_STATUS_SUCCESS;
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  if (failed) return -1.0;
  return 2.0 * double(n_out) * double(T) * double(K) / (ms * 1e-3) / 1e12;
}

// cublaslt_tflops once per shape: a shape's FMA and tensor-core rows, and T = 1 and 8 (both 16 for cuBLASLt),
// share one measurement instead of repeating it.
double cublaslt_tflops_once(bool fp8, int64_t n_out, int64_t T, int64_t K) {
  static std::map<std::tuple<bool, int64_t, int64_t, int64_t>, double> measured;
  const auto key = std::make_tuple(fp8, n_out, T, K);
  auto it = measured.find(key);
  if (it == measured.end()) it = measured.emplace(key, cublaslt_tflops(fp8, n_out, T, K)).first;
  return it->second;
}

struct Row {
  std::string name;
  double us, gbs, tflops, lt_tflops;
};

// Which linear kernel a row times: the portable FMA kernel, the tensor-core path as the backend launches it
// (launch_linear_mma: registers, staged or split over K, by the grid), or one of those three; or the prompt
// tokens' FP8-operand linear (DEEPINFER_CUDA_PROMPT_LINEAR=fp8) with its x prepass in every timed launch (kFp8,
// as the backend runs it; kFp8Big / kFp8Small through one block tile) or its main kernel alone (kFp8Main), and
// the same on the wgmma kernel (DEEPINFER_CUDA_PROMPT_LINEAR=wgmma, sm_90a only: kWgmma, kWgmmaMain). Its x is
// random bf16 values in 128-blocks (not QDQ'd: the codes are rounded, which changes no timing).
enum class LinearKernel {
  kFma, kMma, kMmaRegisters, kMmaStaged, kMmaStagedSplit, kFp8, kFp8Main, kFp8Big, kFp8Small, kWgmma, kWgmmaMain
};

Row time_linear(const char* label, WeightKind kind, int block, int64_t n_out, int64_t K, int64_t T,
                LinearKernel kernel = LinearKernel::kFma) {
  std::mt19937 rng(1);
  const int64_t k_pad = (K + 31) / 32 * 32;
  const int64_t pitch = kind == WeightKind::kBf16 ? 2 * k_pad : kind == WeightKind::kFp8 ? k_pad : k_pad / 2;
  const int64_t scale_pitch = kind == WeightKind::kFp8 ? (K + block - 1) / block : K / 32;
  const int64_t scale_rows = kind == WeightKind::kFp8 ? (n_out + block - 1) / block : n_out;
  const size_t w_bytes = size_t(n_out * pitch), s_bytes = kind == WeightKind::kBf16 ? 0 : size_t(scale_rows * scale_pitch);
  const int n_sets = int(std::clamp<size_t>((size_t(128) << 20) / (w_bytes + 1) + 1, 1, 16));
  std::vector<DeviceBuffer> w, s;
  for (int i = 0; i < n_sets; ++i) {
    // bf16: bytes 0x30..0x48 give small normal values in each byte pair's high byte as well
    w.push_back(upload_random_bytes(w_bytes, rng, kind == WeightKind::kBf16 ? 0x30 : 0, kind == WeightKind::kBf16 ? 0x48 : 253));
    s.push_back(upload_random_bytes(std::max<size_t>(s_bytes, 1), rng, 115, 121));
  }
  DeviceBuffer x = upload_random_floats(size_t(T * k_pad), rng, 1.0f);
  DeviceBuffer out(size_t(T * n_out) * 4);
  LinearLaunch l;
  l.kind = kind;
  l.row_pitch = pitch;
  l.scale_pitch = scale_pitch;
  l.block = block;
  l.k_pad = k_pad;
  l.x = x.get<float>();
  l.n_tokens = T;
  l.n_rows = n_out;
  l.out = out.get<float>();
  const int64_t partial_floats = std::max(linear_mma_partial_floats(l, MmaKernelChoice::kFastest),
                                          kernel == LinearKernel::kMmaStagedSplit ? linear_mma_staged_partial_floats(l) : 0);
  DeviceBuffer partials(size_t(std::max<int64_t>(partial_floats, 1)) * 4);
  if (partial_floats > 0) l.partials = partials.get<float>();
  const bool fp8 = kernel >= LinearKernel::kFp8;
  DeviceBuffer fp8_scratch(fp8 ? size_t(linear_fp8_scratch_bytes(T, k_pad, 128)) : 1);
  if (fp8) {
    l.x_e4m3_block = 128;
    set_linear_fp8_scratch(l, fp8_scratch.get<uint8_t>());
    if (kernel == LinearKernel::kFp8Main || kernel == LinearKernel::kWgmmaMain) {  // the codes once, outside the timed launches
      launch_linear_fp8_codes(l, nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  const double ms = median_ms([&](int i, cudaStream_t st) {
    l.w = w[size_t(i % n_sets)].get<uint8_t>();
    l.scale = s[size_t(i % n_sets)].get<uint8_t>();
    switch (kernel) {
      case LinearKernel::kFma: launch_linear(l, st); break;
      case LinearKernel::kMma: launch_linear_mma(l, st); break;
      case LinearKernel::kMmaRegisters: launch_linear_mma_registers(l, st); break;
      case LinearKernel::kMmaStaged: launch_linear_mma_staged(l, st); break;
      case LinearKernel::kMmaStagedSplit: launch_linear_mma_staged_split(l, st); break;
      case LinearKernel::kFp8:
        launch_linear_fp8_codes(l, st);
        launch_linear_fp8(l, st);
        break;
      case LinearKernel::kFp8Main: launch_linear_fp8(l, st); break;
      case LinearKernel::kFp8Big:
        launch_linear_fp8_codes(l, st);
        launch_linear_fp8(l, st, Fp8TileChoice::kBig);
        break;
      case LinearKernel::kFp8Small:
        launch_linear_fp8_codes(l, st);
        launch_linear_fp8(l, st, Fp8TileChoice::kSmall);
        break;
      case LinearKernel::kWgmma:
        launch_linear_fp8_codes(l, st);
        launch_linear_fp8_wgmma(l, st);
        break;
      case LinearKernel::kWgmmaMain: launch_linear_fp8_wgmma(l, st); break;
    }
  });
  const double bytes = double(w_bytes + s_bytes) + double(T * K) * 4 + double(T * n_out) * 4;
  const double flops = 2.0 * double(n_out) * double(T) * double(K);
  const int64_t t16 = (T + 15) / 16 * 16;
  const double lt = cublaslt_tflops_once(kind != WeightKind::kBf16, n_out, t16, k_pad);
  char name[160];
  const char* prefix[] = {"", "mma ", "mma registers ", "mma staged ", "mma split ", "fp8 ", "fp8 main only ", "fp8 big tile ", "fp8 small tile ",
                          "wgmma ", "wgmma main only "};
  std::snprintf(name, sizeof(name), "%s%s [%lldx%lld] T=%lld", prefix[int(kernel)], label, (long long)n_out, (long long)K,
                (long long)T);
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, lt};
}

// An MoE group at decode: n_ops FP4 experts [2048 x 4096] (w1 / w3 shapes) with T tokens each, on the tensor
// cores, as n_ops launches or as one grouped launch (launch_linear_mma_grouped). Weight sets rotate over
// >= 128 MiB as in time_linear.
Row time_expert_group(int n_ops, int64_t T, bool grouped) {
  std::mt19937 rng(5);
  const int64_t n_out = 2048, K = 4096, pitch = K / 2, scale_pitch = K / 32;
  const size_t w_bytes = size_t(n_out * pitch), s_bytes = size_t(n_out * scale_pitch);
  const int n_sets = int(std::clamp<size_t>((size_t(128) << 20) / (size_t(n_ops) * (w_bytes + s_bytes)) + 1, 1, 8));
  DeviceBuffer x = upload_random_floats(size_t(T * K), rng, 1.0f);
  DeviceBuffer out(size_t(n_ops) * size_t(T * n_out) * 4);
  std::vector<DeviceBuffer> w, s, descriptors;
  std::vector<std::vector<LinearLaunch>> sets(static_cast<size_t>(n_sets));
  for (int set = 0; set < n_sets; ++set) {
    for (int i = 0; i < n_ops; ++i) {
      w.push_back(upload_random_bytes(w_bytes, rng, 0, 253));
      s.push_back(upload_random_bytes(s_bytes, rng, 115, 121));
      LinearLaunch l;
      l.kind = WeightKind::kFp4;
      l.w = w.back().get<uint8_t>();
      l.row_pitch = pitch;
      l.scale = s.back().get<uint8_t>();
      l.scale_pitch = scale_pitch;
      l.k_pad = K;
      l.x = x.get<float>();
      l.n_tokens = T;
      l.n_rows = n_out;
      l.out = out.get<float>() + size_t(i) * size_t(T * n_out);
      sets[size_t(set)].push_back(l);
    }
    descriptors.emplace_back(size_t(n_ops) * sizeof(LinearLaunch));
    DI_CUDA_CHECK(cudaMemcpy(descriptors.back().get(), sets[size_t(set)].data(), size_t(n_ops) * sizeof(LinearLaunch),
                             cudaMemcpyHostToDevice));
  }
  const double ms = median_ms([&](int r, cudaStream_t st) {
    const int set = r % n_sets;
    if (grouped) {
      launch_linear_mma_grouped(descriptors[size_t(set)].get<LinearLaunch>(), n_ops, WeightKind::kFp4, K, n_out, T, st);
    } else {
      for (const LinearLaunch& l : sets[size_t(set)]) launch_linear_mma(l, st);
    }
  });
  const double bytes = double(n_ops) * (double(w_bytes + s_bytes) + double(T * K) * 4 + double(T * n_out) * 4);
  const double flops = 2.0 * double(n_ops) * double(n_out) * double(T) * double(K);
  char name[160];
  std::snprintf(name, sizeof(name), "mma %d e2m1 experts [2048x4096] T=%lld, %s", n_ops, (long long)T,
                grouped ? "grouped" : "one launch each");
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, -1};
}

// How the attention's rows come: fp32 rows (DEEPINFER_CUDA_KV=floats), V4's 584-byte cache rows decoded into
// floats by launch_unpack_rows first (KV packed or mirror: the default), or read packed by the attention
// kernels themselves (DEEPINFER_CUDA_ATTENTION_ROWS=packed).
enum class AttentionRows { kFloats, kDecoded, kPacked };

// V4's packed cache rows [n, 584] with sane values: e4m3 codes (no NaN), bf16 rope values, scales near 1.
DeviceBuffer upload_random_v4_rows(int64_t n, std::mt19937& rng) {
  const KvRowFormat f = kv_row_format(KvRowKind::kV4Kv, 512, 64);
  const int64_t n_coded = f.n_values - f.n_rope;
  std::vector<uint8_t> h(size_t(n * f.row_bytes), 0);
  std::uniform_int_distribution<int> byte(0, 255), scale(120, 127);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* row = &h[size_t(r * f.row_bytes)];
    for (int64_t i = 0; i < n_coded; ++i) {
      row[i] = uint8_t(byte(rng));
      if ((row[i] & 0x7f) == 0x7f) row[i] ^= 1;
    }
    for (int64_t k = 0; k < f.n_rope; ++k) {  // bf16 in [-2, 2): exponent bytes 0x3f / 0xbf
      row[n_coded + 2 * k] = uint8_t(byte(rng));
      row[n_coded + 2 * k + 1] = byte(rng) & 1 ? 0x3f : 0xbf;
    }
    for (int64_t b = 0; b < n_coded / f.block; ++b) row[n_coded + 2 * f.n_rope + b] = uint8_t(scale(rng));
  }
  DeviceBuffer d(h.size());
  DI_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size(), cudaMemcpyHostToDevice));
  return d;
}

// T query tokens, each over its own n_slots rows (a batched decode step's tokens of different sequences).
Row time_attention(int64_t H, int64_t D, int64_t n_slots, bool running, bool split = false,
                   AttentionRows mode = AttentionRows::kFloats, int64_t T = 1) {
  std::mt19937 rng(2);
  const int64_t n_rows = T * n_slots;
  const KvRowFormat f = kv_row_format(KvRowKind::kV4Kv, 512, 64);
  DI_CHECK(mode == AttentionRows::kFloats || D == f.n_values);
  DeviceBuffer q = upload_random_floats(size_t(T * H * D), rng, 1.0f);
  DeviceBuffer rows = mode == AttentionRows::kFloats ? upload_random_floats(size_t(n_rows * D), rng, 1.0f)
                                                     : DeviceBuffer(size_t(mode == AttentionRows::kDecoded ? n_rows * D * 4 : 4));
  DeviceBuffer packed = mode == AttentionRows::kFloats ? DeviceBuffer(4) : upload_random_v4_rows(n_rows, rng);
  DeviceBuffer sink = upload_random_floats(size_t(H), rng, 0.5f);
  std::vector<int32_t> idx(static_cast<size_t>(n_rows));
  for (int64_t j = 0; j < n_rows; ++j) idx[size_t(j)] = int32_t(j);
  DeviceBuffer slot_row(size_t(n_rows) * 4);
  DI_CUDA_CHECK(cudaMemcpy(slot_row.get(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
  DeviceBuffer out(size_t(T * H * D) * 4);
  AttentionLaunch a{q.get<float>(), H, D, rows.get<float>(), slot_row.get<int32_t>(), n_slots, sink.get<float>(),
                    1.0 / 22.627416997969522, running, out.get<float>()};
  a.n_tokens = T;
  UnpackRowsLaunch u;
  u.kind = PackedRowKind::kE4m3;
  u.n_values = f.n_values;
  u.n_rope = f.n_rope;
  u.block = f.block;
  u.row_bytes = f.row_bytes;
  u.rows = packed.get<uint8_t>();
  u.n_rows = n_rows;
  u.out = rows.get<float>();
  if (mode == AttentionRows::kPacked) {
    a.n_packed = 1;
    a.packed[0] = {0, n_rows, packed.get<uint8_t>(), nullptr, f.row_bytes, PackedRowKind::kE4m3, int32_t(f.n_rope), int32_t(f.block)};
  }
  DeviceBuffer scores(size_t(T * H * n_slots) * 4);
  const double ms = median_ms([&](int, cudaStream_t st) {
    if (mode == AttentionRows::kDecoded) launch_unpack_rows(u, st);
    if (split) launch_sparse_attention_split(a, scores.get<float>(), st);
    else launch_sparse_attention(a, st);
  });
  // The bytes the step must read: the rows as they are held (fp32, or packed), q, and out written.
  const double row_bytes = mode == AttentionRows::kFloats ? double(D) * 4 : double(f.row_bytes);
  const double bytes = double(n_rows) * row_bytes + double(2 * T * H * D) * 4;
  const double flops = 4.0 * double(T * H) * double(n_slots) * double(D);
  const char* how = mode == AttentionRows::kFloats ? "" : mode == AttentionRows::kDecoded ? ", 584 B rows decoded first" : ", 584 B rows read packed";
  char name[200];
  std::snprintf(name, sizeof(name), "%ssparse attention %lldh x %lld, %lld slots%s%s%s", split ? "split " : "", (long long)H,
                (long long)D, (long long)n_slots, running ? "" : " (global max)", T > 1 ? (", T=" + std::to_string(T)).c_str() : "",
                how);
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, -1};
}

// n_tokens query tokens against the same keys in one launch (a prefill block's tokens of one chunk).
// `packed`: the keys read as 68-byte e2m1 rows from an arena by slot (DEEPINFER_CUDA_KV=mirror), in reverse order.
// `mma`: on the tensor cores (DEEPINFER_CUDA_INDEX_SCORES=mma), with q and the float keys bf16 values, as the
// model's FP4 ones are (one mma per tile, not the nine of arbitrary floats).
Row time_index(int64_t H, int64_t dim, int64_t n_keys, int64_t n_tokens = 1, bool packed = false, bool mma = false) {
  std::mt19937 rng(3);
  auto upload = [&](size_t n, float stddev) {
    if (!mma) return upload_random_floats(n, rng, stddev);
    std::vector<float> h(n);
    std::normal_distribution<float> d(0.0f, stddev);
    for (float& v : h) v = bits_to_float(float_to_bits(d(rng)) & 0xffff0000u);
    DeviceBuffer b(n * 4);
    DI_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), n * 4, cudaMemcpyHostToDevice));
    return b;
  };
  DeviceBuffer q = upload(size_t(n_tokens * H * dim), 1.0f);
  DeviceBuffer w = upload_random_floats(size_t(n_tokens * H), rng, 0.1f);
  DeviceBuffer keys = upload(size_t(n_keys * dim), 1.0f);
  DeviceBuffer out(size_t(n_tokens * n_keys) * 4);
  IndexScoreLaunch l{q.get<float>(), w.get<float>(), H, dim, keys.get<float>(), n_keys, out.get<float>()};
  l.n_tokens = n_tokens;
  const int64_t row_bytes = dim / 2 + dim / 32;
  std::vector<uint8_t> rows(size_t(n_keys * row_bytes));
  for (int64_t r = 0; r < n_keys; ++r) {  // random codes, scales near 1
    for (int64_t b = 0; b < row_bytes; ++b) rows[size_t(r * row_bytes + b)] = uint8_t(b < dim / 2 ? rng() : 125 + rng() % 5);
  }
  std::vector<int64_t> slots(static_cast<size_t>(n_keys));
  for (int64_t r = 0; r < n_keys; ++r) slots[size_t(r)] = n_keys - 1 - r;
  DeviceBuffer rows_dev(rows.size()), slots_dev(slots.size() * 8);
  if (packed) {
    DI_CUDA_CHECK(cudaMemcpy(rows_dev.get(), rows.data(), rows.size(), cudaMemcpyHostToDevice));
    DI_CUDA_CHECK(cudaMemcpy(slots_dev.get(), slots.data(), slots.size() * 8, cudaMemcpyHostToDevice));
    l.keys = nullptr;
    l.packed_keys = rows_dev.get<uint8_t>();
    l.key_slots = slots_dev.get<int64_t>();
    l.key_row_bytes = row_bytes;
    l.key_block = 32;
  }
  const double ms = median_ms([&](int, cudaStream_t st) {
    if (mma) launch_index_scores_mma(l, st);
    else launch_index_scores(l, st);
  });
  const double bytes = double(n_keys) * (packed ? double(row_bytes + 8) : double(dim * 4)) + double(n_tokens * n_keys) * 4;
  const double flops = 2.0 * double(n_tokens) * double(H) * double(n_keys) * double(dim);
  char name[160];
  std::snprintf(name, sizeof(name), "%sindex scores %lldh x %lld, %lld keys%s%s", mma ? "mma " : "", (long long)H, (long long)dim,
                (long long)n_keys, packed ? " packed" : "", n_tokens > 1 ? (", " + std::to_string(n_tokens) + " tokens").c_str() : "");
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, -1};
}

// The top-k selection after the index scores (DEEPINFER_CUDA_INDEX_SELECT=device): n_tokens tokens each selecting
// k of n_keys bf16 scores (random, so ties are few), V4.1's candidate mask (every other 8-key block kept) where
// `masked`. GB/s of its three passes over the scores.
Row time_index_select(int64_t n_keys, int64_t k, int64_t n_tokens, bool masked) {
  std::mt19937 rng(5);
  std::vector<float> scores(size_t(n_tokens * n_keys));
  for (float& v : scores) v = bits_to_float(float_to_bits(std::normal_distribution<float>()(rng)) & 0xffff0000u);
  const int64_t n_keep = masked ? (n_keys / 8 + 1) / 2 : 0;
  std::vector<int64_t> meta;  // keys, scores_at, select, selected_at, keep, keep_at; then the kept blocks
  for (int64_t t = 0; t < n_tokens; ++t) meta.push_back(n_keys);
  for (int64_t t = 0; t < n_tokens; ++t) meta.push_back(t * n_keys);
  for (int64_t t = 0; t < n_tokens; ++t) meta.push_back(k);
  for (int64_t t = 0; t < n_tokens; ++t) meta.push_back(t * k);
  for (int64_t t = 0; t < n_tokens; ++t) meta.push_back(masked ? n_keep : -1);
  for (int64_t t = 0; t < n_tokens; ++t) meta.push_back(0);
  for (int64_t b = 0; b < n_keep; ++b) meta.push_back(2 * b);
  DeviceBuffer scores_dev(scores.size() * 4), meta_dev(meta.size() * 8), selected(size_t(n_tokens * k) * 4);
  DI_CUDA_CHECK(cudaMemcpy(scores_dev.get(), scores.data(), scores.size() * 4, cudaMemcpyHostToDevice));
  DI_CUDA_CHECK(cudaMemcpy(meta_dev.get(), meta.data(), meta.size() * 8, cudaMemcpyHostToDevice));
  const int64_t* m = meta_dev.get<int64_t>();
  IndexSelectLaunch l;
  l.scores = scores_dev.get<float>();
  l.token_keys = m;
  l.token_scores_at = m + n_tokens;
  l.token_select = m + 2 * n_tokens;
  l.token_selected_at = m + 3 * n_tokens;
  l.keep_blocks = masked ? m + 6 * n_tokens : nullptr;
  l.token_keep = m + 4 * n_tokens;
  l.token_keep_at = m + 5 * n_tokens;
  l.block_size = 8;
  l.max_keys = n_keys;
  l.selected = selected.get<int32_t>();
  l.n_tokens = n_tokens;
  const double ms = median_ms([&](int, cudaStream_t st) { launch_index_select(l, st); });
  const double bytes = 3.0 * double(n_tokens * n_keys) * 4;
  char name[160];
  std::snprintf(name, sizeof(name), "index select %lld of %lld keys%s%s", (long long)k, (long long)n_keys, masked ? ", masked" : "",
                n_tokens > 1 ? (", " + std::to_string(n_tokens) + " tokens").c_str() : "");
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, 0, -1};
}

Row time_hc_mix(int64_t T, int64_t width, int64_t n_mix) {
  std::mt19937 rng(4);
  DeviceBuffer x = upload_random_floats(size_t(T * width), rng, 1.0f);
  DeviceBuffer fn = upload_random_floats(size_t(n_mix * width), rng, 0.01f);
  DeviceBuffer out(size_t(T * n_mix) * 4);
  HcMixLaunch l{x.get<float>(), T, width, fn.get<float>(), n_mix, 1e-6, out.get<float>()};
  const double ms = median_ms([&](int, cudaStream_t st) { launch_hc_mix(l, st); });
  const double bytes = double(T * width + n_mix * width) * 4 + double(T * n_mix) * 4;
  const double flops = 2.0 * double(T) * double(width) * double(n_mix + 1);
  char name[160];
  std::snprintf(name, sizeof(name), "hc_mix %lld x %lld, T=%lld", (long long)n_mix, (long long)width, (long long)T);
  return {name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12, -1};
}

// Random checkpoint-format weights for the whole-op rows below, owning their bytes (splitmix64: gigabytes in a
// second or two). Scales keep every value a normal, tensor-core-exact one.
class RandomWeights {
 public:
  explicit RandomWeights(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  LinearWeight fp4(int64_t n, int64_t k) {
    return LinearWeight{DType::kI8, n, k, fill(size_t(n * k / 2), 0, 255), fill(size_t(n * k / 32), 115, 121), 0};
  }
  LinearWeight fp8(int64_t n, int64_t k) {
    return LinearWeight{DType::kF8E4M3, n, k, fill(size_t(n * k), 0, 0x7e), fill(size_t((n / 128) * (k / 128)), 115, 121), 128};
  }
  // High bytes 0x3b..0x3c: small normal values of either sign once the low bytes are random too.
  LinearWeight bf16(int64_t n, int64_t k) { return LinearWeight{DType::kBF16, n, k, fill(size_t(n * k * 2), 0x3b, 0x3c), nullptr, 0}; }

 private:
  const uint8_t* fill(size_t n, int lo, int hi) {
    bytes_.emplace_back(n);
    for (uint8_t& b : bytes_.back()) b = uint8_t(lo + int(next() % uint64_t(hi - lo + 1)));
    return bytes_.back().data();
  }
  uint64_t state_;
  std::deque<std::vector<uint8_t>> bytes_;  // a deque: the weights point into its elements
};

// A V4-Flash block's whole MoE through the backend (Backend::moe with DEEPINFER_CUDA_MOE=device; `graphs`:
// DEEPINFER_CUDA_GRAPHS on or off): 256 FP4 experts of 2048 x 4096 (top 6), an FP8 shared expert of the same
// size, a bf16 gate. Hash-routed, so that the experts a call reads are known: the row's bytes are the gate, the
// shared expert and each distinct chosen expert once. The time is the median wall time of a call from the host,
// its copies in and out and its wait included: what a decode step pays for the block's MoE. `side`: the whole FFN
// side instead (Backend::moe_side: the mHC mixes of the 4 x 4096 stream, its coefficients, u, the MoE and the
// expansion, h in and out), the bytes then with the side's fp32 mix weights. `tail`: the block's whole tail (the
// FFN side with the attention's output projection before it, wo_a's 8 groups of 1024 x 4096 and wo_b 4096 x 8192
// in FP8, and the attention side's expansion, the attention's output o [T, 32768] and the stream in), as one call
// (Backend::block_tail, DEEPINFER_CUDA_LINEAR_CHAIN=device too) or, `tail_steps`, as the model's steps on the same
// backend (the chain, the expansion on the host, the side: two calls).
enum class MoeTiming { kMoe, kSide, kTail, kTailSteps };
void time_device_moe(const std::vector<int64_t>& token_counts, bool graphs, MoeTiming what, std::vector<Row>& rows) {
  const bool side = what != MoeTiming::kMoe, tail = what == MoeTiming::kTail || what == MoeTiming::kTailSteps;
  const int64_t E = 256, K = 6, D = 4096, I = 2048, vocab = 1024;
  RandomWeights random(7);
  auto next = [&] { return random.next(); };
  BlockWeights w;
  w.gate = random.bf16(E, D);
  w.experts.resize(size_t(E));
  for (ExpertWeights& e : w.experts) {
    e.w1 = random.fp4(I, D);
    e.w3 = random.fp4(I, D);
    e.w2 = random.fp4(D, I);
  }
  w.shared = {random.fp8(I, D), random.fp8(D, I), random.fp8(I, D)};
  w.n_activated_experts = int(K);
  w.hash_routed = true;
  std::vector<int64_t> tid2eid;
  std::vector<int64_t> experts(static_cast<size_t>(E));
  std::mt19937 rng(3);
  for (int64_t t = 0; t < vocab; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    tid2eid.insert(tid2eid.end(), experts.begin(), experts.begin() + K);
  }
  w.tid2eid = tid2eid.data();
  const int64_t G = 8, OL = 1024, O = 64 * 512;  // the output projection's groups and o's width
  const LinearWeight wo_a = random.fp8(G * OL, O / G), wo_b = random.fp8(D, G * OL);
  setenv("DEEPINFER_CUDA_MOE", "device", 1);
  if (tail) setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
  setenv("DEEPINFER_CUDA_GRAPHS", graphs ? "on" : "off", 1);
  std::string error;
  std::unique_ptr<Backend> backend = make_cuda_backend(0, 0, &error);
  unsetenv("DEEPINFER_CUDA_MOE");
  unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
  unsetenv("DEEPINFER_CUDA_GRAPHS");
  DI_CHECK_MSG(backend != nullptr, error);
  const double expert_bytes = 3.0 * double(I * D / 2 + I * D / 32);
  const double chain_bytes = 2.0 * double(G * OL) * double(O / G) * (1.0 + 1.0 / (128.0 * 128.0));
  const double other_bytes = double(E * D * 2) + 3.0 * double(I * D + (I / 128) * (D / 128)) + (side ? 24.0 * 4 * D * 4 : 0.0) +
                             (tail ? chain_bytes : 0.0);
  std::vector<float> fn(size_t(24 * 4 * D)), scale = {0.5f, 0.75f, 1.0f}, base(24);
  std::vector<uint16_t> norm(size_t(D), 0x3f80);  // 1.0
  for (float& v : fn) v = float(int(next() % 255) - 127) / 8192.0f;  // mixes of about unit size
  for (float& v : base) v = float(int(next() % 255) - 127) / 128.0f;
  for (int64_t T : token_counts) {
    std::vector<int32_t> ids(static_cast<size_t>(T));
    std::vector<char> chosen(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < T; ++t) {
      ids[size_t(t)] = int32_t((t * 97 + 13) % vocab);
      for (int64_t k = 0; k < K; ++k) chosen[size_t(tid2eid[size_t(ids[size_t(t)] * K + k)])] = 1;
    }
    const double n_experts = double(std::count(chosen.begin(), chosen.end(), 1));
    const int64_t width = side ? 4 * D : D;  // the side's stream, or the MoE's u
    std::vector<float> u(size_t(T * width)), out(size_t(T * width));
    for (float& v : u) v = float(int(next() % 255) - 127) / 64.0f;  // bf16 values, as the model's u or h
    const MoeParams p{u.data(), T, D, &w, ids.data(), false, 2.5, 10.0, 128, out.data()};
    const MhcWeights mhc{fn.data(), scale.data(), base.data(), norm.data(), 24, 20, double(1e-6f), double(1e-6f)};
    MoeSideParams sp{{u.data(), T, D, mhc, nullptr, out.data(), nullptr}, p};
    // The tail: o and the attention side's coefficients in, its stream u (the side's output lands in out).
    std::vector<float> o(size_t(tail ? T * O : 0)), z(size_t(tail ? T * G * OL : 0)), attention_out(size_t(T * D));
    std::vector<float> h_mid(size_t(T * width)), coeffs(size_t(T * 24), 0.25f);
    for (float& v : o) v = float(int(next() % 255) - 127) / 64.0f;
    std::vector<LinearParams> groups;
    for (int64_t g = 0; g < G && tail; ++g) {
      groups.push_back({o.data() + g * (O / G), O, T, &wo_a, g * OL, OL, Epilogue::kBf16, nullptr, z.data() + g * OL, G * OL});
    }
    BlockTailParams tp;
    tp.output = {groups, z.data(), T, G * OL, 128, false, {z.data(), G * OL, T, &wo_b, 0, D, Epilogue::kBf16, nullptr, attention_out.data(), D, 128}};
    tp.attention = {u.data(), T, D, mhc, nullptr, h_mid.data(), nullptr};
    tp.attention_coeffs = coeffs.data();
    tp.ffn = sp;
    tp.ffn.side.h = h_mid.data();
    MhcScratch scratch;
    std::vector<double> seconds;
    for (int rep = 0; rep < 33; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      if (what == MoeTiming::kTailSteps) {
        block_tail_on_backend(*backend, tp, scratch);
      } else {
        const bool ran = what == MoeTiming::kTail ? backend->block_tail(tp) : side ? backend->moe_side(sp) : backend->moe(p);
        DI_CHECK_MSG(ran, "the device declined the timing block");
      }
      if (rep >= 3) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double sec = seconds[seconds.size() / 2];
    const double read = other_bytes + n_experts * expert_bytes;
    const double flops = 2.0 * double(T) * (double(D) * (double(E) + 3.0 * double(I) * double(K + 1)) + (tail ? 2.0 * double(G * OL) * double(O / G) : 0.0));
    const char* kind = what == MoeTiming::kMoe ? "MoE" : what == MoeTiming::kSide ? "FFN side" : what == MoeTiming::kTail ? "tail, one call" : "tail, steps";
    char name[160];
    std::snprintf(name, sizeof name, "device %s, V4-Flash block, T=%lld (%g experts)%s", kind, (long long)T, n_experts,
                  graphs ? "" : ", no graphs");
    rows.push_back(Row{name, sec * 1e6, read / sec / 1e9, flops / sec / 1e12, 0});
  }
}

// A step's draws (launch_row_draws) of n_rows logits rows of V4's vocabulary, greedy (each row read once) or at
// temperature 1 (read twice: the largest, then the weights), or a top-k draw's candidates (launch_row_top_k: read
// six times; k = 1024: a nucleus draw's first candidates, whose total a sampled launch_row_draws finds), as
// Backend::linear_draws runs them after the head. GB/s of the rows' bytes once.
Row time_row_top_k(int64_t n_rows, int k, bool split = false) {
  const int64_t vocab = 129280;
  std::mt19937 rng(12);
  DeviceBuffer logits = upload_random_floats(size_t(n_rows * vocab), rng, 4.0f);
  const DeviceTokenDraw draw{.uniform = 0.5, .temperature = 1.0f, .top_k = k};
  std::vector<DeviceTokenDraw> host_draws(static_cast<size_t>(n_rows), draw);
  for (int64_t r = 0; r < n_rows; ++r) host_draws[size_t(r)].candidates_at = int32_t(r * k);
  DeviceBuffer draws(host_draws.size() * sizeof(DeviceTokenDraw));
  DeviceBuffer out(size_t(n_rows) * size_t(k) * sizeof(DeviceDrawCandidate));
  DI_CUDA_CHECK(cudaMemcpy(draws.get(), host_draws.data(), host_draws.size() * sizeof(DeviceTokenDraw), cudaMemcpyHostToDevice));
  DeviceBuffer scratch(split ? row_top_k_split_scratch_bytes(n_rows, vocab, k) : 0);
  const double ms = median_ms([&](int, cudaStream_t st) {
    launch_row_top_k(logits.get<float>(), n_rows, vocab, vocab, draws.get<DeviceTokenDraw>(), k,
                     out.get<DeviceDrawCandidate>(), split ? scratch.get() : nullptr, st);
  });
  const double bytes = double(n_rows) * double(vocab) * 4.0;
  return {"row top-" + std::to_string(k) + " candidates " + std::to_string(n_rows) + " x 129280" + (split ? ", split" : ""),
          ms * 1e3, bytes / (ms * 1e-3) / 1e9, 0.0, -1.0};
}

// split: each row spread over blocks of kRowDrawChunkIds ids (launch_row_draws' split_scratch).
Row time_row_draws(int64_t n_rows, bool sampled, bool split = false) {
  const int64_t vocab = 129280;
  std::mt19937 rng(11);
  DeviceBuffer logits = upload_random_floats(size_t(n_rows * vocab), rng, 4.0f);
  DeviceBuffer ids(size_t(n_rows) * 4);
  std::vector<DeviceTokenDraw> host_draws(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) host_draws[size_t(r)] = {.uniform = double(r % 100) / 100.0, .temperature = 1.0f};
  DeviceBuffer draws(host_draws.size() * sizeof(DeviceTokenDraw));
  DI_CUDA_CHECK(cudaMemcpy(draws.get(), host_draws.data(), host_draws.size() * sizeof(DeviceTokenDraw), cudaMemcpyHostToDevice));
  DeviceBuffer scratch(split ? row_draw_split_scratch_bytes(n_rows, vocab) : 0);
  const double ms = median_ms([&](int, cudaStream_t st) {
    launch_row_draws(logits.get<float>(), n_rows, vocab, vocab, sampled ? draws.get<DeviceTokenDraw>() : nullptr,
                     ids.get<int32_t>(), nullptr, split ? scratch.get() : nullptr, st);
  });
  const double bytes = double(n_rows) * double(vocab) * 4.0;
  return {std::string(sampled ? "row draw at T=1 " : "row argmax ") + std::to_string(n_rows) + " x 129280" + (split ? ", split" : ""),
          ms * 1e3, bytes / (ms * 1e-3) / 1e9, 0.0, -1.0};
}

// A V4-Flash ratio-4 layer's attention front through the backend: the mHC side's first half (mixes of the 4 x
// 4096 stream, coefficients, u and its norm), u's QDQ, the projections of u (wq_a, wkv, the compressor's wkv and
// wgate, the indexer's weights_proj), qr's norm and QDQ, and the projections of qr (wq_b, the indexer's wq_b): as the
// model's steps (hc_mix, then two linears() calls) and as one call (Backend::mhc_projection_chain,
// DEEPINFER_CUDA_LINEAR_CHAIN=device). Median wall time per front from the host; GB/s of the weights it reads.
void time_attention_front(const std::vector<int64_t>& token_counts, std::vector<Row>& rows) {
  const int64_t D = 4096, QL = 1024, HD = 512, H = 64, C = 2 * HD, IH = 64, ID = 128;
  RandomWeights random(11);
  const LinearWeight wq_a = random.fp8(QL, D), wkv = random.fp8(HD, D), wc = random.bf16(C, D), wg = random.bf16(C, D);
  const LinearWeight wp = random.bf16(IH, D), wq_b = random.fp8(H * HD, QL), iwq_b = random.fp8(IH * ID, QL);
  std::vector<float> fn(size_t(24 * 4 * D)), scale = {0.5f, 0.75f, 1.0f}, base(24);
  std::vector<uint16_t> norm(size_t(D), 0x3f80), q_norm(size_t(QL), 0x3f80);  // 1.0
  for (float& v : fn) v = float(int(random.next() % 255) - 127) / 8192.0f;
  for (float& v : base) v = float(int(random.next() % 255) - 127) / 128.0f;
  double bytes = double(fn.size()) * 4;
  for (const LinearWeight* w : {&wq_a, &wkv, &wq_b, &iwq_b}) bytes += double(w->n_out * w->n_in) * (1.0 + 1.0 / (128.0 * 128.0));
  for (const LinearWeight* w : {&wc, &wg, &wp}) bytes += double(w->n_out * w->n_in) * 2.0;
  // Three ways: the steps; one call; one call with q's head norm and RoPE (A4-A9) on the device and q kept there,
  // where the other two bring q back (128 KB a token) for the host to do them, which is not timed here.
  const RopeTable rope = make_rope_table(64, 10000.0);
  for (const int mode : {0, 1, 2}) {
    const bool whole = mode > 0, keep = mode == 2;
    if (whole) setenv("DEEPINFER_CUDA_LINEAR_CHAIN", "device", 1);
    std::string error;
    std::unique_ptr<Backend> backend = make_cuda_backend(0, 0, &error);
    unsetenv("DEEPINFER_CUDA_LINEAR_CHAIN");
    DI_CHECK_MSG(backend != nullptr, error);
    for (int64_t T : token_counts) {
      std::vector<float> h(size_t(T * 4 * D)), bias(size_t(T * C));
      for (float& v : h) v = float(int(random.next() % 255) - 127) / 64.0f;  // bf16 values, as the stream's
      std::vector<float> qr(size_t(T * QL)), qrq(size_t(T * QL)), kv(size_t(T * HD)), ckv(size_t(T * C)), cs(size_t(T * C));
      std::vector<float> iw(size_t(T * IH)), q(size_t(T * H * HD)), iq(size_t(T * IH * ID));
      MhcSideParams side;
      side.h = h.data();
      side.n_tokens = T;
      side.dim = D;
      side.mhc = {fn.data(), scale.data(), base.data(), norm.data(), 24, 20, double(1e-6f), double(1e-6f)};
      MhcScratch scratch;
      std::vector<float> cos_sin(size_t(T * 64));
      for (int64_t t = 0; t < T; ++t) rope.cos_sin(1000 + t, &cos_sin[size_t(t * 64)]);
      const HeadRope q_rope{H, HD, 64, cos_sin.data(), false, true, double(1e-6f)};
      std::vector<double> seconds;
      for (int rep = 0; rep < 33; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        MhcFront front(*backend, side, scratch);
        const float *u = front.u().data(), *uq = front.uq().data();
        const LinearParams first[] = {{uq, D, T, &wq_a, 0, QL, Epilogue::kBf16, nullptr, qr.data(), QL, 128},
                                      {uq, D, T, &wkv, 0, HD, Epilogue::kBf16, nullptr, kv.data(), HD, 128},
                                      {u, D, T, &wc, 0, C, Epilogue::kF32, nullptr, ckv.data(), C},
                                      {u, D, T, &wg, 0, C, Epilogue::kF32AddBias, bias.data(), cs.data(), C},
                                      {u, D, T, &wp, 0, IH, Epilogue::kBf16, nullptr, iw.data(), IH}};
        const LinearParams second[] = {{qrq.data(), QL, T, &wq_b, 0, H * HD, Epilogue::kBf16, nullptr, q.data(), H * HD, 128},
                                       {qrq.data(), QL, T, &iwq_b, 0, IH * ID, Epilogue::kBf16, nullptr, iq.data(), IH * ID, 128}};
        const bool kept = front.run_with({first, qr.data(), T, QL, q_norm.data(), double(1e-6f), qrq.data(), 128, false, second,
                                          keep ? &q_rope : nullptr});
        DI_CHECK_MSG(kept == whole, "attention front: the device chain declined");
        if (rep >= 3) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(seconds.begin(), seconds.end());
      const double sec = seconds[seconds.size() / 2];
      const double flops = 2.0 * double(T) * (24.0 * 4 * D + double(D) * (QL + HD + 2 * C + IH) + double(QL) * (H * HD + IH * ID));
      char name[160];
      std::snprintf(name, sizeof name, "attention front, V4-Flash layer, T=%lld, %s", (long long)T,
                    keep ? "one call, q kept" : whole ? "one call" : "steps (3 calls)");
      rows.push_back(Row{name, sec * 1e6, bytes / sec / 1e9, flops / sec / 1e12, 0});
    }
  }
}

int run() {
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
  const double copy = copy_gbs();
  const double lt_big = cublaslt_tflops(true, 8192, 8192, 8192);
  std::vector<Row> rows;
  for (int64_t T : {1, 8, 64, 256}) rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T));
  rows.push_back(time_linear("e4m3/32", WeightKind::kFp8, 32, 4096, 4096, 1));
  rows.push_back(time_linear("e4m3/32", WeightKind::kFp8, 32, 4096, 4096, 64));
  for (int64_t T : {1, 8, 64}) rows.push_back(time_linear("e2m1 expert", WeightKind::kFp4, 0, 2048, 4096, T));
  rows.push_back(time_linear("bf16", WeightKind::kBf16, 0, 4096, 4096, 1));
  // The tensor-core path (the backend's default linear; the rows above are DEEPINFER_CUDA_LINEAR=fma).
  const LinearKernel mma = LinearKernel::kMma, registers = LinearKernel::kMmaRegisters, staged = LinearKernel::kMmaStaged;
  for (int64_t T : {1, 8, 64, 256, 1024}) rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, mma));
  rows.push_back(time_linear("e4m3/32", WeightKind::kFp8, 32, 4096, 4096, 64, mma));
  for (int64_t T : {1, 8, 64, 256}) rows.push_back(time_linear("e2m1 expert", WeightKind::kFp4, 0, 2048, 4096, T, mma));
  rows.push_back(time_linear("bf16", WeightKind::kBf16, 0, 4096, 4096, 1, mma));
  // Its kernels apart from 64 tokens up (the same bits; launch_linear_mma picks by the grid), and prefill
  // shapes whose staged grid is small (wq_a, wkv of a 128-token block).
  const LinearKernel split = LinearKernel::kMmaStagedSplit;
  for (int64_t T : {64, 256, 1024}) {
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, registers));
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, staged));
    if (T <= 256) rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, split));
  }
  for (int64_t n_out : {1024, 512}) {
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, n_out, 4096, 128, registers));
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, n_out, 4096, 128, split));
  }
  rows.push_back(time_linear("e2m1 expert", WeightKind::kFp4, 0, 2048, 4096, 256, registers));
  rows.push_back(time_linear("e2m1 expert", WeightKind::kFp4, 0, 2048, 4096, 256, staged));
  // The prompt tokens' FP8-operand linear beside them: prepass + main kernel per timed launch, and the main
  // kernel alone at 1024 tokens.
  for (int64_t T : {64, 256, 1024}) rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, LinearKernel::kFp8));
  rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, 1024, LinearKernel::kFp8Main));
  for (int64_t T : {256, 1024}) {  // its two tiles apart (the same bits; the launcher picks by the grid)
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, LinearKernel::kFp8Big));
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, LinearKernel::kFp8Small));
  }
  rows.push_back(time_linear("e2m1 expert", WeightKind::kFp4, 0, 2048, 4096, 256, LinearKernel::kFp8));
  // The same on the wgmma kernel (sm_90a only: elsewhere it traps, so its rows are left out).
  if (linear_fp8_wgmma_runs_on(prop.major, prop.minor)) {
    for (int64_t T : {64, 256, 1024, 4096}) {
      rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, LinearKernel::kWgmma));
    }
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, 4096, LinearKernel::kFp8));
    for (int64_t T : {1024, 4096}) {
      rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, T, LinearKernel::kWgmmaMain));
    }
    rows.push_back(time_linear("e4m3/128", WeightKind::kFp8, 128, 4096, 4096, 4096, LinearKernel::kFp8Main));
    rows.push_back(time_linear("e2m1 expert", WeightKind::kFp4, 0, 2048, 4096, 256, LinearKernel::kWgmma));
  } else {
    std::printf("(no wgmma rows: compute capability %d.%d does not run it)\n", prop.major, prop.minor);
  }
  rows.push_back(time_linear("bf16", WeightKind::kBf16, 0, 4096, 4096, 256, registers));
  rows.push_back(time_linear("bf16", WeightKind::kBf16, 0, 4096, 4096, 256, staged));
  // A decode step's routed-expert group (6 experts' w1 and w3), one launch per op and grouped.
  rows.push_back(time_expert_group(12, 1, false));
  rows.push_back(time_expert_group(12, 1, true));
  rows.push_back(time_expert_group(12, 4, false));
  rows.push_back(time_expert_group(12, 4, true));
  // The V4-Flash output head (bf16, 129280 x 4096: 1.06 GB, the largest single read of a decode step).
  rows.push_back(time_linear("bf16 head", WeightKind::kBf16, 0, 129280, 4096, 1));
  rows.push_back(time_linear("bf16 head", WeightKind::kBf16, 0, 129280, 4096, 1, mma));
  for (const bool sampled : {false, true}) {  // then a step's draws, greedy and at a temperature, at batch 1, 8 (a row a block, and split) and 256
    rows.push_back(time_row_draws(1, sampled));
    rows.push_back(time_row_draws(1, sampled, /*split=*/true));
    rows.push_back(time_row_draws(8, sampled));
    rows.push_back(time_row_draws(8, sampled, /*split=*/true));
    rows.push_back(time_row_draws(256, sampled));
  }
  for (const int k : {50, 1024}) {  // and a top-k draw's candidates, or a nucleus draw's first ones
    rows.push_back(time_row_top_k(1, k));
    rows.push_back(time_row_top_k(1, k, /*split=*/true));
    rows.push_back(time_row_top_k(8, k));
    rows.push_back(time_row_top_k(8, k, /*split=*/true));
    rows.push_back(time_row_top_k(256, k));
  }
  rows.push_back(time_attention(64, 512, 640, true));
  rows.push_back(time_attention(64, 512, 640, false));
  // The split pair (DEEPINFER_CUDA_ATTENTION=split), then the V4.1 decode shape (128 window + 1024 top-k).
  rows.push_back(time_attention(64, 512, 640, true, true));
  rows.push_back(time_attention(64, 512, 640, false, true));
  rows.push_back(time_attention(64, 512, 1152, false));
  rows.push_back(time_attention(64, 512, 1152, false, true));
  // V4's 584-byte cache rows: decoded into floats first, then read packed by the kernels (ATTENTION_ROWS=packed),
  // at one token and at 64- and 256-sequence decode steps (256 x 640 rows: 96 MB packed, 335 MB as floats).
  for (const int64_t T : {int64_t(1), int64_t(64), int64_t(256)}) {
    for (const bool split : {false, true}) {
      rows.push_back(time_attention(64, 512, 640, true, split, AttentionRows::kDecoded, T));
      rows.push_back(time_attention(64, 512, 640, true, split, AttentionRows::kPacked, T));
    }
  }
  rows.push_back(time_index(64, 128, 1024));
  rows.push_back(time_index(64, 128, 4096));
  rows.push_back(time_index(64, 128, 1024, 64));  // a prefill block's 64 tokens in one launch
  rows.push_back(time_index(64, 128, 4096, 1, true));  // the keys read packed from the mirror's arena
  // On the tensor cores (DEEPINFER_CUDA_INDEX_SCORES=mma), against the FMA kernel at 16k keys (64k tokens of context).
  rows.push_back(time_index(64, 128, 4096, 1, true, true));
  rows.push_back(time_index(64, 128, 16384, 1, true));
  rows.push_back(time_index(64, 128, 16384, 1, true, true));
  rows.push_back(time_index(64, 128, 1024, 64, false, true));  // a prefill block's 64 tokens
  rows.push_back(time_index(64, 128, 4096));
  rows.push_back(time_index_select(4096, 512, 1, false));    // V4-Flash I10 at 16k tokens of context
  rows.push_back(time_index_select(65536, 512, 1, false));   // at 256k
  rows.push_back(time_index_select(65536, 512, 1, true));    // V4.1 with its candidate mask
  rows.push_back(time_index_select(4096, 512, 64, false));   // a prefill block's 64 tokens
  rows.push_back(time_hc_mix(1, 4 * 4096, 24));
  rows.push_back(time_hc_mix(64, 4 * 4096, 24));
  // A block's whole MoE on the device, per call from the host (copies and the wait included; GB/s of its weights).
  time_device_moe({1, 8, 64}, true, MoeTiming::kMoe, rows);
  time_device_moe({1, 8}, false, MoeTiming::kMoe, rows);
  time_device_moe({1, 8, 64}, true, MoeTiming::kSide, rows);
  time_device_moe({1, 8, 64}, true, MoeTiming::kTailSteps, rows);
  time_device_moe({1, 8, 64}, true, MoeTiming::kTail, rows);
  time_attention_front({1, 8, 64}, rows);

  std::printf("\nceilings, measured now: device-to-device copy %.0f GB/s (read + write); cuBLASLt e4m3 GEMM 8192^3 %.0f TFLOP/s\n",
              copy, lt_big);
  std::printf("%-48s %10s %9s %7s %9s %12s %7s\n", "kernel", "time us", "GB/s", "%copy", "TFLOP/s", "cuBLASLt TF", "%Lt");
  for (const Row& r : rows) {
    char lt[32] = "-", pct[32] = "-";
    if (r.lt_tflops > 0) {
      std::snprintf(lt, sizeof(lt), "%.1f", r.lt_tflops);
      std::snprintf(pct, sizeof(pct), "%.1f", 100.0 * r.tflops / r.lt_tflops);
    }
    std::printf("%-48s %10.1f %9.0f %7.1f %9.2f %12s %7s\n", r.name.c_str(), r.us, r.gbs, 100.0 * r.gbs / copy, r.tflops, lt, pct);
  }
  std::printf("(cuBLASLt at the same shape with T rounded up to 16: e4m3 for e4m3 and e2m1 rows, bf16 for bf16 rows)\n");
  return 0;
}

}  // namespace
}  // namespace deepinfer::cuda

int main() { return deepinfer::cuda::run(); }
