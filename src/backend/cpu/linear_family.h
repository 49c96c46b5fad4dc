// The row-tile algorithm of the SIMD linear families, written once over an ISA traits struct `S` and
// instantiated by simd_avx2.cpp, simd_avx512.cpp and simd_avx512bf16.cpp INSIDE their target region and
// their own namespace (so no inline function compiled for one ISA can be picked for another). Must not be
// included anywhere else (it has no include guard on purpose).
// Invariants: weights are decoded exactly (code value times a power of two) into registers (direct mode,
// <= kDirectT tokens) or into a per-thread tile of up to kTileModeRows rows (tile mode: K-blocked, token
// panels, packed layouts; see tile_loop); sums are fp32 and, for every (row, token), accumulate the same products
// in the same order in every mode, so a token's outputs never depend on how many tokens share the call.
//
// S provides: Elem (packed activation / tile element), W (one decoded chunk), kChunk (elements per chunk),
// kDirectR / kDirectT (rows x tokens of the register-decode kernel), kTileR / kTileT (rows x tokens of the
// tile kernel); F (accumulator vector) with the fp32 vector ops (fload, fstore, ...), zero(), dot(acc, W, W)
// (acc + sum of elementwise products, fp32), load_w(const Elem*), store_w(Elem*, W), decode_bf16(const
// uint16_t*), reduce<R>(const F*, float*) (R horizontal sums), pack_x (the SimdKernels signature); optionally
// decode_fp8(const uint8_t*, float multiplier) with decode_fp8_wide (without them the family takes no FP8
// weights), decode_fp8_raw for the scaled-x direct mode (see scaled_x; with kFp8RawUnit, scale_x_chunk for bf16
// x, and optionally decode_fp8_raw_pair for two chunks at once), decode_fp4(const uint8_t*, uint8_t e8m0
// scale byte) (no FP4 without it), chains_for(DType) (accumulator chains per row, see kChains) and kFusedRows
// (fused tile mode for calls of a few token blocks, see fused_panels; with fused_for(DType), kFusedPairPasses,
// and for split families load_parts(const Elem*, part stride)); optionally pin_w(W&) (see pin_w).
//
// fp8 chunks use the multiplier 2^(s - 7) on the raw code bits (e4m3 value * 2^-120), which is exact
// whenever the scale byte s <= 134 (|w| < 2^15 per unit code); tiles with a larger scale byte take the
// two-step decode (value first, then scale).

// The including file includes <algorithm>, <cmath>, <cstring>, <limits>, <type_traits>, <utility> and <vector>
// before its namespace.

namespace family {

using deepinfer::DType;
using deepinfer::LinearWeight;
using deepinfer::cpu::kE8m0Values;
using deepinfer::cpu::kTileModeRows;
using deepinfer::cpu::PackedX;

constexpr int kMaxFp8Scale = 134;  // largest scale byte for the one-multiply fp8 decode
// K elements per tile-mode block and accumulator chain (a block holds kTileBlockElems * kChains elements, see
// kTileBlockChunks). Each packed-kernel call covers one chain's share of a block with its accumulators in
// registers, loading them from state before and storing them after: at 512 that fill and drain took ~20% of the
// kernel's samples in a V4.1 prefill; 1024 ran a 512-token FP8 GEMM 12-20% faster on one Zen 4 core (2048 was
// no faster).
constexpr int64_t kTileBlockElems = 1024;
// Token blocks per tile-mode panel (see tile_loop).
constexpr int64_t kPanelBlocks = 16;  // 96 tokens for kTileT = 6
constexpr int64_t kPrefetchGroups = 2;       // direct mode: prefetch distance in row groups

// Where one weight row's chunks come from.
struct RowSrc {
  const uint8_t* data = nullptr;   // row start
  const float* mult = nullptr;     // fp8: per chunk 2^(s-7) (or 2^(s-127) for wide tiles)
  const uint8_t* scale = nullptr;  // fp4: the row's e8m0 bytes, one per 32 elements
};

// Per-thread buffers (grown once, reused by every call).
template <class S>
struct Scratch {
  AlignedVector<typename S::Elem> tile;  // tile mode: one decoded K block, packed (store_packed)
  std::vector<float> mult;             // fp8: [row blocks of the tile, n_chunks]
  std::vector<uint8_t> mult_scales;    // the scale bytes, block and chunk count that mult was made from
  int64_t mult_block = 0, mult_chunks = 0;
  bool mult_wide = false;
  std::vector<uint8_t> tail;           // one zero-padded chunk per row for K % chunk
  // Tile and fused modes: unreduced accumulators of every (token block, row group), 64-byte vectors loaded and
  // stored at every kernel call. As a std::vector its start moved with the heap's layout, and one build's fused
  // FP4 kernel ran ~17% slower than another's with the same code (kernel_bench, one core).
  AlignedVector<float> state;
  AlignedVector<typename S::Elem> x_scaled;  // scaled-x direct mode: x times the row block's multipliers
  uint64_t x_scaled_call = ~uint64_t(0);   // (call, row block) that x_scaled holds
  int64_t x_scaled_block = -1;
  bool x_scaled_ok = false;                // fp32 scaled-x mode: whether x_scaled is exact for that row block
  uint64_t x_range_call = ~uint64_t(0);    // the call whose largest / smallest nonzero |x| these are
  float x_hi = 0.0f, x_lo = 0.0f;
};

template <class S>
Scratch<S>& scratch() {
  thread_local Scratch<S> s;
  return s;
}

// r's scales from chunk ch on (its fp8 multipliers or fp4 scale bytes; the data pointer is left as is): chunk
// ch's own scale is the first.
template <class S, DType D>
inline RowSrc advanced(RowSrc r, int64_t ch) {
  if constexpr (D == DType::kF8E4M3) r.mult += ch;
  else if constexpr (D == DType::kI8) r.scale += ch * S::kChunk / 32;
  return r;
}

// kScaledX: fp8 codes decode to their raw float bits only (e4m3 value * 2^-120); x comes already multiplied
// by the chunk's 2^(s - 7) (see scaled_x).
template <class S, DType D, bool kWide, bool kScaledX = false>
inline typename S::W decode_chunk(const RowSrc& r, int64_t ch, const uint8_t* bytes) {
  if constexpr (D == DType::kBF16) {
    return S::decode_bf16(reinterpret_cast<const uint16_t*>(bytes));
  } else if constexpr (D == DType::kF8E4M3) {
    if constexpr (kScaledX) return S::decode_fp8_raw(bytes);
    else if constexpr (kWide) return S::decode_fp8_wide(bytes, *advanced<S, D>(r, ch).mult);
    else return S::decode_fp8(bytes, *advanced<S, D>(r, ch).mult);
  } else {
    return S::decode_fp4(bytes, *advanced<S, D>(r, ch).scale);
  }
}

// Whether the family takes e4m3 (FP8) / packed e2m1 (FP4) weights at all (S::decode_fp8 / S::decode_fp4);
// linear_fast hands them to the fp32 family of the same width otherwise.
template <class S>
constexpr bool kDecodesFp8 = requires(const uint8_t* p) { S::decode_fp8(p, 1.0f); };
template <class S>
constexpr bool kDecodesFp4 = requires(const uint8_t* p) { S::decode_fp4(p, uint8_t(127)); };

template <DType D>
constexpr int64_t chunk_bytes(int64_t chunk) {
  return D == DType::kBF16 ? 2 * chunk : D == DType::kF8E4M3 ? chunk : chunk / 2;
}

// Accumulator chains per (row, token) for weights of dtype D (S::chains_for(D), else 1): chunk ch is added to
// chain ch % kChains, and the chains' vectors are summed lane by lane (((chain 0 + chain 1) + chain 2) + ...)
// before the horizontal sum. Several chains give a single row independent vdpbf16ps chains, so that one row at
// a time (one sequential stream, which Zen 4 reads far faster than rows side by side) is not bound by the
// instruction's latency. Every mode follows the dtype's count, so a token's sums never depend on the mode.
template <class S, DType D>
constexpr int kChains = [] {
  if constexpr (requires { S::chains_for(D); }) return int(S::chains_for(D));
  else return 1;
}();

// Calls fn(std::integral_constant<int, k>) for the run-time chain k < kC: the accumulators stay indexed by
// constants, so they stay in registers.
template <int kC, class Fn>
inline void with_chain(int k, Fn&& fn) {
  [&]<int... kK>(std::integer_sequence<int, kK...>) {
    ((k == kK ? fn(std::integral_constant<int, kK>{}) : void()), ...);
  }(std::make_integer_sequence<int, kC>{});
}

// Of a K block of nch chunks, the chunks of chain k (chunks k, k + kC, ...: the first nch % kC chains hold one
// more), and how many chunks the chains before k hold (where chain k starts when the block is stored chain by
// chain, see block_position).
constexpr int64_t chain_chunks(int64_t nch, int k, int kC) { return nch / kC + (k < nch % kC ? 1 : 0); }
constexpr int64_t chain_first(int64_t nch, int k, int kC) { return k * (nch / kC) + std::min<int64_t>(k, nch % kC); }

// The tile kernels' chain loop over a K block of nch chunks stored chain by chain: fn(k, first_step, n_k,
// chain_state) for each chain k with steps, its accumulators at state + k * state_per_chain. Only a last block
// of fewer than kC chunks leaves a chain without steps: its state is zeroed if that block is also the first.
template <int kC, class Fn>
inline void for_each_chain(int64_t nch, bool first_block, float* state, int64_t state_per_chain, Fn&& fn) {
  for (int k = 0; k < kC; ++k) {
    const int64_t n_k = chain_chunks(nch, k, kC);
    float* chain_state = state + k * state_per_chain;
    if (n_k > 0) fn(k, chain_first(nch, k, kC), n_k, chain_state);
    else if (first_block) std::fill(chain_state, chain_state + state_per_chain, 0.0f);
  }
}

// Families whose W is several accumulator-width parts (S::kParts, S::load_part) run the tile kernel one
// part at a time.
template <class S>
constexpr bool kSplitChunks = requires { S::kParts; };

// The chains' accumulators of R rows summed lane by lane (chain 0 + chain 1) into sum[0..R).
template <class S, int R>
inline void sum_chains(const typename S::F (*acc)[R], int n_chains, typename S::F* sum) {
  for (int r = 0; r < R; ++r) {
    sum[r] = acc[0][r];
    for (int k = 1; k < n_chains; ++k) sum[r] = S::fadd(sum[r], acc[k][r]);
  }
}

// Decodes rows[0..R) and multiplies them with T tokens of x, all chunks; sums[t][r] = the (row, token) lane
// sums (the chains added, not yet reduced).
// The last chunk may be partial (tail_bytes[r] then holds that row's zero-padded chunk).
// Each row stream prefetches the same chunk of the row R rows further on (the next group, which is the
// next stretch of the same contiguous weight matrix): R streams of one group-size distance each.
template <class S, DType D, bool kWide, bool kScaledX, int R, int T>
void direct_kernel(const RowSrc* rows, const uint8_t* const* tail_bytes, const typename S::Elem* x, int64_t xs,
                   int64_t n_full, bool has_tail, typename S::F (*sums)[R]) {
  // Software prefetches, one per line R groups ahead, for FP8 rows read side by side (R > 1), which the hardware
  // prefetchers follow poorly, and for FP4. A single FP8 row is one sequential stream that they follow better
  // alone: kernel_bench level 4 on a Zen 4, FP8 GEMV of one token without them, 1 KB rows 14-17 -> 22-23 GB/s on
  // one core and 30-33 -> 41-42 on two, 4 KB rows 20 -> 25 and 39-43 -> 48; the FP4 GEMV, bound by its decode,
  // lost 5% without them. bf16 rows stream without them (tried again for two rows: within noise).
  // Families with S::kDirectPrefetchToL2 (those that Intel's Xeons run) prefetch every row, bf16 too, into L2:
  // see simd_avx512.cpp.
  constexpr bool kToL2 = [] {
    if constexpr (requires { S::kDirectPrefetchToL2; }) return S::kDirectPrefetchToL2;
    else return false;
  }();
  constexpr bool kPrefetch = kToL2 || D == DType::kI8 || (D == DType::kF8E4M3 && R > 1);
  constexpr int kLocality = kToL2 ? 2 : 3;
  const int64_t prefetch_distance = kPrefetchGroups * R * n_full * chunk_bytes<D>(S::kChunk);
  constexpr int64_t kPrefetchEvery = chunk_bytes<D>(S::kChunk) >= 64 ? 1 : 64 / chunk_bytes<D>(S::kChunk);  // once per line
  using F = typename S::F;
  using W = typename S::W;
  constexpr int64_t kBytes = chunk_bytes<D>(S::kChunk);
  constexpr int kC = kChains<S, D>;
  F acc[T][kC][R];
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < kC; ++k)
      for (int r = 0; r < R; ++r) acc[t][k][r] = S::zero();
  // Chunk ch of every row into its chain (kChain = ch % kC, a constant so the accumulators stay in registers).
  auto step = [&]<int kChain>(std::integral_constant<int, kChain>, int64_t ch, const W* w) {
    for (int t = 0; t < T; ++t) {
      const W xv = S::load_w(x + t * xs + ch * S::kChunk);
      for (int r = 0; r < R; ++r) acc[t][kChain][r] = S::dot(acc[t][kChain][r], w[r], xv);
    }
  };
  constexpr std::integral_constant<int, 0> kChain0{};
  int64_t ch = 0;
  if constexpr (D == DType::kI8 && requires { S::kFp4Pairs; }) {
    // fp4: the two chunks of each 32-element scale block decode from one table (S::decode_fp4_pair), row by
    // row; each accumulator still adds chunk ch before chunk ch + 1, so the sums are unchanged.
    static_assert(S::kChunk == 16, "fp4 pairs are the two 16-element chunks of a 32-element scale block");
    static_assert(kC == 1, "fp4 pairs add both chunks to one chain");
    for (; ch + 2 <= n_full; ch += 2) {
      for (int r = 0; r < R; ++r) {
        if constexpr (kPrefetch) __builtin_prefetch(rows[r].data + ch * kBytes + prefetch_distance, 0, kLocality);
        W w0, w1;
        S::decode_fp4_pair(rows[r].data + ch * kBytes, rows[r].scale[ch * S::kChunk / 32], &w0, &w1);
        for (int t = 0; t < T; ++t) {
          acc[t][0][r] = S::dot(acc[t][0][r], w0, S::load_w(x + t * xs + ch * S::kChunk));
          acc[t][0][r] = S::dot(acc[t][0][r], w1, S::load_w(x + t * xs + (ch + 1) * S::kChunk));
        }
      }
    }
  }
  if constexpr (D == DType::kF8E4M3 && kScaledX && requires(const uint8_t* p, W* w) { S::decode_fp8_raw_pair(p, w, w); }) {
    // fp8 codes without their scale (x' carries it), two chunks at a time (S::decode_fp8_raw_pair).
    static_assert(kC == 2, "raw fp8 pairs go to chains 0 and 1");
    for (; ch + 2 <= n_full; ch += 2) {
      W w0[R], w1[R];
      for (int r = 0; r < R; ++r) {
        if constexpr (kPrefetch) __builtin_prefetch(rows[r].data + ch * kBytes + prefetch_distance, 0, kLocality);
        S::decode_fp8_raw_pair(rows[r].data + ch * kBytes, &w0[r], &w1[r]);
      }
      step(kChain0, ch, w0);
      step(std::integral_constant<int, 1>{}, ch + 1, w1);
    }
  }
  // ch is a multiple of kC here: the loops above take chunks in pairs, and only for kC <= 2.
  auto decode_step = [&]<int kChain>(std::integral_constant<int, kChain> chain, int64_t chunk) {
    W w[R];
    for (int r = 0; r < R; ++r) {
      if (kPrefetch && chunk % kPrefetchEvery == 0) {
        __builtin_prefetch(rows[r].data + chunk * kBytes + prefetch_distance, 0, kLocality);
      }
      w[r] = decode_chunk<S, D, kWide, kScaledX>(rows[r], chunk, rows[r].data + chunk * kBytes);
    }
    step(chain, chunk, w);
  };
  for (; ch + kC <= n_full; ch += kC) {
    [&]<int... kK>(std::integer_sequence<int, kK...>) {
      (decode_step(std::integral_constant<int, kK>{}, ch + kK), ...);
    }(std::make_integer_sequence<int, kC>{});
  }
  for (; ch < n_full; ++ch) with_chain<kC>(int(ch % kC), [&](auto chain) { decode_step(chain, ch); });
  if (has_tail) {
    W w[R];
    for (int r = 0; r < R; ++r) w[r] = decode_chunk<S, D, kWide, kScaledX>(rows[r], n_full, tail_bytes[r]);
    with_chain<kC>(int(n_full % kC), [&](auto chain) { step(chain, n_full, w); });
  }
  for (int t = 0; t < T; ++t) sum_chains<S, R>(acc[t], kC, sums[t]);
}

// Rows per direct-kernel group for T tokens of dtype D: S::direct_rows_for(D, T) when S gives it (e.g. more
// rows for a single token, whose few accumulators would otherwise leave the FMA latency uncovered), S::kDirectR
// otherwise. Any R gives the same sums: each row's accumulator adds its chunks in order, and S::reduce<R> must
// sum a vector's lanes in the same order for every R.
template <class S, DType D, int T>
constexpr int direct_rows() {
  if constexpr (requires { S::direct_rows_for(D, T); }) return S::direct_rows_for(D, T);
  else return S::kDirectR;
}

// The tile kernels' accumulators: zero (kFirst) or continued from state; at the end reduced into
// c[t * cs + r] (kLast) or saved to state for the next K block.
template <class S, int R, int T, bool kFirst>
inline void start_accumulators(typename S::F (&acc)[T][R], const float* state) {
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      if constexpr (kFirst) acc[t][r] = S::zero();
      else acc[t][r] = S::fload(state + (t * R + r) * S::kLanes);
    }
}
template <class S, int R, int T, bool kLast>
inline void finish_accumulators(const typename S::F (&acc)[T][R], float* state, float* c, int64_t cs) {
  if constexpr (kLast) {
    for (int t = 0; t < T; ++t) S::template reduce<R>(acc[t], c + t * cs);
  } else {
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) S::fstore(state + (t * R + r) * S::kLanes, acc[t][r]);
  }
}

// Strided tile kernel (dot_tiles): R rows of w (stride ws) times T tokens of x (stride xs), all n_chunks chunks in
// one pass, summed in the order of the direct kernel and the packed tile kernel, so results never depend on the
// number of tokens in the call.
template <class S, int R, int T>
void tile_kernel(const typename S::Elem* w, int64_t ws, const typename S::Elem* x, int64_t xs, int64_t n_chunks,
                 float* c, int64_t cs) {
  static_assert(kChains<S, DType::kBF16> == 1, "dot_tiles families sum in one chain");
  using F = typename S::F;
  using W = typename S::W;
  F acc[T][R];
  start_accumulators<S, R, T, true>(acc, nullptr);
  // Promised (dot_tiles checks it): as in packed_tile_kernel, a possibly empty loop made GCC keep acc on the stack.
  if (n_chunks <= 0) __builtin_unreachable();
  if constexpr (kSplitChunks<S>) {
    // One accumulator-width part of the chunk at a time: R + 1 live operand registers instead of 2R + 2,
    // which leaves room for R * T accumulators (enough independent FMA chains to cover the FMA latency).
    // The products are added in the order S::dot adds them (part 0 first), so the sums are unchanged.
    for (int64_t ch = 0; ch < n_chunks; ++ch) {
      for (int part = 0; part < S::kParts; ++part) {
        F wv[R];
        for (int r = 0; r < R; ++r) wv[r] = S::load_part(w + r * ws + ch * S::kChunk, part);
        for (int t = 0; t < T; ++t) {
          const F xv = S::load_part(x + t * xs + ch * S::kChunk, part);
          for (int r = 0; r < R; ++r) acc[t][r] = S::ffma(wv[r], xv, acc[t][r]);
        }
      }
    }
  } else {
    for (int64_t ch = 0; ch < n_chunks; ++ch) {
      W wv[R];
      for (int r = 0; r < R; ++r) wv[r] = S::load_w(w + r * ws + ch * S::kChunk);
      for (int t = 0; t < T; ++t) {
        const W xv = S::load_w(x + t * xs + ch * S::kChunk);
        for (int r = 0; r < R; ++r) acc[t][r] = S::dot(acc[t][r], wv[r], xv);
      }
    }
  }
  finish_accumulators<S, R, T, true>(acc, nullptr, c, cs);
}

template <class S, int R, int T>
void tile_tokens(const typename S::Elem* w, int64_t ws, const typename S::Elem* x, int64_t xs, int64_t n_tokens,
                 int64_t n_chunks, float* c, int64_t cs) {
  if constexpr (T > 0) {
    if (n_tokens == T) return tile_kernel<S, R, T>(w, ws, x, xs, n_chunks, c, cs);
    return tile_tokens<S, R, T - 1>(w, ws, x, xs, n_tokens, n_chunks, c, cs);
  }
}

// Tile mode runs on packed layouts: vectors ("steps") of kStep elements, one accumulator-width part of a chunk
// for split families (kParts), the whole chunk otherwise. A K block of the decoded tile is
// [row group][step][row in group][kStep] and x is [token block][step][token in block][kStep] (tile_x), so the
// kernel walks two pointers with constant offsets: the strided rows of tile_kernel needed one address register
// per row and token, which the compiler spilled inside the loop, and its accumulators went through the stack.
template <class S>
constexpr int64_t kStepsPerChunk = [] {
  if constexpr (kSplitChunks<S>) return int64_t(S::kParts);
  else return int64_t(1);
}();
template <class S>
constexpr int64_t kStep = S::kChunk / kStepsPerChunk<S>;

// Chunks per K block of tile mode for dtype D: kTileBlockElems per chain, so that each chain's kernel call
// covers as many steps as a single chain's.
template <class S, DType D>
constexpr int64_t kTileBlockChunks = std::max<int64_t>(1, kTileBlockElems * kChains<S, D> / S::kChunk);

// Where chunk l of a K block of nch chunks is stored, in steps, in the decoded tile and the tiled x: in order,
// or with several chains chain by chain (for two: chunks 0, 2, 4, ..., then 1, 3, ...), so that each chain's
// kernel call walks contiguous steps (every other step of the block, in place, ran ~20% slower).
template <class S, DType D>
constexpr int64_t block_position(int64_t l, int64_t nch) {
  constexpr int kC = kChains<S, D>;
  if constexpr (kC == 1) return l;
  else return chain_first(nch, int(l % kC), kC) + l / kC;
}

// Tokens [b0 * kTileT, b1 * kTileT) of the plain packed x, interleaved by token blocks into out (laid out from
// token 0 of x: block b starts at b * kTileT * k_padded elements), in the K blocks and chain order of weights
// of dtype D.
template <class S, DType D>
void tile_x_for(const PackedX& x, int64_t b0, int64_t b1, void* out) {
  using Elem = typename S::Elem;
  const Elem* src = static_cast<const Elem*>(x.data);
  const int64_t n_steps = x.k_padded / kStep<S>;
  constexpr int64_t kBlockSteps = kTileBlockChunks<S, D> * kStepsPerChunk<S>;
  static_assert(kChains<S, D> == 1 || kStepsPerChunk<S> == 1, "chains take whole-chunk steps");
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = b * S::kTileT, nt = std::min<int64_t>(S::kTileT, x.n_tokens - t0);
    Elem* dst = static_cast<Elem*>(out) + t0 * x.k_padded;
    for (int64_t i = 0; i < n_steps; ++i) {
      const int64_t block0 = i / kBlockSteps * kBlockSteps, n_block = std::min(kBlockSteps, n_steps - block0);
      const int64_t to = block0 + block_position<S, D>(i - block0, n_block);
      for (int64_t t = 0; t < nt; ++t)
        std::memcpy(dst + (to * nt + t) * kStep<S>, src + (t0 + t) * x.stride + i * kStep<S>, kStep<S> * sizeof(Elem));
    }
  }
}
template <class S>
void tile_x(const PackedX& x, int64_t b0, int64_t b1, void* out) {
  switch (x.weight_dtype) {
    case DType::kF8E4M3: return tile_x_for<S, DType::kF8E4M3>(x, b0, b1, out);
    case DType::kI8: return tile_x_for<S, DType::kI8>(x, b0, b1, out);
    default: return tile_x_for<S, DType::kBF16>(x, b0, b1, out);
  }
}

// Keeps v in a register (an empty asm that takes and gives it there): for fewer than kTileT tokens GCC 12 folded
// the weight loads into the FMAs, one load per FMA (R * T + T loads per step where R + T suffice); a 4 x 3
// tile then took as long as a 4 x 6 one.
template <class V>
inline void pin_register(V& v) {
  __asm__("" : "+v"(v));
}

// R packed tile rows times T packed tokens over n_steps steps; accumulators as in tile_kernel (same products in
// the same order: chunk by chunk, part 0 first), continued from / saved to state unless kFirst / kLast.
template <class S, int R, int T, bool kFirst, bool kLast>
void packed_tile_kernel(const typename S::Elem* w, const typename S::Elem* x, int64_t n_steps, float* state, float* c,
                        int64_t cs) {
  using F = typename S::F;
  constexpr int64_t kS = kStep<S>;
  F acc[T][R];
  start_accumulators<S, R, T, kFirst>(acc, state);
  // Promised, not checked (tile_loop checks that a K block has chunks): with a possible zero-trip loop GCC 12
  // kept acc in a stack array as well, and stored and reloaded all 24 accumulators around the loop at every
  // call (one call per 32 steps: ~70 extra vector moves per 768 FMAs).
  if (n_steps <= 0) __builtin_unreachable();
  for (int64_t i = 0; i < n_steps; ++i, w += R * kS, x += T * kS) {
    if constexpr (kSplitChunks<S>) {
      F wv[R];
      for (int r = 0; r < R; ++r) {
        wv[r] = S::fload(w + r * kS);
        pin_register(wv[r]);
      }
      for (int t = 0; t < T; ++t) {
        const F xv = S::fload(x + t * kS);
        for (int r = 0; r < R; ++r) acc[t][r] = S::ffma(wv[r], xv, acc[t][r]);
      }
    } else {
      typename S::W wv[R];
      for (int r = 0; r < R; ++r) wv[r] = S::load_w(w + r * kS);
      for (int t = 0; t < T; ++t) {
        const typename S::W xv = S::load_w(x + t * kS);
        for (int r = 0; r < R; ++r) acc[t][r] = S::dot(acc[t][r], wv[r], xv);
      }
    }
  }
  finish_accumulators<S, R, T, kLast>(acc, state, c, cs);
}

template <class S, int R, int T>
void packed_tile_tokens(const typename S::Elem* w, const typename S::Elem* x, int64_t n_tokens, int64_t n_steps,
                        float* state, bool first, bool last, float* c, int64_t cs) {
  if constexpr (T > 0) {
    if (n_tokens == T) {
      if (first && last) return packed_tile_kernel<S, R, T, true, true>(w, x, n_steps, state, c, cs);
      if (first) return packed_tile_kernel<S, R, T, true, false>(w, x, n_steps, state, c, cs);
      if (last) return packed_tile_kernel<S, R, T, false, true>(w, x, n_steps, state, c, cs);
      return packed_tile_kernel<S, R, T, false, false>(w, x, n_steps, state, c, cs);
    }
    return packed_tile_tokens<S, R, T - 1>(w, x, n_tokens, n_steps, state, first, last, c, cs);
  }
}

// Rows [r0, r0 + R) and their tails; a short last group repeats the last row (its outputs are not stored).
template <int R>
inline void row_group(const RowSrc* rows, const uint8_t* const* tails, int64_t n_rows, int64_t r0, RowSrc* grp,
                      const uint8_t** grp_tails) {
  for (int r = 0; r < R; ++r) {
    const int64_t i = std::min<int64_t>(r0 + r, n_rows - 1);
    grp[r] = rows[i];
    grp_tails[r] = tails[i];
  }
}

// Direct mode over all n_rows rows, R = direct_rows<S, T>() at a time (a short last group repeats its last
// row); T is the call's token count, found by recursion.
template <class S, DType D, bool kWide, bool kScaledX, int T>
void direct_tokens(const RowSrc* rows, const uint8_t* const* tails, int64_t n_rows, const typename S::Elem* x,
                   int64_t xs, int64_t n_tokens, int64_t n_full, bool has_tail, float* c, int64_t cs) {
  if constexpr (T > 0) {
    if (n_tokens != T) {
      return direct_tokens<S, D, kWide, kScaledX, T - 1>(rows, tails, n_rows, x, xs, n_tokens, n_full, has_tail, c, cs);
    }
    using F = typename S::F;
    constexpr int R = direct_rows<S, D, T>();
    // One row at a time: four rows' horizontal sums share one reduce<4>, which sums each vector as reduce<1>
    // would (a row of 1 KB otherwise spent ~10% of its time reducing four copies of one vector).
    constexpr int kReduceRows = R == 1 ? 4 : R;
    float part[T * kReduceRows];
    for (int64_t r0 = 0; r0 < n_rows; r0 += kReduceRows) {
      const int64_t nr = std::min<int64_t>(kReduceRows, n_rows - r0);
      F sums[T][kReduceRows];
      if constexpr (R == 1) {
        for (int j = 0; j < kReduceRows; ++j) {
          F row_sums[T][1];
          if (j < nr) {
            direct_kernel<S, D, kWide, kScaledX, 1, T>(rows + r0 + j, tails + r0 + j, x, xs, n_full, has_tail, row_sums);
          } else {
            for (int t = 0; t < T; ++t) row_sums[t][0] = S::zero();
          }
          for (int t = 0; t < T; ++t) sums[t][j] = row_sums[t][0];
        }
      } else {
        RowSrc grp[R];
        const uint8_t* grp_tails[R];
        row_group<R>(rows, tails, n_rows, r0, grp, grp_tails);
        direct_kernel<S, D, kWide, kScaledX, R, T>(grp, grp_tails, x, xs, n_full, has_tail, sums);
      }
      for (int t = 0; t < T; ++t) S::template reduce<kReduceRows>(sums[t], part + t * kReduceRows);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < nr; ++r) c[t * cs + r0 + r] = part[t * kReduceRows + r];
    }
  }
}

// Per chunk multipliers of n_blocks row blocks (scale bytes n_kb apart) into m[block * n_chunks + chunk].
template <class S>
void fill_fp8_multipliers(const uint8_t* scale, int64_t n_kb, int64_t B, int64_t n_blocks, int64_t n_chunks, bool wide,
                          float* m) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t ch = 0; ch < n_chunks; ++ch) {
      const uint8_t byte = scale[b * n_kb + ch * S::kChunk / B];
      // one-step: 2^(s-7) on the raw bits; two-step: 2^(s-127) after the 2^120 rebias.
      m[b * n_chunks + ch] = wide ? kE8m0Values[byte] : deepinfer::bits_to_float(uint32_t(byte + 120) << 23);
    }
  }
}

// The rows' sources for a tile; fp8 multipliers for the row blocks the tile touches.
// Returns whether the fp8 tile needs the wide (two-step) decode.
template <class S>
bool row_sources(const LinearWeight& w, int64_t row0, int64_t n_rows, int64_t n_chunks, Scratch<S>& s,
                 RowSrc* rows) {
  const int64_t K = w.n_in;
  for (int64_t i = 0; i < n_rows; ++i) rows[i].data = w.data + (row0 + i) * w.row_bytes();
  bool wide = false;
  if (w.dtype == DType::kF8E4M3) {
    const int64_t B = w.block, n_kb = (K + B - 1) / B;
    const int64_t first_block = row0 / B, last_block = (row0 + n_rows - 1) / B;
    // The multipliers depend only on these scale bytes, B and n_chunks: consecutive tiles of a row block (8 of
    // them for B = 128) reuse the previous tile's instead of recomputing them (~2% of a decode step).
    const uint8_t* first_scale = w.scale + first_block * n_kb;
    const int64_t key_bytes = (last_block - first_block + 1) * n_kb;
    if (s.mult_block == B && s.mult_chunks == n_chunks && int64_t(s.mult_scales.size()) == key_bytes &&
        std::equal(s.mult_scales.begin(), s.mult_scales.end(), first_scale)) {
      wide = s.mult_wide;
    } else {
      s.mult_scales.assign(first_scale, first_scale + key_bytes);
      s.mult_block = B;
      s.mult_chunks = n_chunks;
      s.mult.resize(size_t((last_block - first_block + 1) * n_chunks));
      for (int64_t i = 0; i < key_bytes; ++i) wide |= first_scale[i] > kMaxFp8Scale;
      s.mult_wide = wide;
      fill_fp8_multipliers<S>(first_scale, n_kb, B, last_block - first_block + 1, n_chunks, wide, s.mult.data());
    }
    for (int64_t i = 0; i < n_rows; ++i) rows[i].mult = &s.mult[size_t(((row0 + i) / B - first_block) * n_chunks)];
  } else if (w.dtype == DType::kI8) {
    for (int64_t i = 0; i < n_rows; ++i) rows[i].scale = w.scale + (row0 + i) * (K / 32);
  }
  return wide;
}

// Copies each row's partial last chunk into zero-padded buffers.
template <class S, DType D>
void fill_tails(const RowSrc* rows, int64_t n_rows, int64_t K, int64_t n_full, Scratch<S>& s, const uint8_t** tails) {
  constexpr int64_t kBytes = chunk_bytes<D>(S::kChunk);
  const int64_t tail_elems = K - n_full * S::kChunk;
  const int64_t tail_len = D == DType::kBF16 ? 2 * tail_elems : tail_elems;
  s.tail.assign(size_t(n_rows * kBytes), 0);
  for (int64_t i = 0; i < n_rows; ++i) {
    std::memcpy(&s.tail[size_t(i * kBytes)], rows[i].data + n_full * kBytes, size_t(tail_len));
    tails[i] = &s.tail[size_t(i * kBytes)];
  }
}

// Tile mode works on a unit of up to kTileModeRows rows, one panel of kPanelBlocks token blocks at a time:
// for each K block (kTileBlockElems columns per chain) it decodes the unit's rows into a per-thread buffer
// (128-256 KB, L2), and every (token block, row group) of the panel then runs over it, the accumulators persisting
// in state from one K block to the next. The unit's raw weights stay in L2 from one panel to the next, which
// decodes them again (a few % of the FMAs). Without panels every K block of a unit read all of x, for a prefill
// megabytes from L3, at 8 bytes per 16 FMAs with 16-row units: that stream, not the FMAs, set the pace.

// Token blocks per panel: kPanelBlocks. Each K block of a panel works on the unit's decoded rows (256 KB of fp32
// for 64 rows), and per token block on its x (24 KB of fp32) and the state of its row groups (24 KB), all in L2:
// 1 MB for the fp32 families at 16 blocks, whatever K is. Sizing the panel by its whole x instead (at most 768 KB:
// 8 blocks at K = 4096, 3 at K = 8192) decoded the weights two to five times as often: one core of the 2-core
// Ice Lake Xeon, kernel_bench FP8 4096 x 8192 with 256 tokens (V4-Flash's wo_b in a prefill), alternating,
// 92 GFLOP/s at 4 blocks, 111 at 16; 4096 x 4096 with 512 tokens the same at 8 and 16.
template <class S, DType D>
constexpr int64_t kTileGroupElems = kTileBlockChunks<S, D> * S::kChunk * S::kTileR;  // one row group of a K block

// Where tile row i's chunks go in the packed block (see kStepsPerChunk): chunk chl of the K block at
// packed_row(block, i) + chl * kPackedChunkStride, its parts kTileR * kStep apart.
template <class S>
constexpr int64_t kPackedChunkStride = kStepsPerChunk<S> * S::kTileR * kStep<S>;
template <class S, DType D>
inline typename S::Elem* packed_row(typename S::Elem* block, int64_t i) {
  return block + (i / S::kTileR) * kTileGroupElems<S, D> + (i % S::kTileR) * kStep<S>;
}
template <class S>
inline void store_packed(typename S::Elem* dst, const typename S::W& w) {
  if constexpr (kSplitChunks<S>) {
    for (int part = 0; part < S::kParts; ++part) S::store_part(dst + part * S::kTileR * kStep<S>, w, part);
  } else {
    S::store_w(dst, w);
  }
}

// Tile mode: decodes chunks [ch0, ch0 + nch) of every tile row into the packed block. The next K block of
// each row streams into L1 meanwhile, and the bytes [ahead, ahead + ahead_bytes) into L2: tile_loop passes
// the next unit's bytes of a contiguous matrix (usually this thread's next unit), a K block's share at a
// time, in address order. Prefill reads the experts' weights once, from DRAM; with the next unit fetched
// row by row instead (64 strided bursts per K block), decoding them still waited on memory for ~18% of a
// 512-token prefill.
template <class S, DType D, bool kWide>
void decode_block(const RowSrc* rows, const uint8_t* const* tails, int64_t n_rows, int64_t n_full, const uint8_t* ahead,
                  int64_t ahead_bytes, int64_t ch0, int64_t nch, typename S::Elem* block) {
  constexpr int64_t kBytes = chunk_bytes<D>(S::kChunk);
  const int64_t n_stored = std::max<int64_t>(0, std::min(nch, n_full - ch0));  // chunks read in place
  const int64_t n_next = std::max<int64_t>(0, std::min(nch, n_full - ch0 - nch));
  // The prefetches ride along with the rows' decodes, one line of each stream per line of codes decoded:
  // - the next row's chunks of this block into L1 (a K block that is the whole row has no next block, and its
  //   decode waited on L2 at every line: perf, 1/3 of decode_block's samples on the load after the code load,
  //   FP4 expert with 30 tokens);
  // - this row's next K block into L1, and the row's share of the next unit ([ahead, ahead + ahead_bytes)) into
  //   L2. Issued in bursts per row they filled the miss queue: the L2 burst took ~17% of decode_block in a
  //   512-token prefill, and still 14% with the next row's lines coming in.
  constexpr int64_t kChunksPerLine = kBytes >= 64 ? 1 : 64 / kBytes;
  const int64_t ahead_lines = (ahead_bytes + 63) / 64, next_lines = (n_next * kBytes + 63) / 64;
  const int64_t ahead_per_row = (ahead_lines + n_rows - 1) / n_rows;
  for (int64_t i = 0; i < n_rows; ++i) {
    const RowSrc r = rows[i];  // a local copy: the stores below must not make the compiler reload it
    const uint8_t* next = r.data + (ch0 + nch) * kBytes;
    const uint8_t* next_row = i + 1 < n_rows ? rows[i + 1].data + ch0 * kBytes : nullptr;
    const uint8_t* row_ahead = ahead + 64 * std::min(ahead_lines, i * ahead_per_row);
    const int64_t n_ahead = std::clamp<int64_t>(ahead_lines - i * ahead_per_row, 0, ahead_per_row);
    typename S::Elem* dst = packed_row<S, D>(block, i);
    for (int64_t c = 0; c < n_stored; ++c) {
      if (c % kChunksPerLine == 0) {
        const int64_t line = c / kChunksPerLine;
        if (next_row) __builtin_prefetch(next_row + 64 * line);
        if (line < next_lines) __builtin_prefetch(next + 64 * line);
        if (line < n_ahead) __builtin_prefetch(row_ahead + 64 * line, 0, 2);
      }
      store_packed<S>(dst + block_position<S, D>(c, nch) * kPackedChunkStride<S>,
                      decode_chunk<S, D, kWide>(r, ch0 + c, r.data + (ch0 + c) * kBytes));
    }
    for (int64_t c = n_stored; c < nch; ++c) {
      store_packed<S>(dst + block_position<S, D>(c, nch) * kPackedChunkStride<S>, decode_chunk<S, D, kWide>(r, ch0 + c, tails[i]));
    }
    // What this row's code lines did not cover: more lines ahead than codes, or a row without codes in place.
    const int64_t covered = (n_stored + kChunksPerLine - 1) / kChunksPerLine;
    for (int64_t line = covered; line < next_lines; ++line) __builtin_prefetch(next + 64 * line);
    for (int64_t line = covered; line < n_ahead; ++line) __builtin_prefetch(row_ahead + 64 * line, 0, 2);
  }
}

// The tile-mode products of n_rows weight rows with every token of the tiled x (tile_x), panel by panel:
// decode_block(kb, n_kb, first_panel, i0, i1, dst) stores chunks [kb * kTileBlockChunks, ...) of rows [i0, i1)
// into dst, laid out as packed_row(dst, i - i0) (decode_block).
//
// A short panel (at most kGroupFirstBlocks token blocks: an expert's share of a prefill is ~12 tokens) runs
// group by group instead: each 4-row group of a K block is decoded into an 8-16 KB buffer and used at once by
// every token block of the panel, all of it in L1. Decoding the whole unit first wrote a 128 KB tile (more
// than L1) per K block for two token blocks to read, and those stores, missing L1, stalled the decode: perf
// put 25% of a 512-token prefill in decode_block, mostly waiting. Each (row, token) sum is the same either way.
template <class S, DType D, class DecodeBlock>
void tile_loop(int64_t n_rows, const typename S::Elem* xt, int64_t kp, int64_t T, int64_t n_chunks, float* c,
               int64_t cs, Scratch<S>& s, DecodeBlock&& decode_block) {
  using Elem = typename S::Elem;
  constexpr int64_t kBlockChunks = kTileBlockChunks<S, D>;
  constexpr int64_t kGroupElems = kTileGroupElems<S, D>;
  constexpr int64_t kGroupFirstBlocks = 2;
  DI_CHECK_MSG(n_chunks > 0, "linear: tile mode needs at least one chunk of K");
  const int64_t n_kb = (n_chunks + kBlockChunks - 1) / kBlockChunks;
  const int64_t n_groups = (n_rows + S::kTileR - 1) / S::kTileR, n_tblocks = (T + S::kTileT - 1) / S::kTileT;
  constexpr int64_t kStatePerBlock = S::kTileT * S::kTileR * S::kLanes;
  // With several chains (kChains) each chain's accumulators live in state from block to block, the kernel runs
  // once per chain over that chain's chunks of the block (stored together, block_position), and the chains are
  // summed after the last block.
  constexpr int kC = kChains<S, D>;
  static_assert(kC == 1 || (!kSplitChunks<S> && kBlockChunks % kC == 0),
                "chains: whole-chunk steps, and every K block starts on chain 0");
  const bool keep_state = n_kb > 1 || kC > 1;
  if (keep_state) s.state.resize(size_t(std::min(n_tblocks, kPanelBlocks) * n_groups * kStatePerBlock * kC));
  s.tile.resize(size_t(kTileModeRows / S::kTileR * kGroupElems));
  Elem* block = s.tile.data();
  float part[S::kTileT * S::kTileR];
  // Token block tb's x for K block kb in the tiled x: where it starts and its elements.
  auto x_block = [&](int64_t tb, int64_t kb) {
    const int64_t t0 = tb * S::kTileT, nt = std::min<int64_t>(S::kTileT, T - t0);
    const int64_t ch0 = kb * kBlockChunks, nch = std::min(kBlockChunks, n_chunks - ch0);
    return std::pair{xt + t0 * kp + ch0 * S::kChunk * nt, nch * S::kChunk * nt};
  };
  // Token block tb (of the panel starting at p0) times row group g of K block kb, decoded at group_block.
  auto run_group = [&](int64_t p0, int64_t tb, int64_t kb, int64_t g, const Elem* group_block) {
    const int64_t ch0 = kb * kBlockChunks, nch = std::min(kBlockChunks, n_chunks - ch0), r0 = g * S::kTileR;
    const int64_t t0 = tb * S::kTileT, nt = std::min<int64_t>(S::kTileT, T - t0);
    const Elem* xb = x_block(tb, kb).first;
    float* state = keep_state ? &s.state[size_t(((tb - p0) * n_groups + g) * kStatePerBlock * kC)] : nullptr;
    if constexpr (kC == 1) {
      packed_tile_tokens<S, S::kTileR, S::kTileT>(group_block, xb, nt, nch * kStepsPerChunk<S>, state, kb == 0,
                                                  kb == n_kb - 1, part, S::kTileR);
      if (kb < n_kb - 1) return;
    } else {
      // Chain k: the block's chunks k, k + kC, ..., stored together.
      for_each_chain<kC>(nch, kb == 0, state, kStatePerBlock, [&](int, int64_t first_step, int64_t n_k,
                                                                  float* chain_state) {
        packed_tile_tokens<S, S::kTileR, S::kTileT>(group_block + first_step * S::kTileR * kStep<S>,
                                                    xb + first_step * nt * kStep<S>, nt, n_k, chain_state, kb == 0,
                                                    false, part, S::kTileR);
      });
      if (kb < n_kb - 1) return;
      for (int64_t t = 0; t < nt; ++t) {
        typename S::F acc[kC][S::kTileR];
        for (int k = 0; k < kC; ++k)
          for (int r = 0; r < S::kTileR; ++r) acc[k][r] = S::fload(state + (k * kStatePerBlock) + (t * S::kTileR + r) * S::kLanes);
        typename S::F sum[S::kTileR];
        sum_chains<S, S::kTileR>(acc, kC, sum);
        S::template reduce<S::kTileR>(sum, part + t * S::kTileR);
      }
    }
    const int64_t nr = std::min<int64_t>(S::kTileR, n_rows - r0);
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t r = 0; r < nr; ++r) c[(t0 + t) * cs + r0 + r] = part[t * S::kTileR + r];
  };
  if (n_tblocks <= kGroupFirstBlocks) {
    // One buffer serves every group; a short last group's pad rows are zeroed first.
    Elem* group_block = block;
    for (int64_t kb = 0; kb < n_kb; ++kb) {
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t i0 = g * S::kTileR, i1 = std::min(n_rows, i0 + S::kTileR);
        if (i1 - i0 < S::kTileR) std::fill(group_block, group_block + kGroupElems, Elem(0));
        decode_block(kb, n_kb, true, i0, i1, group_block);
        for (int64_t tb = 0; tb < n_tblocks; ++tb) run_group(0, tb, kb, g, group_block);
      }
    }
    return;
  }
  if (n_rows % S::kTileR) {  // the pad rows of the last group: zero (decode_block never writes them)
    std::fill(block + (n_groups - 1) * kGroupElems, block + n_groups * kGroupElems, Elem(0));
  }
  for (int64_t p0 = 0; p0 < n_tblocks; p0 += kPanelBlocks) {
    const int64_t p1 = std::min(n_tblocks, p0 + kPanelBlocks);
    for (int64_t kb = 0; kb < n_kb; ++kb) {
      decode_block(kb, n_kb, p0 == 0, 0, n_rows, block);
      // Token block outermost: its x (12-24 KB) stays in L1 while the decoded groups stream from L2.
      for (int64_t tb = p0; tb < p1; ++tb) {
        // The next token block's x comes from L3 (a prefill's x is megabytes): fetched into L2 a slice per
        // row group meanwhile, else the first group of every token block waited on it. One core of the 2-core
        // Ice Lake Xeon, kernel_bench FP8 4096 x 4096 with 512 tokens, alternating builds: 104.6-108.7 ->
        // 110.8-111.9 GFLOP/s.
        std::pair<const Elem*, int64_t> next_x{nullptr, 0};  // after the panel's last: the next K block's first
        if (tb + 1 < p1) next_x = x_block(tb + 1, kb);
        else if (kb + 1 < n_kb) next_x = x_block(p0, kb + 1);
        const char* next = reinterpret_cast<const char*>(next_x.first);
        const int64_t lines = (next_x.second * int64_t(sizeof(Elem)) + 63) / 64;
        const int64_t per_group = (lines + n_groups - 1) / n_groups;
        for (int64_t g = 0; g < n_groups; ++g) {
          for (int64_t l = g * per_group; l < std::min(lines, (g + 1) * per_group); ++l)
            __builtin_prefetch(next + 64 * l, 0, 2);
          run_group(p0, tb, kb, g, block + g * kGroupElems);
        }
      }
    }
  }
}

// Families with S::decode_fp8_raw: in direct mode an fp8 tile within one row block multiplies x by each
// chunk's scale once (x'), instead of every decoded weight vector of every row: that multiply was one of the
// few vector-port operations per 16 codes. decode_fp8_raw gives the code's value times kFp8RawUnit (the fp32
// families: their raw float bits, value * 2^-120; the bf16 quant family: the value), so x' = x * 2^(s - 127) /
// kFp8RawUnit. w_raw * x' is the same real number as the tile mode's (w_raw * 2^(s-127) / kFp8RawUnit) * x
// whenever x' is exact (no x' overflows, no nonzero x' falls below 2^-126) and so is the tile mode's decoded
// weight (no scale byte below 10, where e4m3 values * 2^(s-127) can fall below 2^-126 and round or flush):
// checked here, otherwise nullptr and the per-weight multiply. The sums are then bit for bit those of the other
// modes.
template <class S>
constexpr bool kScalesX = requires(const uint8_t* p) { S::decode_fp8_raw(p); };
template <class S>
constexpr float kFp8RawUnit = [] {
  if constexpr (requires { S::kFp8RawUnit; }) return S::kFp8RawUnit;
  else return 0x1p-120f;
}();

// The value of a packed x element (fp32, or bf16 bits).
template <class Elem>
inline float x_value(Elem e) {
  if constexpr (std::is_same_v<Elem, float>) return e;
  else return deepinfer::bits_to_float(uint32_t(e) << 16);
}

template <class S>
const typename S::Elem* scaled_x(const LinearWeight& w, const RowSrc* rows, int64_t n_rows, const PackedX& x,
                                 Scratch<S>& s) {
  using Elem = typename S::Elem;
  const int64_t B = w.block, rb = (rows[0].data - w.data) / w.n_in / B;
  if ((rows[n_rows - 1].data - w.data) / w.n_in / B != rb) return nullptr;
  if (s.x_scaled_call == x.call_id && s.x_scaled_block == rb) return s.x_scaled_ok ? s.x_scaled.data() : nullptr;
  const int64_t T = x.n_tokens, xs = x.stride, n_chunks = x.k_padded / S::kChunk;
  const Elem* xd = static_cast<const Elem*>(x.data);
  if (s.x_range_call != x.call_id) {  // the call's largest and smallest nonzero |x|
    float hi = 0.0f, lo = std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < x.k_padded; ++i) {
        const float a = std::fabs(x_value(xd[t * xs + i]));
        hi = std::max(hi, a);
        lo = a > 0.0f ? std::min(lo, a) : lo;
      }
    }
    s.x_range_call = x.call_id;
    s.x_hi = hi;
    s.x_lo = lo;
  }
  const float* m = rows[0].mult;  // 2^(s - 7)
  float m_hi = 0.0f, m_lo = std::numeric_limits<float>::infinity();
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    m_hi = std::max(m_hi, m[ch]);
    m_lo = std::min(m_lo, m[ch]);
  }
  constexpr float kToX = 0x1p-120f / kFp8RawUnit<S>;  // x' = x * m * kToX
  s.x_scaled_call = x.call_id;
  s.x_scaled_block = rb;
  // An infinite x fails the test (plain path); a NaN in x is skipped by max / min and harmless: w * NaN is NaN
  // in both orders.
  s.x_scaled_ok = m_lo >= 0x1p3f && s.x_hi * (m_hi * kToX) <= 0x1p126f &&
                  (s.x_lo == std::numeric_limits<float>::infinity() || s.x_lo * (m_lo * kToX) >= 0x1p-126f);
  if (!s.x_scaled_ok) return nullptr;
  s.x_scaled.resize(size_t(T * xs));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t ch = 0; ch < n_chunks; ++ch) {
      const Elem* src = xd + t * xs + ch * S::kChunk;
      Elem* dst = s.x_scaled.data() + t * xs + ch * S::kChunk;
      if constexpr (std::is_same_v<Elem, float>) {
        const typename S::F mv = S::fset1(m[ch] * kToX);
        for (int64_t i = 0; i < S::kChunk; i += S::kLanes) S::fstore(dst + i, S::fmul(S::fload(src + i), mv));
      } else {
        S::scale_x_chunk(src, m[ch] * kToX, dst);
      }
    }
  }
  return s.x_scaled.data();
}

// Fused tile mode (families with S::kFusedRows): a call of a few token blocks (an expert's share of a prefill,
// ~12 tokens) decodes each chunk in registers and multiplies it at once with two token blocks of the tiled x,
// kFusedRows rows at a time, instead of storing a decoded K block for the packed kernel to load again: the
// decode's shuffles can then overlap the vdpbf16ps stream, where the stored decode ran alone. On Zen 4
// (kernel_bench, 2 threads, alternating builds) an FP4 expert with 8 tokens went 132-166 -> 226-261 GFLOP/s,
// with 12 tokens 210-248 -> 248-291, with 24 about +10%; six alternating 512-token prefills 72.3 -> 77.7
// tokens/s (mean). Sums as in tile_loop: K blocks of kTileBlockChunks chunks, one call per chain over that
// chain's chunks, the accumulators kept in state from one K block to the next and the chains summed at the end.
// The prefetches (the next group's rows into L1, the next unit into L2) matter: without them 12 tokens on one
// core ran 98-102 GFLOP/s instead of 129-156. The fp32 AVX-512 family runs FP4 this way too (simd_avx512.cpp),
// its x chunks in two parts (load_x_chunk).
template <class S>
constexpr int kFusedRows = [] {
  if constexpr (requires { S::kFusedRows; }) return int(S::kFusedRows);
  else return 0;
}();
// Which weight dtypes a family runs fused (S::fused_for(DType); all when absent).
template <class S>
constexpr bool fused_for(DType d) {
  if constexpr (requires { S::fused_for(d); }) return S::fused_for(d);
  else return true;
}
// Whether FP4 takes passes of two token blocks with kFusedRows rows (S::kFusedPairPasses), as FP8 does, rather
// than one block with 2 * kFusedRows rows (see fused_panels).
template <class S>
constexpr bool kFusedPairPasses = [] {
  if constexpr (requires { S::kFusedPairPasses; }) return bool(S::kFusedPairPasses);
  else return false;
}();
// Calls of at most this many token blocks run fused, two blocks at a time (decoding the weights again for each
// pair). FP8 only for one pair: its decode (to fp32, scaled, converted) costs more than storing it once.
constexpr int64_t fused_max_blocks(DType d) { return d == DType::kF8E4M3 ? 2 : 4; }

// Keeps a loaded chunk in registers (S::pin_w, where a family has it): GCC 12 otherwise folded the x loads
// of the fp32 family's fused kernel into its FMAs, loading each x vector once per row (48 loads per 48 FMAs).
template <class S>
inline void pin_w(typename S::W& w) {
  if constexpr (requires { S::pin_w(w); }) S::pin_w(w);
}

// Chunk j (of a chain's steps) of token t in a token block of Tn tokens of the tiled x (tile_x): whole-chunk
// steps hold a token's chunk in one place, split families (kSplitChunks) its parts Tn * kStep apart.
template <class S, int Tn>
inline typename S::W load_x_chunk(const typename S::Elem* xb, int64_t j, int t) {
  if constexpr (kSplitChunks<S>) {
    const typename S::Elem* p = xb + j * Tn * S::kChunk + t * kStep<S>;
    return S::load_parts(p, Tn * kStep<S>);
  } else {
    return S::load_w(xb + (j * Tn + t) * S::kChunk);
  }
}

// The fused kernel's prefetches, which ride along with its steps: the pass issued them as one burst per row
// group, and the bursts (128 lines per FP4 K block) stalled on the full miss queue (perf: most of the pass's
// own samples).
struct Prefetch {
  int64_t next_group = 0;            // bytes from a row to the same row of the next group (0: none); each step
                                     // fetches its chunks' lines there into L1, once per line
  const uint8_t* ahead = nullptr;    // lines [ahead, ahead + 64 * ahead_lines) go to L2, a few per step
  int64_t ahead_lines = 0;
};

// R rows times T0 tokens of x0 and T1 tokens of x1 (two token blocks of the tiled x, each [step][token][chunk]),
// over n_steps (> 0) chunks of one chain: chunk chunk0 + j * kChains at step j. The accumulators start at zero
// (kFirst) or from state and end in state ([token][row][lanes]).
template <class S, DType D, bool kWide, int R, int T0, int T1, bool kFirst>
void fused_kernel(const RowSrc* rows, const uint8_t* const* tails, int64_t n_full, int64_t chunk0, int64_t n_steps,
                  const typename S::Elem* x0, const typename S::Elem* x1, const Prefetch& pf, float* state) {
  using F = typename S::F;
  using W = typename S::W;
  constexpr int T = T0 + T1;
  constexpr int64_t kBytes = chunk_bytes<D>(S::kChunk);
  F acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = kFirst ? S::zero() : S::fload(state + (t * R + r) * S::kLanes);
  auto step = [&](int64_t j, const W* w) {
    for (int t = 0; t < T0; ++t) {
      W xv = load_x_chunk<S, T0>(x0, j, t);
      pin_w<S>(xv);
      for (int r = 0; r < R; ++r) acc[t][r] = S::dot(acc[t][r], w[r], xv);
    }
    for (int t = 0; t < T1; ++t) {
      W xv = load_x_chunk<S, T1>(x1, j, t);
      pin_w<S>(xv);
      for (int r = 0; r < R; ++r) acc[T0 + t][r] = S::dot(acc[T0 + t][r], w[r], xv);
    }
  };
  // One loop for every step (a second loop for the partial last chunk, which comes from tails, made GCC move
  // all the accumulators through the stack between the two, as did a possibly empty loop and a run-time first).
  if (n_steps <= 0) __builtin_unreachable();
  constexpr int kC = kChains<S, D>;
  // Each row's chunk of this step: in place, advanced by a step's bytes, until the step that reaches the
  // partial last chunk (chunk n_full, if the matrix has one), which reads the row's zero-padded copy in tails.
  // Per row and step that is one add, where indexing the rows' data from the chunk number cost a load, a
  // compare and a branch: scalar work that takes the vector ports' slots (Ice Lake issues integer operations
  // on ports 0 and 5 too). With the aligned state (Scratch), one core of the 2-core Ice Lake Xeon, kernel_bench
  // FP4 2048 x 4096, medians of 12 alternating runs: 5 / 9 / 12 / 16 tokens 77 / 96 / 90 / 73 -> 88 / 108 /
  // 101 / 96 GFLOP/s.
  const uint8_t* src[R];
  RowSrc row[R];  // the rows' scales from this step's chunk on (decode_chunk's chunk 0), advanced as src
  for (int r = 0; r < R; ++r) {
    src[r] = rows[r].data + chunk0 * kBytes;
    row[r] = advanced<S, D>(rows[r], chunk0);
  }
  const int64_t tail_step = n_full <= chunk0 ? 0 : (n_full - chunk0 + kC - 1) / kC;
  // The next group's lines go to L1 at pf_offset from each chunk read when this chain's chunks start a new
  // line at every step (the chains before it read the others' lines): chunk0's bytes start a line, or a step
  // spans less than one. Otherwise pf_offset is 0, a prefetch of the line being read (harmless, and branch-free).
  const bool prefetch = pf.next_group != 0 && ((chunk0 * kBytes) % 64 < kBytes || kC * kBytes < 64);
  int64_t pf_offset = prefetch ? pf.next_group : 0;
  const int64_t ahead_per_step = (pf.ahead_lines + n_steps - 1) / n_steps;
  const uint8_t* ahead = pf.ahead;
  const uint8_t* const ahead_end = pf.ahead + 64 * pf.ahead_lines;
  for (int64_t j = 0; j < n_steps; ++j) {
    for (int64_t i = 0; i < ahead_per_step && ahead < ahead_end; ++i, ahead += 64) __builtin_prefetch(ahead, 0, 2);
    if (j == tail_step) [[unlikely]] {
      for (int r = 0; r < R; ++r) src[r] = tails[r];
      pf_offset = 0;
    }
    W w[R];
    for (int r = 0; r < R; ++r) {
      __builtin_prefetch(src[r] + pf_offset);
      w[r] = decode_chunk<S, D, kWide>(row[r], 0, src[r]);
      src[r] += kC * kBytes;
      row[r] = advanced<S, D>(row[r], kC);
    }
    step(j, w);
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) S::fstore(state + (t * R + r) * S::kLanes, acc[t][r]);
}

// fused_kernel for nt tokens (1 to 2 * kTileT): the first kTileT in x0, the rest in x1. T is found by recursion.
template <class S, DType D, bool kWide, int R, int T>
void fused_tokens(int64_t nt, const RowSrc* rows, const uint8_t* const* tails, int64_t n_full, int64_t chunk0,
                  int64_t n_steps, const typename S::Elem* x0, const typename S::Elem* x1, const Prefetch& pf, bool first,
                  float* state) {
  if constexpr (T > 0) {
    if (nt != T) {
      return fused_tokens<S, D, kWide, R, T - 1>(nt, rows, tails, n_full, chunk0, n_steps, x0, x1, pf, first, state);
    }
    constexpr int T0 = std::min(T, S::kTileT);
    if (first) {
      return fused_kernel<S, D, kWide, R, T0, T - T0, true>(rows, tails, n_full, chunk0, n_steps, x0, x1, pf, state);
    }
    fused_kernel<S, D, kWide, R, T0, T - T0, false>(rows, tails, n_full, chunk0, n_steps, x0, x1, pf, state);
  }
}

// All n_rows rows times tokens [t0, t0 + nt) of the tiled x (tile_x; t0 starts a token block, nt <= kBlocks *
// kTileT), R rows at a time (the rows are row_bytes apart). In the call's first pass (prefetch), while a row group
// works on a K block, the next group's part of that K block streams into L1 (fused_kernel) and a share of the
// bytes [ahead, ahead + ahead_bytes) (the next unit of the matrix) into L2.
template <class S, DType D, bool kWide, int R, int kBlocks>
void fused_pass(const RowSrc* rows, const uint8_t* const* tails, int64_t n_rows, int64_t row_bytes, int64_t n_full,
                int64_t n_chunks, const typename S::Elem* xt, int64_t kp, int64_t t0, int64_t nt, bool prefetch,
                const uint8_t* ahead, int64_t ahead_bytes, float* c, int64_t cs, Scratch<S>& s) {
  using F = typename S::F;
  constexpr int kC = kChains<S, D>;
  constexpr int64_t kBlockChunks = kTileBlockChunks<S, D>;
  constexpr int64_t kPassTokens = kBlocks * S::kTileT;
  constexpr int64_t kStatePerChain = kPassTokens * R * S::kLanes;
  static_assert(kBlocks == 1 || kBlocks == 2, "fused_kernel takes one or two token blocks");
  const int64_t n_kb = (n_chunks + kBlockChunks - 1) / kBlockChunks, n_groups = (n_rows + R - 1) / R;
  // With one K block no group's sums outlive its pass: every group takes the first slot, which stays in L1.
  const int64_t state_slots = n_kb == 1 ? 1 : n_groups;
  if (s.state.size() < size_t(state_slots * kC * kStatePerChain)) s.state.resize(size_t(state_slots * kC * kStatePerChain));
  const int64_t nt0 = std::min<int64_t>(S::kTileT, nt), nt1 = nt - nt0;
  const typename S::Elem* xb0 = xt + t0 * kp;
  const typename S::Elem* xb1 = kBlocks == 2 ? xb0 + S::kTileT * kp : xb0;
  // Row group g's sums once its last K block is done, while its state is still in L1 (one pass at the end over
  // every group's state, 96 KB for a 64-row unit, read it back from L2; kernel_bench, FP4 expert with 12 tokens
  // on two threads: +5%): the chains summed lane by lane, then four (token, row) vectors' horizontal sums at a
  // time (reduce<4> sums each vector as reduce<1> would).
  auto finish_group = [&](int64_t g, const float* state) {
    const int64_t r0 = g * R, nr = std::min<int64_t>(R, n_rows - r0), n = nt * R;
    for (int64_t q0 = 0; q0 < n; q0 += 4) {  // q = t * R + r, the state's order
      F sum[4];
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t q = std::min(q0 + j, n - 1);
        F acc[kC][1];
        for (int k = 0; k < kC; ++k) acc[k][0] = S::fload(state + k * kStatePerChain + q * S::kLanes);
        sum_chains<S, 1>(acc, kC, &sum[j]);
      }
      if (R % 4 == 0 && nr == R) {  // four rows of one token: straight into c
        S::template reduce<4>(sum, c + (t0 + q0 / R) * cs + r0 + q0 % R);
        continue;
      }
      float part[4];
      S::template reduce<4>(sum, part);
      for (int64_t j = 0; j < std::min<int64_t>(4, n - q0); ++j) {
        const int64_t t = (q0 + j) / R, r = (q0 + j) % R;
        if (r < nr) c[(t0 + t) * cs + r0 + r] = part[j];
      }
    }
  };
  const int64_t next_group = prefetch ? R * row_bytes : 0;
  // Each (K block, group)'s share of the next unit's lines, split between its chains' calls.
  const int64_t ahead_lines = prefetch ? (ahead_bytes + 63) / 64 : 0;
  const int64_t group_lines = (ahead_lines + n_kb * n_groups - 1) / (n_kb * n_groups);
  for (int64_t kb = 0; kb < n_kb; ++kb) {
    const int64_t ch0 = kb * kBlockChunks, nch = std::min(kBlockChunks, n_chunks - ch0);
    for (int64_t g = 0; g < n_groups; ++g) {
      RowSrc grp[R];
      const uint8_t* grp_tails[R];
      row_group<R>(rows, tails, n_rows, g * R, grp, grp_tails);
      const int64_t g0 = std::min(ahead_lines, (kb * n_groups + g) * group_lines);
      const int64_t g1 = std::min(ahead_lines, g0 + group_lines);
      float* state = &s.state[size_t((state_slots == 1 ? 0 : g) * kC * kStatePerChain)];
      // Chain k: chunks ch0 + k, ch0 + k + kC, ... (block_position order in x).
      for_each_chain<kC>(nch, kb == 0, state, kStatePerChain, [&](int k, int64_t first_step, int64_t n_k,
                                                                  float* chain_state) {
        const int64_t l0 = g0 + (g1 - g0) * k / kC, l1 = g0 + (g1 - g0) * (k + 1) / kC;
        const Prefetch pf{next_group, ahead + 64 * l0, l1 - l0};
        fused_tokens<S, D, kWide, R, kPassTokens>(nt, grp, grp_tails, n_full, ch0 + k, n_k,
                                                   xb0 + (ch0 * nt0 + first_step * nt0) * S::kChunk,
                                                   xb1 + (ch0 * nt1 + first_step * nt1) * S::kChunk, pf, kb == 0,
                                                   chain_state);
      });
      if (kb == n_kb - 1) finish_group(g, state);
    }
  }
}

// All n_rows rows times the T tokens of the tiled x xt (x: the same tokens unpacked, rows xs apart), in passes
// over the weights:
// - every token block alone, 2 * kFusedRows rows at a time (24 accumulators per chain). A pass of two blocks
//   with kFusedRows rows loads twice the x per product, from L2 (48-96 KB of x per K block): on Zen 5
//   (kernel_bench, 2 threads, alternating builds) an FP4 expert with 12 / 18 / 24 tokens ran 11 / 39 / 20%
//   faster in one-block passes, bf16 4096 x 4096 with 12 tokens 24%;
// - except a last partial block of at most kDirectT tokens: direct mode on x (all chains in one pass: a fused
//   pass of 2 tokens holds 4 accumulators per chain; FP4 with 8 tokens +11%, with 10 the same). A larger
//   partial block went in a pass of kFusedRows rows before, each decoded chunk serving fewer products: in a
//   pass of 2 * kFusedRows rows, FP4 with 5 / 11 tokens ran 39 / 10% faster (kernel_bench, 2 threads).
// FP8 keeps passes of two blocks with kFusedRows rows: its decode costs more (12 tokens ran ~7% slower in
// one-block passes). So does every dtype of a family with kFusedPairPasses, a pair at a time, and again a last
// partial block of at most kDirectT tokens in direct mode. The sums are the same whatever the pass: each
// (row, token) adds its chains' chunks in order.
template <class S, DType D, bool kWide>
void fused_panels(const RowSrc* rows, const uint8_t* const* tails, int64_t n_rows, int64_t row_bytes, int64_t n_full,
                  int64_t n_chunks, const typename S::Elem* xt, int64_t kp, const typename S::Elem* x, int64_t xs,
                  int64_t T, const uint8_t* ahead, int64_t ahead_bytes, float* c, int64_t cs, Scratch<S>& s) {
  constexpr int R = kFusedRows<S>;
  constexpr int64_t kB = S::kTileT;
  constexpr bool kOneBlockPasses = D != DType::kF8E4M3 && !kFusedPairPasses<S>;
  for (int64_t t0 = 0; t0 < T;) {
    const int64_t left = T - t0;
    if (left <= S::kDirectT) {
      direct_tokens<S, D, kWide, false, S::kDirectT>(rows, tails, n_rows, x + t0 * xs, xs, left, n_full,
                                                     n_full < n_chunks, c + t0 * cs, cs);
      return;
    }
    const int64_t nt = std::min(left, kOneBlockPasses ? kB : 2 * kB);
    if constexpr (kOneBlockPasses) {
      fused_pass<S, D, kWide, 2 * R, 1>(rows, tails, n_rows, row_bytes, n_full, n_chunks, xt, kp, t0, nt, t0 == 0,
                                        ahead, ahead_bytes, c, cs, s);
    } else {
      fused_pass<S, D, kWide, R, 2>(rows, tails, n_rows, row_bytes, n_full, n_chunks, xt, kp, t0, nt, t0 == 0,
                                    ahead, ahead_bytes, c, cs, s);
    }
    t0 += nt;
  }
}

template <class S, DType D, bool kWide>
void run_tile(const LinearWeight& w, const RowSrc* rows, int64_t n_rows, const PackedX& x, float* c, int64_t cs,
              Scratch<S>& s) {
  using Elem = typename S::Elem;
  const int64_t K = w.n_in, kp = x.k_padded, xs = x.stride, T = x.n_tokens;
  const int64_t n_full = K / S::kChunk, n_chunks = kp / S::kChunk;
  const bool has_tail = n_full < n_chunks;
  const uint8_t* tails[kTileModeRows] = {};
  if (has_tail) fill_tails<S, D>(rows, n_rows, K, n_full, s, tails);
  const Elem* xd = static_cast<const Elem*>(x.data);

  if (T <= S::kDirectT) {  // direct: decode in registers
    if constexpr (D == DType::kF8E4M3 && !kWide && kScalesX<S>) {
      if (const Elem* xm = scaled_x<S>(w, rows, n_rows, x, s)) {
        return direct_tokens<S, D, false, true, S::kDirectT>(rows, tails, n_rows, xm, xs, T, n_full, has_tail, c, cs);
      }
    }
    return direct_tokens<S, D, kWide, false, S::kDirectT>(rows, tails, n_rows, xd, xs, T, n_full, has_tail, c, cs);
  }
  DI_CHECK_MSG(x.tiled, "linear: tile mode needs the tiled x (tile_x)");
  if constexpr (kFusedRows<S> > 0) {
    if (fused_for<S>(D) && (T + S::kTileT - 1) / S::kTileT <= fused_max_blocks(D)) {
      const int64_t unit_bytes = n_rows * w.row_bytes();
      return fused_panels<S, D, kWide>(rows, tails, n_rows, w.row_bytes(), n_full, n_chunks,
                                       static_cast<const Elem*>(x.tiled), kp, xd, xs, T, rows[0].data + unit_bytes,
                                       unit_bytes, c, cs, s);
    }
  }
  tile_loop<S, D>(n_rows, static_cast<const Elem*>(x.tiled), kp, T, n_chunks, c, cs, s,
               [&](int64_t kb, int64_t n_kb, bool first_panel, int64_t i0, int64_t i1, Elem* dst) {
                 const int64_t ch0 = kb * kTileBlockChunks<S, D>, nch = std::min(kTileBlockChunks<S, D>, n_chunks - ch0);
                 // The next unit (the rows after this one), a 1 / n_kb share per K block, in the first panel;
                 // rows [i0, i1) prefetch their part of that share.
                 const int64_t unit_bytes = n_rows * w.row_bytes(), share = (unit_bytes + n_kb - 1) / n_kb;
                 const int64_t a0 = kb * share + share * i0 / n_rows, a1 = kb * share + share * i1 / n_rows;
                 decode_block<S, D, kWide>(rows + i0, tails + i0, i1 - i0, n_full, rows[0].data + unit_bytes + a0,
                                           first_panel ? a1 - a0 : 0, ch0, nch, dst);
               });
}

template <class S>
void tile(const LinearWeight& w, int64_t row0, int64_t n_rows, const PackedX& x, float* c, int64_t cs) {
  Scratch<S>& s = scratch<S>();
  const int64_t n_chunks = x.k_padded / S::kChunk;
  RowSrc rows[kTileModeRows];
  const bool wide = row_sources<S>(w, row0, n_rows, n_chunks, s, rows);
  switch (w.dtype) {
    case DType::kBF16: return run_tile<S, DType::kBF16, false>(w, rows, n_rows, x, c, cs, s);
    case DType::kF8E4M3:
      if constexpr (kDecodesFp8<S>) {
        if (wide) return run_tile<S, DType::kF8E4M3, true>(w, rows, n_rows, x, c, cs, s);
        return run_tile<S, DType::kF8E4M3, false>(w, rows, n_rows, x, c, cs, s);
      }
      [[fallthrough]];
    case DType::kI8:
      if constexpr (kDecodesFp4<S>) return run_tile<S, DType::kI8, false>(w, rows, n_rows, x, c, cs, s);
      [[fallthrough]];
    default: DI_CHECK_MSG(false, "linear: unsupported weight dtype");
  }
}

template <class S>
bool supports(const LinearWeight& w) {
  switch (w.dtype) {
    case DType::kBF16: return true;
    case DType::kF8E4M3: return kDecodesFp8<S> && w.block > 0 && w.block % S::kChunk == 0;
    case DType::kI8: return kDecodesFp4<S> && w.n_in % 32 == 0 && w.n_in % S::kChunk == 0;
    default: return false;
  }
}

}  // namespace family
