// The CUDA backend's MoE (CudaBackend, cuda_backend.h): a block's whole MoE, its FFN side with the mHC around it,
// and a block's tail, each one call replayed as a CUDA graph.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"

namespace deepinfer {

bool CudaBackend::moe(const MoeParams& p) {
  const MoeBlock* block = device_moe_block(p);
  if (!block) return false;
  run_moe(p, *block, nullptr, nullptr);
  return true;
}

bool CudaBackend::moe_side(const MoeSideParams& p) {
  if (!side_takes(p)) return false;
  const MoeBlock* block = device_moe_block(p.moe);
  if (!block) return false;
  const MhcSideDevice device = mhc_side_device(p.side);
  run_moe(p.moe, *block, &device, nullptr);
  return true;
}

bool CudaBackend::block_tail(const BlockTailParams& p) {
  const MhcSideParams& attention = p.attention;
  const MoeSideParams& ffn = p.ffn;
  if (!side_takes(ffn) || attention.n_tokens != ffn.side.n_tokens || attention.dim != ffn.side.dim ||
      p.output.n_tokens != ffn.side.n_tokens || p.output.second.n_rows != ffn.side.dim) {
    return false;
  }
  DI_CHECK_MSG(ffn.side.h == attention.h_out && p.output.second.out_stride == attention.dim,
               "block tail: the FFN side does not read the attention side's output");
  const MoeBlock* block = device_moe_block(ffn.moe);
  if (!block) return false;
  OutputChain chain;
  if (!plan_output_chain(p.output, chain)) return false;
  const MhcSideDevice device = mhc_side_device(ffn.side);
  const TailHead head{&p, &chain};
  run_moe(ffn.moe, *block, &device, &head);
  return true;
}

bool CudaBackend::side_takes(const MoeSideParams& p) {
  const MhcSideParams& side = p.side;
  return side.mhc.n_mix == cuda::kHcCoefficientFloats && side.dim == p.moe.dim && side.n_tokens == p.moe.n_tokens &&
         side.dim <= cuda::kHcPreMaxDim;
}

const CudaBackend::MoeBlock* CudaBackend::device_moe_block(const MoeParams& p) {
  const int64_t T = p.n_tokens, K = p.weights->n_activated_experts;
  if (!device_moe_ || T == 0 || T * K > cuda::kMoeMaxRows) return nullptr;
  if (fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt) return nullptr;
  bind_device();
  return moe_block(*p.weights);
}

CudaBackend::MhcSideDevice CudaBackend::mhc_side_device(const MhcSideParams& side) {
  const MhcWeights& m = side.mhc;
  return {&side, weights_.constant(m.fn, m.n_mix * 4 * side.dim, stream_), weights_.constant(m.scale, 3, stream_),
          weights_.constant(m.base, m.n_mix, stream_), m.norm ? weights_.bf16_constant(m.norm, side.dim, stream_) : nullptr};
}

cuda::HcPreLaunch CudaBackend::hc_pre_launch(const MhcSideDevice& side, const float* h, float* mixes, const float* collapse_pre,
                                             float* coeffs, float* u, int64_t u_stride) {
  const MhcWeights& m = side.p->mhc;
  cuda::HcPreLaunch pre;
  pre.h = h;
  pre.mixes = mixes;
  pre.n_tokens = side.p->n_tokens;
  pre.dim = side.p->dim;
  pre.scale = side.scale;
  pre.base = side.base;
  pre.norm = side.norm;
  pre.collapse_pre = collapse_pre;
  pre.sinkhorn_iters = m.sinkhorn_iters;
  pre.eps = m.eps;
  pre.hc_eps = m.hc_eps;
  pre.coeffs = coeffs;
  pre.u = u;
  pre.u_stride = u_stride;
  return pre;
}

const CudaBackend::MoeBlock* CudaBackend::moe_block(const BlockWeights& w) {
  auto [it, fresh] = moe_blocks_.try_emplace(&w);
  if (!fresh) return it->second.get();
  const int64_t E = int64_t(w.experts.size());
  if (!tensor_core_linear_ || E == 0 || E > 1024 || w.n_activated_experts <= 0 || w.n_activated_experts > E) return nullptr;
  for (const ExpertWeights& e : w.experts) {
    for (const LinearWeight* lw : {&e.w1, &e.w3, &e.w2}) {
      if (host_experts_.count(lw->data)) return nullptr;
    }
  }
  auto block = std::make_unique<MoeBlock>();
  block->gate = &weights_.get(w.gate, stream_);
  block->shared_w1 = &weights_.get(w.shared.w1, stream_);
  block->shared_w3 = &weights_.get(w.shared.w3, stream_);
  block->shared_w2 = &weights_.get(w.shared.w2, stream_);
  if (!w.hash_routed) block->gate_bias = weights_.constant(w.gate_bias, E, stream_);
  const cuda::DeviceWeight& first_w1 = weights_.get(w.experts[0].w1, stream_);
  const cuda::DeviceWeight& first_w2 = weights_.get(w.experts[0].w2, stream_);
  block->expert_kind = first_w1.kind;
  block->k_pad = first_w1.k_pad;
  block->inter_k_pad = first_w2.k_pad;
  bool exact = block->gate->k_pad == block->k_pad && block->shared_w1->k_pad == block->k_pad &&
               block->shared_w3->k_pad == block->k_pad && first_w2.kind == first_w1.kind;
  for (const cuda::DeviceWeight* d : {block->gate, block->shared_w1, block->shared_w3, block->shared_w2}) exact = exact && d->mma_exact;
  std::vector<cuda::LinearLaunch> templates(size_t(3 * E));
  for (int64_t e = 0; e < E && exact; ++e) {
    const ExpertWeights& ew = w.experts[size_t(e)];
    const LinearWeight* parts[3] = {&ew.w1, &ew.w3, &ew.w2};
    for (int k = 0; k < 3; ++k) {
      const cuda::DeviceWeight& d = weights_.get(*parts[k], stream_);
      const int64_t want_k_pad = k < 2 ? block->k_pad : block->inter_k_pad;
      exact = exact && d.mma_exact && d.kind == block->expert_kind && d.k_pad == want_k_pad;
      cuda::LinearLaunch& l = templates[size_t(k * E + e)];
      l = launch_of(d);
      l.n_rows = d.n_out;
      l.epilogue = cuda::LinearEpilogue::kBf16;
    }
  }
  if (!exact) return nullptr;
  block->templates = DeviceBuffer(templates.size() * sizeof(cuda::LinearLaunch));
  DI_CUDA_CHECK(cudaMemcpyAsync(block->templates.get(), templates.data(), templates.size() * sizeof(cuda::LinearLaunch),
                                cudaMemcpyHostToDevice, stream_));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));  // once per block: `templates` is pageable and goes out of scope
  it->second = std::move(block);
  return it->second.get();
}

void CudaBackend::run_moe(const MoeParams& p, const MoeBlock& block, const MhcSideDevice* side, const TailHead* head) {
  const BlockWeights& w = *p.weights;
  const int64_t T = p.n_tokens, D = p.dim, E = int64_t(w.experts.size()), K = w.n_activated_experts, R = T * K;
  const int64_t kx = block.k_pad, k2 = block.inter_k_pad, I = w.experts[0].w1.n_out, IS = block.shared_w1->n_out;
  const int64_t k2s = block.shared_w2->k_pad, n_slots = std::min(E, R);
  DI_CHECK_MSG(D == w.gate.n_in && D <= kx, "device MoE: u's width is not the gate's");
  const cuda::ActQdqRule rule = p.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4;
  tail_staging_.wait();  // moe_host_ below
  // Device scratch, each part 256-byte aligned.
  ScratchLayout layout;
  auto take = [&](size_t n) { return layout.take(n); };
  const size_t u_at = take(size_t(T * kx) * 4), hash_at = take(size_t(R) * 4), uq_at = take(size_t(T * kx) * 4),
               scores_at = take(size_t(T * E) * 4), sa_at = take(size_t(T * IS) * 4), sb_at = take(size_t(T * IS) * 4),
               sh_at = take(size_t(T * k2s) * 4), sy_at = take(size_t(T * D) * 4), row_token_at = take(size_t(R) * 4),
               row_weight_at = take(size_t(R) * 4), token_rows_at = take(size_t(R) * 4),
               w13_at = take(size_t(2 * n_slots) * sizeof(cuda::LinearLaunch)),
               w2_at = take(size_t(n_slots) * sizeof(cuda::LinearLaunch)), x_at = take(size_t(R * kx) * 4),
               a_at = take(size_t(R * I) * 4), b_at = take(size_t(R * I) * 4), h_at = take(size_t(R * k2) * 4),
               y_at = take(size_t(R * D) * 4), out_at = take(size_t(T * D) * 4);
  const int64_t HW = 4 * D, NC = cuda::kHcCoefficientFloats;  // the side's stream row and coefficients
  const bool has_side = side != nullptr, side_pre = has_side && side->p->collapse_pre, has_head = head != nullptr;
  DI_CHECK(has_side || !has_head);
  const size_t stream_at = has_side ? take(size_t(T * HW) * 4) : 0, mixes_at = has_side ? take(size_t(T * NC) * 4) : 0,
               coeffs_at = has_side ? take(size_t(T * NC) * 4) : 0, pre_at = side_pre ? take(size_t(T * 4) * 4) : 0,
               stream_out_at = has_side ? take(size_t(T * HW) * 4) : 0,
               head_h_at = has_head ? take(size_t(T * HW) * 4) : 0, head_coeffs_at = has_head ? take(size_t(T * NC) * 4) : 0;
  moe_scratch_.reserve(layout.bytes);
  // Host staging: u padded (or h, the head's coefficients where it has a head, and the collapse's pre), then the
  // hash rows; after the wait, the output (or h_out and the coefficients).
  const int64_t head_coeffs_in = T * HW, pre_in = head_coeffs_in + (has_head ? T * NC : 0);
  const int64_t in_floats = has_side ? pre_in + (side_pre ? T * 4 : 0) : T * kx;
  const int64_t out_floats = has_side ? T * (HW + NC) : T * D;
  moe_host_.reserve(size_t(std::max(in_floats + R, out_floats)) * 4);
  uint8_t* dev = moe_scratch_.get<uint8_t>();
  auto f32 = [&](size_t offset) { return reinterpret_cast<float*>(dev + offset); };
  auto i32 = [&](size_t offset) { return reinterpret_cast<int32_t*>(dev + offset); };
  auto ops = [&](size_t offset) { return reinterpret_cast<cuda::LinearLaunch*>(dev + offset); };

  float* in_host = moe_host_.get<float>();
  // A tail's output stream left on the device (BlockTailParams::keep_h_out); its attention-side stream where the
  // front kept it (MhcSideParams::h_kept): read there, not copied in (the same array where the block's stream
  // buffers take turns: the expansion reads it before the output lands there, in stream order).
  float* kept_out = has_head && head->p->keep_h_out ? keep_array(side->p->h_out, T * HW) : nullptr;
  // V4.1's pre (the coefficients' floats 0-3): kept on the device (BlockTailParams::keep_pre_out), or back.
  DI_CHECK_MSG(!(has_head && head->p->keep_pre_out) || side->p->pre_out, "block tail: keep_pre_out without a pre_out");
  float* kept_pre = has_head && head->p->keep_pre_out ? keep_array(side->p->pre_out, T * 4) : nullptr;
  const bool pre_back = has_side && side->p->pre_out && !kept_pre;
  const float* kept_head_h = has_head && head->p->attention.h_kept ? kept_at(head->p->attention.h, T * HW) : nullptr;
  if (has_side) {
    if (!kept_head_h) copy_on_threads(host_.get(), in_host, has_head ? head->p->attention.h : side->p->h, size_t(T * HW) * 4);
    if (has_head) std::memcpy(in_host + head_coeffs_in, head->p->attention_coeffs, size_t(T * NC) * 4);
    if (side_pre) std::memcpy(in_host + pre_in, side->p->collapse_pre, size_t(T * 4) * 4);
  } else {
    copy_rows(p.u, D, T, D, in_host, kx, kx);
  }
  auto* hash_host = reinterpret_cast<int32_t*>(in_host + in_floats);
  // The most rows an expert can get: one a token, but a hash row may name an expert more than once (the checkpoint
  // allows it), and each choice is a row. The grouped launches cover that many rows an op.
  int64_t repeats = 1;
  if (w.hash_routed) {
    for (int64_t t = 0; t < T; ++t) {
      int32_t* row = hash_host + t * K;
      for (int64_t i = 0; i < K; ++i) row[i] = int32_t(w.tid2eid[int64_t(p.token_ids[t]) * K + i]);
      for (int64_t i = 0; i < K; ++i) repeats = std::max<int64_t>(repeats, std::count(row, row + K, row[i]));
    }
  }
  const int64_t expert_rows = T * repeats;

  // The launches, all set up here: nothing below allocates or uploads, so that it can be captured.
  int64_t partial_floats = 0;
  auto lone = [&](const cuda::DeviceWeight& d, const float* x, int64_t n_rows, cuda::LinearEpilogue epilogue, float* out) {
    cuda::LinearLaunch l = launch_of(d);
    l.x = x;
    l.n_tokens = T;
    l.n_rows = n_rows;
    l.epilogue = epilogue;
    l.out = out;
    partial_floats = std::max(partial_floats, cuda::linear_mma_partial_floats(l, mma_choice_));
    return l;
  };
  // M1 (on u itself) and M7's w1 / w3 (on the QDQ'd u), then M7's w2.
  const cuda::LinearLaunch gate = lone(*block.gate, f32(u_at), E, cuda::LinearEpilogue::kSqrtSoftplus, f32(scores_at));
  const cuda::LinearLaunch shared_w1 = lone(*block.shared_w1, f32(uq_at), IS, cuda::LinearEpilogue::kBf16, f32(sa_at));
  const cuda::LinearLaunch shared_w3 = lone(*block.shared_w3, f32(uq_at), IS, cuda::LinearEpilogue::kBf16, f32(sb_at));
  const cuda::LinearLaunch shared_w2 = lone(*block.shared_w2, f32(sh_at), D, cuda::LinearEpilogue::kBf16, f32(sy_at));
  if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * 4);
  const cuda::ActQdqLaunch u_qdq{f32(u_at), kx, T, D, p.act_block, rule, f32(uq_at), kx, kx};
  const double shared_limit = p.v41 ? p.swiglu_limit : INFINITY;  // moe.cpp: V4 does not clamp the shared expert
  const cuda::SwigluQdqLaunch shared_swiglu{f32(sa_at), f32(sb_at), IS, T, IS, shared_limit, nullptr, p.act_block, rule,
                                            f32(sh_at), k2s, k2s};
  const cuda::SwigluQdqLaunch routed_swiglu{f32(a_at), f32(b_at), I, R, I, p.swiglu_limit, f32(row_weight_at), p.act_block,
                                            rule, f32(h_at), k2, k2};
  const cuda::MoeCombineLaunch combine{f32(y_at), i32(token_rows_at), f32(sy_at), T, K, D, f32(out_at)};
  // M2 / M3 and the plan of the routed rows.
  cuda::MoeRouteLaunch route;
  route.scores = f32(scores_at);
  route.bias = block.gate_bias;
  route.hash_chosen = i32(hash_at);
  route.n_tokens = T;
  route.n_experts = E;
  route.top_k = K;
  route.v41 = p.v41;
  route.route_scale = p.route_scale;
  route.row_token = i32(row_token_at);
  route.row_weight = f32(row_weight_at);
  route.token_rows = i32(token_rows_at);
  const auto* templates = block.templates.get<cuda::LinearLaunch>();
  route.w1 = templates;
  route.w3 = templates + E;
  route.w2 = templates + 2 * E;
  route.n_slots = n_slots;
  route.w13_ops = ops(w13_at);
  route.w2_ops = ops(w2_at);
  route.x_rows = f32(x_at);
  route.x_stride = kx;
  route.a = f32(a_at);
  route.b = f32(b_at);
  route.inter = I;
  route.h_rows = f32(h_at);
  route.h_stride = k2;
  route.y = f32(y_at);
  route.dim = D;

  cuda::HcPreLaunch pre;
  cuda::HcPostLaunch post;
  if (has_side) {
    pre = hc_pre_launch(*side, f32(stream_at), f32(mixes_at), side_pre ? f32(pre_at) : nullptr, f32(coeffs_at), f32(u_at), kx);
    post = {f32(stream_at), f32(out_at), D, f32(coeffs_at), T, D, f32(stream_out_at)};
  }

  auto enqueue = [&] {
    if (has_head) {  // the output chain, then the attention side's P1 / P2 into the FFN side's h
      if (!kept_head_h) DI_CUDA_CHECK(cudaMemcpyAsync(f32(head_h_at), in_host, size_t(T * HW) * 4, cudaMemcpyHostToDevice, stream_));
      DI_CUDA_CHECK(cudaMemcpyAsync(f32(head_coeffs_at), in_host + head_coeffs_in, size_t(T * NC) * 4, cudaMemcpyHostToDevice,
                                    stream_));
      enqueue_output_chain(*head->chain);
      cuda::launch_hc_post({kept_head_h ? kept_head_h : f32(head_h_at), head->chain->y, head->chain->n_out, f32(head_coeffs_at), T,
                            D, f32(stream_at)},
                           stream_);
    }
    if (has_side) {  // B1-B8 into u
      const MhcWeights& m = side->p->mhc;
      if (!has_head) DI_CUDA_CHECK(cudaMemcpyAsync(f32(stream_at), in_host, size_t(T * HW) * 4, cudaMemcpyHostToDevice, stream_));
      if (side_pre) DI_CUDA_CHECK(cudaMemcpyAsync(f32(pre_at), in_host + pre_in, size_t(T * 4) * 4, cudaMemcpyHostToDevice, stream_));
      cuda::launch_hc_mix({f32(stream_at), T, HW, side->fn, m.n_mix, m.eps, f32(mixes_at)}, stream_);
      cuda::launch_hc_pre(pre, stream_);
    } else {
      DI_CUDA_CHECK(cudaMemcpyAsync(f32(u_at), in_host, size_t(T * kx) * 4, cudaMemcpyHostToDevice, stream_));
    }
    if (w.hash_routed) DI_CUDA_CHECK(cudaMemcpyAsync(i32(hash_at), hash_host, size_t(R) * 4, cudaMemcpyHostToDevice, stream_));
    cuda::launch_act_qdq(u_qdq, stream_);
    launch_lone_mma(gate);
    launch_lone_mma(shared_w1);
    launch_lone_mma(shared_w3);
    cuda::launch_swiglu_qdq(shared_swiglu, stream_);
    launch_lone_mma(shared_w2);
    cuda::launch_moe_route(route, stream_);
    cuda::launch_gather_rows(f32(uq_at), kx, i32(row_token_at), R, kx, f32(x_at), kx, stream_);
    cuda::launch_linear_mma_grouped(ops(w13_at), int(2 * n_slots), block.expert_kind, kx, I, expert_rows, stream_, mma_choice_);
    cuda::launch_swiglu_qdq(routed_swiglu, stream_);
    cuda::launch_linear_mma_grouped(ops(w2_at), int(n_slots), block.expert_kind, k2, D, expert_rows, stream_, mma_choice_);
    cuda::launch_moe_combine(combine, stream_);
    if (has_side) {  // P2, then h_out and the coefficients back
      cuda::launch_hc_post(post, stream_);
      if (kept_out) {
        DI_CUDA_CHECK(cudaMemcpyAsync(kept_out, f32(stream_out_at), size_t(T * HW) * 4, cudaMemcpyDeviceToDevice, stream_));
      } else {
        DI_CUDA_CHECK(cudaMemcpyAsync(in_host, f32(stream_out_at), size_t(T * HW) * 4, cudaMemcpyDeviceToHost, stream_));
      }
      if (pre_back) DI_CUDA_CHECK(cudaMemcpyAsync(in_host + T * HW, f32(coeffs_at), size_t(T * NC) * 4, cudaMemcpyDeviceToHost, stream_));
      if (kept_pre) {
        DI_CUDA_CHECK(cudaMemcpy2DAsync(kept_pre, 4 * 4, f32(coeffs_at), size_t(NC) * 4, 4 * 4, size_t(T), cudaMemcpyDeviceToDevice,
                                        stream_));
      }
    } else {
      DI_CUDA_CHECK(cudaMemcpyAsync(in_host, f32(out_at), size_t(T * D) * 4, cudaMemcpyDeviceToHost, stream_));
    }
  };
  // Keyed by what the captured work depends on besides the buffers: the block, the token count and the most rows of
  // an expert, the rules and constants its launches hold (the QDQ's, the SwiGLU's limit, the route scale), the side,
  // and the head's output chain (whose scratch and staging are the chain's).
  GraphKey key = {has_head ? kTailGraph : kMoeGraph, word(&w), T, expert_rows, word(kept_head_h != nullptr),
                  word(kept_out != nullptr), word(pre_back), word(kept_pre != nullptr), word(p.v41), p.act_block,
                  word(p.swiglu_limit), word(p.route_scale)};
  if (has_side) add_side_words(*side->p, key);
  if (has_head) add_output_chain_words(head->p->output, key);
  if (graphs_) {
    std::vector<const void*> buffers = {moe_scratch_.get(), moe_host_.get(), partials_.get()};
    if (has_head) {
      buffers.insert(buffers.end(), {chain_scratch_.get(), chain_host_.get(), kept_head_h, kept_out, kept_pre});
      buffers.insert(buffers.end(), head->chain->kept_x.begin(), head->chain->kept_x.end());
    }
    run_as_graph(key, std::move(buffers), enqueue);
  } else {
    enqueue();
  }
  if (kept_out && !pre_back) {  // nothing comes back: the next block's front queues behind this without a wait
    tail_staging_.queued(stream_);
    return;
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!has_side) {
    copy_on_threads(host_.get(), p.out, in_host, size_t(T * D) * 4);
    return;
  }
  if (!kept_out) copy_on_threads(host_.get(), side->p->h_out, in_host, size_t(T * HW) * 4);
  if (pre_back) {
    for (int64_t t = 0; t < T; ++t) std::memcpy(side->p->pre_out + t * 4, in_host + T * HW + t * NC, 4 * 4);  // pre: floats 0-3
  }
}

void CudaBackend::add_side_words(const MhcSideParams& side, GraphKey& key) {
  const MhcWeights& m = side.mhc;
  for (int64_t w : {word(m.fn), word(m.scale), word(m.base), word(m.norm), m.n_mix, int64_t(m.sinkhorn_iters), word(m.eps),
                    word(m.hc_eps), word(side.collapse_pre != nullptr), side.dim}) {
    key.push_back(w);
  }
}

void CudaBackend::add_output_chain_words(const LinearChainParams& p, GraphKey& key) {
  // (A kept x is copied with its stride: the first op's, which every op shares then.)
  for (int64_t w : {p.n_tokens, p.mid_width, p.qdq_block, word(p.v41), word(p.x_kept), p.first[0].x_stride}) key.push_back(w);
  for (const LinearParams& op : p.first) {
    for (int64_t w : {word(op.weight), op.row_begin, op.n_rows, int64_t(op.epilogue), int64_t(op.out - p.mid)}) key.push_back(w);
  }
  for (int64_t w : {word(p.second.weight), p.second.row_begin, p.second.n_rows, int64_t(p.second.epilogue)}) key.push_back(w);
}

}  // namespace deepinfer
