// MoE of the V4 family: sqrtsoftplus gate, hash routing (tid2eid) or bias-steered top-k, routed scale,
// FP4 experts with the SwiGLU clamp, the shared expert (spec §3.7, §7.7; V4 golden M1-M8, V4.1 steps
// 35-41). V4.1 differs in four places, each marked: fp32 selection keys, the 1e-20 in the weight
// normalisation, the clamp on the shared expert, and the activation QDQ (block 32, fp32 scale rule).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/host_copy.h"
#include "core/dtypes.h"
#include "model/model_internal.h"
#include "model/moe.h"
#include "model/weight_traffic.h"

namespace deepinfer {

namespace {
struct MoeBuffers {
  std::vector<float> uq;    // [T, D] the activation-quantised input
  std::vector<double> acc;  // [T, D] the exact M8 sums
  std::vector<float> shared_a, shared_b, shared_y;  // [T, IS], [T, IS], [T, D] the shared expert's
  // A group's routed rows: x [n, D], a and b [n, I], y [n, D]; at batch 256 on a GPU one group holds all 1536 rows
  // (75 MB at V4-Flash's widths), which fresh vectors zero-filled in every layer.
  std::vector<float> x, a, b, y;
};
}  // namespace

void moe_on_backend(Backend& backend, const MoeParams& p) {
  const BlockWeights& w = *p.weights;
  const bool v41 = p.v41;
  const int64_t T = p.n_tokens, D = p.dim;
  const int64_t E = int64_t(w.experts.size()), K = w.n_activated_experts;
  const int64_t I = w.experts.front().w1.n_out, IS = w.shared.w1.n_out;
  const double limit = p.swiglu_limit;
  const int64_t act_block = p.act_block;
  auto act_qdq = [&](std::vector<float>& x, int64_t n_rows, int64_t width) {
    act_qdq_rows(backend, x.data(), n_rows, width, act_block, v41);
  };

  // The [T, D] and shared-expert buffers reused from call to call (thread_local, as block_buffers): 320 MB at
  // 4096 tokens that no longer come and go beside the attention's in every layer (the heap's peak, faulted in
  // once).
  thread_local MoeBuffers buf;
  std::vector<float>& uq = buf.uq;
  uq.resize(size_t(T * D));
  copy_on_threads(&backend, uq.data(), p.u, size_t(T * D) * sizeof(float));
  act_qdq(uq, T, D);

  // M1 with the shared expert's w1 / w3 (M7), which read the same token rows and nothing the routing
  // decides: one batch (one wait on a GPU).
  std::vector<float> gate(static_cast<size_t>(T * E));
  std::vector<float>& shared_a = buf.shared_a;
  std::vector<float>& shared_b = buf.shared_b;
  std::vector<float>& shared_y = buf.shared_y;
  shared_a.resize(size_t(T * IS));
  shared_b.resize(size_t(T * IS));
  shared_y.resize(size_t(T * D));
  const LinearParams m1_m7[] = {
      {p.u, D, T, &w.gate, 0, E, Epilogue::kSqrtSoftplus, nullptr, gate.data(), E},                      // M1
      {uq.data(), D, T, &w.shared.w1, 0, IS, Epilogue::kBf16, nullptr, shared_a.data(), IS, act_block},  // M7
      {uq.data(), D, T, &w.shared.w3, 0, IS, Epilogue::kBf16, nullptr, shared_b.data(), IS, act_block},
  };
  backend.linears(m1_m7);
  const double shared_limit = v41 ? limit : INFINITY;  // M7: no clamp in V4; V4.1 clamps the shared expert too
  backend.for_rows(T, [&](int64_t t0, int64_t t1) {
    swiglu(&shared_a[size_t(t0 * IS)], &shared_b[size_t(t0 * IS)], (t1 - t0) * IS, shared_limit, 1.0, &shared_a[size_t(t0 * IS)]);
  });
  act_qdq(shared_a, T, IS);
  const LinearParams shared_w2{shared_a.data(), IS, T, &w.shared.w2, 0, D, Epilogue::kBf16, nullptr, shared_y.data(), D, act_block};

  // M2/M3: per token the chosen experts and their weights.
  std::vector<int64_t> chosen(static_cast<size_t>(T * K));
  std::vector<double> route_weight(static_cast<size_t>(T * K));
  backend.for_rows(T, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t* hash_row = w.hash_routed ? w.tid2eid + int64_t(p.token_ids[t]) * K : nullptr;
      route_token(&gate[size_t(t * E)], w.gate_bias, hash_row, E, K, v41, p.route_scale, &chosen[size_t(t * K)],
                  &route_weight[size_t(t * K)], order.data());
    }
  });
  // Each expert's choices (token ascending, then choice), found by one counting pass rather than a scan of every
  // choice per expert (256 x 256 x 6 a layer at batch 256).
  std::vector<int64_t> expert_first(static_cast<size_t>(E + 1), 0), by_expert(static_cast<size_t>(T * K));
  for (int64_t e : chosen) {
    DI_CHECK_MSG(e >= 0 && e < E, "a routed expert outside the block's experts");
    ++expert_first[size_t(e + 1)];
  }
  std::partial_sum(expert_first.begin(), expert_first.end(), expert_first.begin());
  std::vector<int64_t> next_of_expert(expert_first.begin(), expert_first.end() - 1);
  for (int64_t i = 0; i < T * K; ++i) by_expert[size_t(next_of_expert[size_t(chosen[size_t(i)])]++)] = i;

  std::vector<double>& acc = buf.acc;  // M8 sums exactly, rounds once
  acc.resize(size_t(T * D));
  backend.for_rows(T, [&](int64_t t0, int64_t t1) { std::fill(acc.begin() + t0 * D, acc.begin() + t1 * D, 0.0); });

  // Routed experts: gather each expert's tokens, run w1/w3, SwiGLU with clamp (M5), w2. In decode (a few tokens)
  // the experts go in one group, their rows side by side in one buffer, so the backend runs the group's w1 and
  // w3 as one parallel region and its w2 as another (Backend::linears) instead of three per expert; each row's
  // arithmetic and the order of the M8 sums (experts ascending) are unchanged. In prefill each expert is its
  // own group: alternating runs of a 512-token prefill were ~3% slower with groups of 256 rows (both threads
  // then stream different experts' weights instead of one matrix). The shared expert's w2 joins the last
  // group's w2 batch (in decode: the routed w2 of every expert and the shared one, one wait on a GPU). A backend
  // whose calls each wait (a GPU: ~480 waits per layer in a 128-token prefill with a group per expert) gets
  // groups of whole experts up to kGroupRows rows in prefill too, which bounds its staging buffers.
  constexpr int64_t kGroupRows = 2048;
  const int64_t group_rows = T <= 16 || backend.each_call_waits() ? kGroupRows : 1;  // a group runs once this full
  struct Routed {
    int64_t expert, first_row, n_rows;
  };
  std::vector<Routed> group;
  std::vector<int64_t> row_token;     // the group's rows: token index
  std::vector<double> row_weight;     // and route weight
  std::vector<float>& x = buf.x;
  std::vector<float>& a = buf.a;
  std::vector<float>& b = buf.b;
  std::vector<float>& y = buf.y;
  std::vector<LinearParams> ps;
  auto run_group = [&](bool last) {
    const int64_t n = int64_t(row_token.size());
    if (n == 0) {
      if (last) backend.linear(shared_w2);
      return;
    }
    x.resize(size_t(n * D));
    a.resize(size_t(n * I));
    b.resize(size_t(n * I));
    y.resize(size_t(n * D));
    backend.for_rows(n, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::copy_n(&uq[size_t(row_token[size_t(r)] * D)], D, &x[size_t(r * D)]);
    });
    ps.clear();
    for (const Routed& g : group) {
      const ExpertWeights& ew = w.experts[size_t(g.expert)];
      const float* xg = &x[size_t(g.first_row * D)];
      ps.push_back({xg, D, g.n_rows, &ew.w1, 0, I, Epilogue::kBf16, nullptr, &a[size_t(g.first_row * I)], I, act_block});  // M4
      ps.push_back({xg, D, g.n_rows, &ew.w3, 0, I, Epilogue::kBf16, nullptr, &b[size_t(g.first_row * I)], I, act_block});
    }
    backend.linears(ps);
    backend.for_rows(n, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        swiglu(&a[size_t(r * I)], &b[size_t(r * I)], I, limit, row_weight[size_t(r)], &a[size_t(r * I)]);  // M5
      }
    });
    act_qdq(a, n, I);
    ps.clear();
    for (const Routed& g : group) {
      ps.push_back({&a[size_t(g.first_row * I)], I, g.n_rows, &w.experts[size_t(g.expert)].w2, 0, D, Epilogue::kBf16,
                    nullptr, &y[size_t(g.first_row * D)], D, act_block});  // M6
    }
    if (last) ps.push_back(shared_w2);
    backend.linears(ps);
    // Column ranges on the backend's threads; each element still adds its rows in ascending order.
    backend.for_rows((D + kColumnRange - 1) / kColumnRange, [&](int64_t j0, int64_t j1) {
      const int64_t c0 = j0 * kColumnRange, c1 = std::min(D, j1 * kColumnRange);
      for (int64_t r = 0; r < n; ++r) {
        double* dst = &acc[size_t(row_token[size_t(r)] * D)];
        const float* src = &y[size_t(r * D)];
        for (int64_t i = c0; i < c1; ++i) dst[i] += src[i];
      }
    });
    group.clear();
    row_token.clear();
    row_weight.clear();
  };
  for (int64_t e = 0; e < E; ++e) {
    const int64_t first_row = int64_t(row_token.size());
    for (int64_t k = expert_first[size_t(e)]; k < expert_first[size_t(e + 1)]; ++k) {
      row_token.push_back(by_expert[size_t(k)] / K);
      row_weight.push_back(route_weight[size_t(by_expert[size_t(k)])]);
    }
    const int64_t n = int64_t(row_token.size()) - first_row;
    if (n > 0) group.push_back({e, first_row, n});
    // The last group runs after the loop, with the shared w2.
    if (int64_t(row_token.size()) >= group_rows && e + 1 < E) run_group(false);
  }
  run_group(true);

  backend.for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * D; i < t1 * D; ++i) p.out[i] = round_bf16(acc[size_t(i)] + shared_y[size_t(i)]);  // M8
  });
}

MoeParams Model::moe_params(const BlockWeights& w, const Batch& batch) const {
  const ModelConfig& c = config_;
  const bool v41 = c.is_v41();
  return {nullptr, batch.n_tokens(), c.dim, &w, batch.ids.data(), v41, v41 ? c.route_scale : double(float(c.route_scale)),
          double(float(c.swiglu_limit)), c.act_block, nullptr};
}

MhcSideParams Model::side_params(const BlockWeights& w, const Batch& batch, int side, const std::vector<float>& h,
                                 std::vector<float>& h_out) const {
  const ModelConfig& c = config_;
  MhcWeights m;
  m.fn = side == 0 ? w.hc_attn_fn : w.hc_ffn_fn;
  m.scale = side == 0 ? w.hc_attn_scale : w.hc_ffn_scale;
  m.base = side == 0 ? w.hc_attn_base : w.hc_ffn_base;
  m.norm = side == 0 ? w.attn_norm : w.ffn_norm;
  m.n_mix = (2 + c.hc_mult) * c.hc_mult;
  m.sinkhorn_iters = c.hc_sinkhorn_iters;
  m.eps = c.norm_eps_value();
  m.hc_eps = c.hc_eps_value();
  MhcSideParams p;
  p.h = h.data();
  p.n_tokens = batch.n_tokens();
  p.dim = c.dim;
  p.mhc = m;
  p.h_out = h_out.data();
  return p;
}

Status Model::place_experts() {
  std::vector<const LinearWeight*> experts;
  auto add = [&](const BlockWeights& block) {
    for (const ExpertWeights& e : block.experts) {
      for (const LinearWeight* w : {&e.w1, &e.w3, &e.w2}) experts.push_back(w);
    }
  };
  for (const BlockWeights& block : weights_.layers) add(block);
  for (const MtpWeights& mtp : weights_.mtp) add(mtp.block);
  return backend_->place_experts(weight_traffic(config_).dense_bytes, experts);
}

}  // namespace deepinfer
