#include "backend/cpu/linear_cpu.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "backend/cpu/epilogue.h"
#include "backend/cpu/simd_kernels.h"
#include "core/dtypes.h"

namespace deepinfer::cpu {

float fast_epilogue(Epilogue epilogue, float acc, float bias) {
  switch (epilogue) {
    case Epilogue::kBf16: return round_bf16_from_float(acc);
    case Epilogue::kF32: return acc;
    case Epilogue::kF32AddBias: return round_f32(double(acc) + double(bias));
    case Epilogue::kSqrtSoftplus: return apply_epilogue(epilogue, double(acc), 0.0f);
  }
  return 0.0f;
}

namespace {

// bf16 rounding of n fp32 values, branch-free so the compiler vectorizes it (same result as
// round_bf16_from_float: inf / NaN pass through).
void round_bf16_row(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = float_to_bits(in[i]);
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    out[i] = bits_to_float((b & 0x7f800000u) == 0x7f800000u ? b : rounded);
  }
}

// Distinct per linear call (process-wide: it keys per-thread caches derived from x across backends).
uint64_t next_call_id() {
  static std::atomic<uint64_t> n_calls{0};
  return ++n_calls;
}

// Packs x for a family; false when the family cannot take some token's values (ws.token_packed says whose).
bool pack(const LinearParams& p, const SimdKernels& ks, WorkerPool& pool, LinearWorkspace& ws, PackedX* out) {
  const int64_t K = p.weight->n_in, T = p.n_tokens;
  const int64_t kp = (K + ks.chunk - 1) / ks.chunk * ks.chunk, stride = row_stride(kp, ks.elem_bytes);
  const size_t bytes = size_t(T * stride) * ks.elem_bytes;
  if (ws.x_packed.size() < bytes) ws.x_packed.resize(bytes);
  if (ws.token_packed.size() < size_t(T)) ws.token_packed.resize(size_t(T));
  const bool fp4_order = p.weight->dtype == DType::kI8;
  std::atomic<bool> ok{true};
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      ws.token_packed[size_t(t)] = ks.pack_x(p.x, p.x_stride, t, t + 1, K, stride, fp4_order, ws.x_packed.data());
      if (!ws.token_packed[size_t(t)]) ok = false;
    }
  };
  const bool parallel = T * K >= (int64_t(1) << 16);
  if (parallel) pool.parallel_for(T, 16, body);
  else body(0, T);
  *out = PackedX{ws.x_packed.data(), T, kp, stride, next_call_id(), p.weight->dtype};
  if (ok && T > ks.direct_tokens && ks.tile_x) {
    const size_t tiled_bytes = size_t(T * kp) * ks.elem_bytes;
    if (ws.x_tiled.size() < tiled_bytes) ws.x_tiled.resize(tiled_bytes);
    const int64_t n_blocks = (T + ks.tile_token_block - 1) / ks.tile_token_block;
    auto interleave = [&](int64_t b0, int64_t b1) { ks.tile_x(*out, b0, b1, ws.x_tiled.data()); };
    if (parallel) pool.parallel_for(n_blocks, 4, interleave);
    else interleave(0, n_blocks);
    out->tiled = ws.x_tiled.data();
  }
  return ok;
}

// One linear op made ready for its parallel region: the family, the packed activations and the work units.
struct PreparedLinear {
  const LinearParams* p = nullptr;
  const SimdKernels* ks = nullptr;
  PackedX x;
  int64_t unit = 0, n_units = 0;
  // The op is not ready: its tokens split between two families (its workspace's token_packed: 1 where the level's
  // family packs the token's x, 0 where it takes the fp32 family), and it runs as its token runs (token_runs).
  bool by_token = false;
};

// The op as runs of consecutive tokens that take one family each, an op per run.
std::vector<LinearParams> token_runs(const LinearParams& p, const std::vector<uint8_t>& token_packed) {
  std::vector<LinearParams> runs;
  for (int64_t t0 = 0, t1 = 0; t0 < p.n_tokens; t0 = t1) {
    for (t1 = t0 + 1; t1 < p.n_tokens && token_packed[size_t(t1)] == token_packed[size_t(t0)];) ++t1;
    LinearParams run = p;
    run.x = p.x + t0 * p.x_stride;
    run.n_tokens = t1 - t0;
    run.out = p.out + t0 * p.out_stride;
    if (p.bias) run.bias = p.bias + t0 * p.n_rows;
    runs.push_back(run);
  }
  return runs;
}

// Whether two ops take the same activations into the same packed form (an expert's w1 and w3): same x, and
// weights of one dtype, width and block, which pick the same family and the same x layout.
bool same_packed_input(const LinearParams& a, const LinearParams& b) {
  return a.x == b.x && a.x_stride == b.x_stride && a.n_tokens == b.n_tokens && a.weight->n_in == b.weight->n_in &&
         a.weight->dtype == b.weight->dtype && a.weight->block == b.weight->block;
}

// shared: an op prepared before this one whose packed x this op can take (same_packed_input), or nullptr.
PreparedLinear prepare(const LinearParams& p, SimdLevel level, WorkerPool& pool, LinearWorkspace& ws,
                       const PreparedLinear* shared = nullptr) {
  const LinearWeight& w = *p.weight;
  DI_CHECK(p.row_begin >= 0 && p.row_begin + p.n_rows <= w.n_out);
  PreparedLinear pl;
  pl.p = &p;
  if (p.n_tokens <= 0 || p.n_rows <= 0) return pl;
  if (shared && shared->ks && same_packed_input(p, *shared->p)) {
    // Packing x again (serially, for an expert's ~12 tokens) cost as much as the copy it produced; a fresh
    // call id keeps the per-call caches of the kernels (scaled_x: keyed by call and row block) apart.
    pl.ks = shared->ks;
    pl.x = shared->x;
    pl.x.call_id = next_call_id();
  } else {
    // A weight the level's family does not take (kAvx512Bf16: FP8 and FP4) goes to the fp32 family of the same
    // width for every token count, so a token's sums never depend on the batch; the scalar family takes the rest.
    pl.ks = &simd_kernels(level);
    if (!pl.ks->supports(w)) pl.ks = &fp32_simd_kernels(level);
    if (!pl.ks->supports(w)) pl.ks = &kSimdKernelsScalar;
    if (!pack(p, *pl.ks, pool, ws, &pl.x)) {
      // Activations that are not bf16 values: the fp32 family of the same width, for those tokens alone. A token
      // whose x is bf16 values keeps the level's family, whatever else shares its call, since the two families'
      // sums differ and a token's sums must not depend on its batch.
      const auto packed = ws.token_packed.begin(), packed_end = packed + p.n_tokens;
      if (std::find(packed, packed_end, 1) != packed_end) {
        pl.ks = nullptr;
        pl.by_token = true;
        return pl;
      }
      pl.ks = &fp32_simd_kernels(level);
      DI_CHECK(pack(p, *pl.ks, pool, ws, &pl.x));
    }
  }
  pl.unit = p.n_tokens > pl.ks->direct_tokens ? kTileModeRows : kRowTile;
  pl.n_units = (p.n_rows + pl.unit - 1) / pl.unit;
  return pl;
}

// Prefetches the weight bytes of an op's first work unit into L2 (rows are contiguous in every format).
void prefetch_first_unit(const PreparedLinear& pl) {
  const LinearWeight& w = *pl.p->weight;
  const uint8_t* begin = w.data + pl.p->row_begin * w.row_bytes();
  const int64_t bytes = std::min(pl.unit, pl.p->n_rows) * w.row_bytes();
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(begin + b, 0, 2);
}

// Work unit i of a prepared op: its rows' sums for every token, then the epilogue into p.out.
void run_unit(const PreparedLinear& pl, int64_t i) {
  const LinearParams& p = *pl.p;
  const int64_t T = p.n_tokens, unit = pl.unit;
  thread_local std::vector<float> c;
  if (c.size() < size_t(T * unit)) c.resize(size_t(T * unit));
  const int64_t n0 = i * unit, nr = std::min(unit, p.n_rows - n0);
  pl.ks->tile(*p.weight, p.row_begin + n0, nr, pl.x, c.data(), unit);
  for (int64_t t = 0; t < T; ++t) {
    float* out = p.out + t * p.out_stride + n0;
    const float* acc = c.data() + t * unit;
    if (p.epilogue == Epilogue::kBf16) {
      round_bf16_row(acc, out, nr);
    } else if (p.epilogue == Epilogue::kF32) {
      std::copy_n(acc, nr, out);
    } else {
      const float* bias = p.bias ? p.bias + t * p.n_rows + n0 : nullptr;
      for (int64_t r = 0; r < nr; ++r) out[r] = fast_epilogue(p.epilogue, acc[r], bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace

void linear_fast(const LinearParams& p, SimdLevel level, WorkerPool& pool, LinearWorkspace& ws) {
  const PreparedLinear pl = prepare(p, level, pool, ws);
  if (pl.by_token) {  // rare (a call mixing bf16 and other activations): workspaces of its own
    std::vector<LinearWorkspace> run_ws;
    linears_fast(token_runs(p, ws.token_packed), level, pool, run_ws);
    return;
  }
  pool.parallel_for(pl.n_units, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) run_unit(pl, i);
  });
}

void linears_fast(std::span<const LinearParams> ps, SimdLevel level, WorkerPool& pool,
                  std::vector<LinearWorkspace>& wss) {
  if (wss.size() < ps.size()) wss.resize(ps.size());
  std::vector<PreparedLinear> pls;
  std::vector<int64_t> first{0};  // first[j]: the first unit of op j in the combined range
  pls.reserve(ps.size());
  bool split = false;
  for (size_t j = 0; j < ps.size(); ++j) {
    pls.push_back(prepare(ps[j], level, pool, wss[j], j > 0 ? &pls[j - 1] : nullptr));
    first.push_back(first.back() + pls.back().n_units);
    split |= pls.back().by_token;
  }
  if (split) {  // rare (a call mixing bf16 and other activations): every op again, the split ones as their runs
    std::vector<LinearParams> ops;
    for (size_t j = 0; j < ps.size(); ++j) {
      if (!pls[j].by_token) ops.push_back(ps[j]);
      else for (const LinearParams& run : token_runs(ps[j], wss[j].token_packed)) ops.push_back(run);
    }
    linears_fast(ops, level, pool, wss);  // (nothing prepared above is read again)
    return;
  }
  pool.parallel_for(first.back(), 1, [&](int64_t i0, int64_t i1) {
    size_t j = size_t(std::upper_bound(first.begin(), first.end(), i0) - first.begin()) - 1;
    for (int64_t i = i0; i < i1; ++i) {
      while (i >= first[j + 1]) ++j;
      // The next op's first unit lies elsewhere in memory, where the in-matrix prefetches do not reach: fetch
      // it into L2 (and the shared L3, for whichever thread runs it) while this op's last unit computes.
      if (i == first[j + 1] - 1) {
        for (size_t k = j + 1; k < pls.size(); ++k) {
          if (pls[k].n_units == 0) continue;
          prefetch_first_unit(pls[k]);
          break;
        }
      }
      run_unit(pls[j], i - first[j]);
    }
  });
}

}  // namespace deepinfer::cpu
