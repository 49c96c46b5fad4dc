// The SIMD parts of sparse attention (spec AT1-AT3), indexer scores (I7-I9) and the mHC mixes (B1/H1),
// written once over the ISA traits `S` (see linear_family.h, which must be included first, in the same
// region and namespace). Must not be included anywhere else (no include guard on purpose).
//
// Sparse attention of one token, heads [h0, h1): scores q . K^T with the tile kernel on packed rows, then per
// head a softmax over the compacted slots with the 64-slot block structure of the contract (P = bf16(exp(s -
// m_b)) against the running max m_b, or against the global max), then O = sum_b exp(m_b - M) sum_{j in b}
// P_j V_j computed online (the accumulators are rescaled by exp(m_{b-1} - m_b) where the running max grows),
// divided by the unrounded denominator and rounded to bf16 once. Slots are processed in pairs (j, j+1) of
// one segment: the bf16 family multiplies bf16 pairs with vdpbf16ps, the fp32 families two FMAs.

namespace family {

using deepinfer::cpu::AttentionLayout;

// Packs rows [r0, r1) of `rows` (nullptr: zero row) into rows of `stride` elements for the tile kernel.
template <class S>
bool pack_rows(const float* const* rows, int64_t r0, int64_t r1, int64_t k, int64_t stride, typename S::Elem* out) {
  bool ok = true;
  for (int64_t r = r0; r < r1; ++r) {
    typename S::Elem* dst = out + r * stride;
    if (rows[r]) ok &= S::pack_x(rows[r], 0, 0, 1, k, stride, false, dst);
    else std::fill(dst, dst + stride, typename S::Elem(0));
  }
  return ok;
}

// c[t * cs + r] = sum_k x[t, k] * w[r, k] for r < n_rows (w padded to a multiple of kTileR rows), t < n_tokens.
// Rows in panels of at most kDotPanelBytes, every token block over a panel before the next: with every token block
// over all rows, a token's attention (64 heads over 640 K rows of 2 KB, 1.3 MB) read K from L3 once per 6 heads.
// Each (row, token) sum is one tile_tokens call over all of k whatever the order.
constexpr int64_t kDotPanelBytes = 256 * 1024;
template <class S>
void dot_tiles(const typename S::Elem* w, int64_t ws, int64_t n_rows, const typename S::Elem* x, int64_t xs,
               int64_t n_tokens, int64_t k_padded, float* c, int64_t cs) {
  const int64_t n_chunks = k_padded / S::kChunk;
  DI_CHECK_MSG(n_chunks > 0, "dot_tiles: empty rows");
  const int64_t row_bytes = ws * int64_t(sizeof(typename S::Elem));
  const int64_t panel_rows = std::max<int64_t>(1, kDotPanelBytes / row_bytes / S::kTileR) * S::kTileR;
  float part[S::kTileT * S::kTileR];
  for (int64_t p0 = 0; p0 < n_rows; p0 += panel_rows) {
    const int64_t p1 = std::min(n_rows, p0 + panel_rows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += S::kTileT) {
      const int64_t nt = std::min<int64_t>(S::kTileT, n_tokens - t0);
      for (int64_t r0 = p0; r0 < p1; r0 += S::kTileR) {
        tile_tokens<S, S::kTileR, S::kTileT>(w + r0 * ws, ws, x + t0 * xs, xs, nt, n_chunks, part, S::kTileR);
        const int64_t nr = std::min<int64_t>(S::kTileR, n_rows - r0);
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t r = 0; r < nr; ++r) c[(t0 + t) * cs + r0 + r] = part[t * S::kTileR + r];
      }
    }
  }
}

// Packs K rows [r0, r1) for the score tile kernel and, for the bf16 family, the (j, j+1) V pairs.
template <class S>
bool attention_pack_kv(const AttentionLayout& a, int64_t r0, int64_t r1) {
  auto* k = static_cast<typename S::Elem*>(a.k_packed);
  bool ok = pack_rows<S>(a.rows, r0, r1, a.head_dim, a.stride, k);
  if constexpr (S::kPairedV) {
    ok &= S::pack_v_pairs(a.rows, r0, r1, a.head_dim, static_cast<uint32_t*>(a.v_packed));
  }
  return ok;
}

template <class S>
bool attention_pack_q(const AttentionLayout& a, int64_t h0, int64_t h1) {
  return S::pack_x(a.q, a.head_dim, h0, h1, a.head_dim, a.stride, false, a.q_packed);
}

// Per-thread buffers of attend().
struct AttendScratch {
  std::vector<float> dots;     // [heads, n_rows] scores, then P (bf16 values)
  std::vector<float> factor;   // [heads, n_seg] rescale before segment (online max)
  std::vector<float> denom;    // [heads]
  std::vector<uint32_t> pairs; // bf16 family: [heads, n_rows / 2] P pairs
};

inline AttendScratch& attend_scratch() {
  thread_local AttendScratch s;
  return s;
}

// The PV micro-kernel: MT heads x NV vectors of output dims, every segment, online rescale.
template <class S, int MT, int NV>
void pv_kernel(const AttentionLayout& a, const typename S::PvSource& src, const typename S::PvRow* p_rows,
               int64_t p_stride, const float* factor, int64_t n_heads_here, const float* denom, int64_t d0,
               float* out) {
  using F = typename S::F;
  F acc[MT][NV];
  for (int h = 0; h < MT; ++h)
    for (int v = 0; v < NV; ++v) acc[h][v] = S::fzero();
  for (int64_t g = 0; g < a.n_seg; ++g) {
    if (g > 0) {
      for (int h = 0; h < MT; ++h) {
        const float f = factor[std::min<int64_t>(h, n_heads_here - 1) * a.n_seg + g];
        if (f != 1.0f) {
          const F fv = S::fset1(f);
          for (int v = 0; v < NV; ++v) acc[h][v] = S::fmul(acc[h][v], fv);
        }
      }
    }
    for (int64_t jp = a.seg_begin[g] / 2; jp < a.seg_begin[g + 1] / 2; ++jp) {
      typename S::W vv[NV];
      for (int v = 0; v < NV; ++v) vv[v] = S::pv_v(src, jp, d0 + v * S::kLanes);
      for (int h = 0; h < MT; ++h) {
        const typename S::W pb = S::pv_p(p_rows + std::min<int64_t>(h, n_heads_here - 1) * p_stride, jp);
        for (int v = 0; v < NV; ++v) acc[h][v] = S::dot(acc[h][v], vv[v], pb);
      }
    }
  }
  for (int h = 0; h < std::min<int64_t>(MT, n_heads_here); ++h) {
    const F dv = S::fset1(denom[h]);
    for (int v = 0; v < NV; ++v) S::fstore(out + h * a.head_dim + d0 + v * S::kLanes, S::fbf16(S::fdiv(acc[h][v], dv)));
  }
}

// Scores, softmax and PV for heads [h0, h1) of one token (k, v and q already packed).
template <class S>
void attention_attend(const AttentionLayout& a, int64_t h0, int64_t h1) {
  using F = typename S::F;
  constexpr int64_t L = S::kLanes;
  AttendScratch& s = attend_scratch();
  const int64_t nh = h1 - h0, nr = a.n_rows;
  s.dots.resize(size_t(nh * nr));
  s.factor.resize(size_t(nh * a.n_seg));
  s.denom.resize(size_t(nh));
  const auto* kp = static_cast<const typename S::Elem*>(a.k_packed);
  const auto* qp = static_cast<const typename S::Elem*>(a.q_packed) + h0 * a.stride;
  dot_tiles<S>(kp, a.stride, nr, qp, a.stride, nh, a.k_padded, s.dots.data(), nr);  // AT1: q . kv_j (fp32)

  // AT2: per head, P = bf16(exp(s - m_b)) against the running (or global) max; the denominator sums the
  // unrounded exponentials against the final max M.
  const F scale = S::fset1(a.scale);
  for (int64_t h = 0; h < nh; ++h) {
    float* d = &s.dots[size_t(h * nr)];
    float m_all = -INFINITY;
    for (int64_t g = 0; g < a.n_seg; ++g) {
      const int64_t b = a.seg_begin[g], e = b + a.seg_valid[g];
      int64_t j = b;
      F mv = S::fset1(-INFINITY);
      for (; j + L <= e; j += L) {
        const F sv = S::fmul(S::fload(d + j), scale);
        S::fstore(d + j, sv);
        mv = S::fmax(mv, sv);
      }
      float m = S::fhmax(mv);
      for (; j < e; ++j) {
        d[j] *= a.scale;
        m = std::max(m, d[j]);
      }
      m_all = std::max(m_all, m);
      s.factor[size_t(h * a.n_seg + g)] = m_all;  // running max after segment g (temporarily)
    }
    double denom = 0;
    float m_prev = -INFINITY;
    for (int64_t g = 0; g < a.n_seg; ++g) {
      const float m = a.running_max ? s.factor[size_t(h * a.n_seg + g)] : m_all;
      const int64_t b = a.seg_begin[g], e = b + a.seg_valid[g];
      const F mv = S::fset1(m);
      F sum = S::fzero();
      int64_t j = b;
      for (; j + L <= e; j += L) {
        const F ev = S::fexp(S::fsub(S::fload(d + j), mv));
        sum = S::fadd(sum, ev);
        S::fstore(d + j, S::fbf16(ev));
      }
      float seg_sum = S::fhsum(sum);
      for (; j < e; ++j) {
        const float ev = std::exp(d[j] - m);
        seg_sum += ev;
        d[j] = deepinfer::round_bf16_from_float(ev);
      }
      for (; j < a.seg_begin[g + 1]; ++j) d[j] = 0.0f;  // pad
      denom += double(seg_sum) * std::exp(double(m) - double(m_all));
      s.factor[size_t(h * a.n_seg + g)] = g == 0 || m == m_prev ? 1.0f : float(std::exp(double(m_prev) - double(m)));
      m_prev = m;
    }
    denom += std::exp(double(a.sink[h0 + h]) - double(m_all));
    s.denom[size_t(h)] = float(denom);
  }

  // AT3: O = sum_j exp(m_b(j) - M) P_j kv_j / denom, one bf16 rounding.
  typename S::PvSource src;
  const typename S::PvRow* p_rows = nullptr;
  int64_t p_stride = 0;
  S::pv_prepare(a, s.dots.data(), nh, &src, &s.pairs, &p_rows, &p_stride);
  constexpr int kMT = S::kPvHeads, kNV = S::kPvVectors;
  DI_CHECK_MSG(a.head_dim % (kNV * L) == 0, "sparse attention: head_dim must be a multiple of the PV tile");
  for (int64_t d0 = 0; d0 < a.head_dim; d0 += kNV * L) {
    for (int64_t hh = 0; hh < nh; hh += kMT) {
      pv_kernel<S, kMT, kNV>(a, src, p_rows + hh * p_stride, p_stride, &s.factor[size_t(hh * a.n_seg)],
                             std::min<int64_t>(kMT, nh - hh), &s.denom[size_t(hh)], d0,
                             a.out + (h0 + hh) * a.head_dim);
    }
  }
}

// Indexer scores for keys [j0, j1) (spec I7-I9) from the packed query heads and keys:
// score_j = bf16(sum_h bf16(relu(bf16(q_h . K_j)) * w_h)), the head sum in fp32.
template <class S>
void index_scores_range(const typename S::Elem* keys, const typename S::Elem* q, const float* weights, int64_t n_heads,
                        int64_t k_padded, int64_t stride, int64_t j0, int64_t j1, float* dots, float* scores) {
  using F = typename S::F;
  constexpr int64_t L = S::kLanes;
  const int64_t n = j1 - j0;
  dot_tiles<S>(keys + j0 * stride, stride, n, q, stride, n_heads, k_padded, dots, n);  // [heads, n]
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    F acc = S::fzero();
    for (int64_t h = 0; h < n_heads; ++h) {
      const F sv = S::fbf16(S::fload(dots + h * n + j));
      acc = S::fadd(acc, S::fbf16(S::fmul(S::fmax(sv, S::fzero()), S::fset1(weights[h]))));
    }
    S::fstore(scores + j0 + j, S::fbf16(acc));
  }
  for (; j < n; ++j) {
    float acc = 0;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float sv = deepinfer::round_bf16_from_float(dots[h * n + j]);
      acc += deepinfer::round_bf16_from_float(std::max(sv, 0.0f) * weights[h]);
    }
    scores[j0 + j] = deepinfer::round_bf16_from_float(acc);
  }
}

// dot_tiles and index_scores_range with the SimdKernels signatures (packed rows as void*).
template <class S>
void dot_tiles_packed(const void* w, int64_t ws, int64_t n_rows, const void* x, int64_t xs, int64_t n_tokens,
                      int64_t k_padded, float* c, int64_t cs) {
  using E = typename S::Elem;
  dot_tiles<S>(static_cast<const E*>(w), ws, n_rows, static_cast<const E*>(x), xs, n_tokens, k_padded, c, cs);
}
template <class S>
void index_scores_packed(const void* keys, const void* q, const float* weights, int64_t n_heads, int64_t k_padded,
                         int64_t stride, int64_t j0, int64_t j1, float* dots, float* scores) {
  using E = typename S::Elem;
  index_scores_range<S>(static_cast<const E*>(keys), static_cast<const E*>(q), weights, n_heads, k_padded, stride, j0, j1,
                        dots, scores);
}

// Sum of squares of n floats (mHC rms).
template <class S>
float sum_squares(const float* x, int64_t n) {
  using F = typename S::F;
  F acc0 = S::fzero(), acc1 = S::fzero();
  int64_t i = 0;
  for (; i + 2 * S::kLanes <= n; i += 2 * S::kLanes) {
    const F a = S::fload(x + i), b = S::fload(x + i + S::kLanes);
    acc0 = S::ffma(a, a, acc0);
    acc1 = S::ffma(b, b, acc1);
  }
  float total = S::fhsum(S::fadd(acc0, acc1));
  for (; i < n; ++i) total += x[i] * x[i];
  return total;
}

}  // namespace family
