// The CUDA backend's head calls (CudaBackend, cuda_backend.h): the head linear with its draws on the device
// (greedy and plain temperature draws bring back one id a token, top-k and nucleus draws their candidates), and the
// whole head where the stream stayed on the device.
#include "backend/cuda/cuda_backend.h"

namespace deepinfer {

static_assert(cuda::kRowTopKMax >= kNucleusCandidates, "the top-k kernel finds a nucleus draw's first candidates");

namespace {
// Whether the device draws every one of the rows (width wide): none wider than the draw kernel takes, no top-k or
// log-probabilities' candidates past the top-k kernel's, and every row's candidates at a 32-bit offset.
bool draws_fit(std::span<const TokenDraw> draws, int64_t width) {
  if (width > cuda::kRowDrawMaxWidth || int64_t(draws.size()) >= (int64_t(1) << 31) / cuda::kRowTopKMax) return false;
  for (const TokenDraw& d : draws) {
    if (draws_top_k(d, width) && d.top_k > cuda::kRowTopKMax) return false;
    if (d.logprobs >= 0 && logprob_candidates(d.logprobs, width) > cuda::kRowTopKMax) return false;
  }
  return true;
}

// A row's candidates as the device packed them (DeviceTokenDraw::candidates_at, top_k of them), as the host's
// DrawCandidates in `out`.
void read_candidates(const cuda::DeviceDrawCandidate* packed, const cuda::DeviceTokenDraw& draw,
                     std::vector<DrawCandidate>& out) {
  out.clear();
  for (int32_t j = 0; j < draw.top_k; ++j) {
    const cuda::DeviceDrawCandidate& c = packed[draw.candidates_at + j];
    out.emplace_back(c.value, c.id);
  }
}
}  // namespace

bool CudaBackend::linear_draws(const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> draws,
                               int32_t* drawn, TokenLogprob* logprobs) {
  DI_CHECK(int64_t(keep_out.size()) == p.n_tokens && int64_t(draws.size()) == p.n_tokens);
  if (p.n_tokens == 0 || p.n_rows == 0 || !draws_fit(draws, p.n_rows) || host_experts_.count(p.weight->data)) return false;
  bind_device();
  DI_CHECK(enqueue_linears({&p, 1}, /*copy_outputs=*/false));
  const LinearBatchLayout::Place& at = layout_.places()[0];
  bring_back_head(p, reinterpret_cast<float*>(batch_.get<uint8_t>() + at.out), staging_.get<uint8_t>() + at.out,
                  keep_out, draws, drawn, logprobs);
  return true;
}

bool CudaBackend::head_on_kept_stream(const HeadRowsParams& r, const LinearParams& head, std::span<const uint8_t> keep_out,
                                      std::span<const TokenDraw> draws, int32_t* drawn, TokenLogprob* logprobs) {
  const int64_t T = int64_t(r.rows.size()), D = r.dim;
  DI_CHECK(int64_t(keep_out.size()) == T && head.n_tokens == T && (!drawn || int64_t(draws.size()) == T));
  if (drawn && !draws_fit(draws, head.n_rows)) return false;
  // (A lone linear launch takes at most 8 x 65535 tokens.)
  if (!device_chain_ || T == 0 || T > 8 * int64_t(kMaxGridYZ) || D > cuda::kHcPreMaxDim || host_experts_.count(head.weight->data)) {
    return false;
  }
  bind_device();
  const cuda::DeviceWeight& w = weights_.get(*head.weight, stream_);
  if (takes_fp8_path(head, w)) return false;
  DI_CHECK_MSG(w.n_in == D && head.row_begin == 0 && head.n_rows == w.n_out && head.epilogue == Epilogue::kF32,
               "head on the kept stream: the op is not the head's fp32 linear over dim");
  DI_CHECK_MSG((r.hc_fn != nullptr) != (r.pre != nullptr), "head on the kept stream: V4's mixes or V4.1's pre, one of them");
  DI_CHECK(r.n_stream_tokens < (int64_t(1) << 31));
  for (const int64_t t : r.rows) DI_CHECK_MSG(t >= 0 && t < r.n_stream_tokens, "head on the kept stream: a row outside the stream");
  const float* h = kept_at(r.h, r.n_stream_tokens * 4 * D);
  const float* pre = r.pre ? kept_at(r.pre, r.n_stream_tokens * 4) : nullptr;
  const float* norm = weights_.bf16_constant(r.norm, D, stream_);
  // Scratch: the rows' tokens, their streams and pre (where the rows are not one run of the stream's tokens: a decode
  // step's are, every token of the pass in order), V4's mixes, y [T, k_pad]; the outputs [T, n_out] in batch_, which
  // linears() grows to that size too (the host's head path).
  bool one_run = true;
  for (int64_t i = 1; i < T; ++i) one_run = one_run && r.rows[size_t(i)] == r.rows[0] + i;
  if (!one_run && T > int64_t(kMaxGridYZ)) return false;  // (the gather's launch takes a row a grid row)
  ScratchLayout layout;
  const size_t at_rows = layout.take(one_run ? 0 : size_t(T) * 4), at_h = layout.take(one_run ? 0 : size_t(T * 4 * D) * 4),
               at_pre = layout.take(one_run || !pre ? 0 : size_t(T) * 4 * 4),
               at_mix = layout.take(r.hc_fn ? size_t(T) * 4 * 4 : 0), at_y = layout.take(size_t(T * w.k_pad) * 4);
  head_scratch_.reserve(layout.bytes);
  batch_.reserve(size_t(T * w.n_out) * 4);
  staging_.reserve(size_t(T * w.n_out) * 4);
  uint8_t* base = head_scratch_.get<uint8_t>();
  const float* h_rows = h + r.rows[0] * 4 * D;
  const float* pre_rows = pre ? pre + r.rows[0] * 4 : nullptr;
  if (!one_run) {  // the MoE's row gather (moe_kernels.cu), by 32-bit indices: the stream's tokens
    auto* rows = reinterpret_cast<int32_t*>(base + at_rows);
    head_rows_host_.reserve(size_t(T) * 4);
    auto* rows_host = head_rows_host_.get<int32_t>();
    for (int64_t i = 0; i < T; ++i) rows_host[i] = int32_t(r.rows[size_t(i)]);
    DI_CUDA_CHECK(cudaMemcpyAsync(rows, rows_host, size_t(T) * 4, cudaMemcpyHostToDevice, stream_));
    auto* gathered_h = reinterpret_cast<float*>(base + at_h);
    cuda::launch_gather_rows(h, 4 * D, rows, T, 4 * D, gathered_h, 4 * D, stream_);
    h_rows = gathered_h;
    if (pre) {
      auto* gathered_pre = reinterpret_cast<float*>(base + at_pre);
      cuda::launch_gather_rows(pre, 4, rows, T, 4, gathered_pre, 4, stream_);
      pre_rows = gathered_pre;
    }
  }
  auto* mixes = reinterpret_cast<float*>(base + at_mix);
  auto* y = reinterpret_cast<float*>(base + at_y);
  float* out = batch_.get<float>();
  const cuda::LinearLaunch l = launch_of(w, head, y, out);
  const bool mma = tensor_core_linear_ && w.mma_exact;
  if (mma) partials_.reserve(size_t(cuda::linear_mma_partial_floats(l, mma_choice_)) * 4);  // (before any work is queued)
  cuda::HcPreLaunch hp{.h = h_rows, .n_tokens = T, .dim = D, .norm = norm, .eps = r.eps, .hc_eps = r.hc_eps, .u = y,
                       .u_stride = w.k_pad};
  if (r.hc_fn) {  // V4: H1, then H2-H4
    const float* fn = weights_.constant(r.hc_fn, 4 * 4 * D, stream_);
    cuda::launch_hc_mix({h_rows, T, 4 * D, fn, 4, r.eps, mixes}, stream_);
    hp.mixes = mixes;
    hp.head_pre = true;
    hp.scale = weights_.constant(r.hc_scale, 1, stream_);
    hp.base = weights_.constant(r.hc_base, 4, stream_);
  } else {  // V4.1: step 43 with the kept pre
    hp.collapse_pre = pre_rows;
  }
  cuda::launch_hc_pre(hp, stream_);
  if (mma) {
    launch_lone_mma(l);
  } else {
    cuda::launch_linear(l, stream_);
  }
  bring_back_head(head, out, staging_.get<uint8_t>(), keep_out, draws, drawn, logprobs);
  return true;
}

void CudaBackend::edit_and_mask_rows(const LinearParams& p, float* out_dev, std::span<const uint8_t> keep_out,
                                     std::span<const TokenDraw> draws, bool originals) {
  size_t n_edits = 0;
  int32_t n_masks = 0;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const TokenDraw& d = draws[size_t(t)];
    DI_CHECK_MSG((d.edits.empty() && d.allowed.empty()) || !keep_out[size_t(t)],
                 "linear_draws: a row with logit edits or a mask is kept too");
    DI_CHECK_MSG(d.allowed.empty() || int64_t(d.allowed.size()) == p.n_rows, "linear_draws: a mask not as wide as the row");
    n_edits += d.edits.size();
    n_masks += !d.allowed.empty();
  }
  if (n_edits > 0) {
    DI_CHECK(n_edits < (size_t(1) << 31));
    edits_host_.reserve(n_edits * sizeof(cuda::DeviceLogitEdit));
    edits_dev_.reserve(n_edits * sizeof(cuda::DeviceLogitEdit));
    edits_at_host_.reserve(size_t(p.n_tokens + 1) * sizeof(int32_t));
    edits_at_dev_.reserve(size_t(p.n_tokens + 1) * sizeof(int32_t));
    auto* edits = edits_host_.get<cuda::DeviceLogitEdit>();
    auto* at = edits_at_host_.get<int32_t>();
    int32_t k = 0;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      at[t] = k;
      for (const LogitEdit& e : draws[size_t(t)].edits) edits[k++] = {e.id, e.divide, e.subtract};
    }
    at[p.n_tokens] = k;
    DI_CUDA_CHECK(cudaMemcpyAsync(edits_dev_.get(), edits, n_edits * sizeof(cuda::DeviceLogitEdit),
                                  cudaMemcpyHostToDevice, stream_));
    DI_CUDA_CHECK(cudaMemcpyAsync(edits_at_dev_.get(), at, size_t(p.n_tokens + 1) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    float* originals_dev = nullptr;
    if (originals) {
      logprob_.originals.reserve(n_edits * sizeof(float));
      logprob_.originals_host.reserve(n_edits * sizeof(float));
      originals_dev = logprob_.originals.get<float>();
    }
    cuda::launch_logit_edits(out_dev, p.n_tokens, p.n_rows, p.n_rows, edits_dev_.get<cuda::DeviceLogitEdit>(),
                             edits_at_dev_.get<int32_t>(), originals_dev, stream_);
    if (originals) {
      DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.originals_host.get(), originals_dev, n_edits * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
    }
  }
  if (n_masks > 0) {  // (after the edits, as draw_token makes them)
    const int64_t words = (p.n_rows + 31) / 32;
    const size_t bytes = size_t(n_masks) * size_t(words) * sizeof(uint32_t);
    masks_host_.reserve(bytes);
    masks_dev_.reserve(bytes);
    mask_of_host_.reserve(size_t(p.n_tokens) * sizeof(int32_t));
    mask_of_dev_.reserve(size_t(p.n_tokens) * sizeof(int32_t));
    auto* mask_of = mask_of_host_.get<int32_t>();
    int32_t m = 0;
    for (int64_t t = 0; t < p.n_tokens; ++t) mask_of[t] = draws[size_t(t)].allowed.empty() ? -1 : m++;
    auto* bits = masks_host_.get<uint32_t>();
    host_->for_rows(p.n_tokens, [&](int64_t t0, int64_t t1) {  // (a mask is a pass over the vocabulary: ~0.1 ms)
      for (int64_t t = t0; t < t1; ++t) {
        if (mask_of[t] < 0) continue;
        const std::span<const uint8_t> allowed = draws[size_t(t)].allowed;
        uint32_t* row_bits = bits + int64_t(mask_of[t]) * words;
        std::fill(row_bits, row_bits + words, 0u);
        for (int64_t i = 0; i < p.n_rows; ++i) row_bits[i >> 5] |= uint32_t(allowed[size_t(i)] != 0) << (i & 31);
      }
    });
    DI_CUDA_CHECK(cudaMemcpyAsync(masks_dev_.get(), bits, bytes, cudaMemcpyHostToDevice, stream_));
    DI_CUDA_CHECK(cudaMemcpyAsync(mask_of_dev_.get(), mask_of, size_t(p.n_tokens) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    cuda::launch_logit_masks(out_dev, p.n_tokens, p.n_rows, p.n_rows, masks_dev_.get<uint32_t>(),
                             mask_of_dev_.get<int32_t>(), stream_);
  }
}

bool CudaBackend::queue_logprob_pass(const LinearParams& p, const float* out_dev, std::span<const TokenDraw> draws) {
  int max_k = 0;
  for (const TokenDraw& d : draws) {
    if (d.logprobs >= 0) max_k = std::max(max_k, int(logprob_candidates(d.logprobs, p.n_rows)));
  }
  if (max_k == 0) return false;
  const size_t n = size_t(p.n_tokens);
  logprob_.draws.reserve(n * sizeof(cuda::DeviceTokenDraw));
  logprob_.draws_host.reserve(n * sizeof(cuda::DeviceTokenDraw));
  logprob_.drawn.reserve(n * sizeof(int32_t));
  logprob_.drawn_host.reserve(n * sizeof(int32_t));
  logprob_.totals.reserve(n * sizeof(double));
  logprob_.totals_host.reserve(n * sizeof(double));
  auto* host = logprob_.draws_host.get<cuda::DeviceTokenDraw>();
  int64_t n_candidates = 0;
  for (size_t t = 0; t < n; ++t) {  // the plain draw at temperature 1: its total (a nucleus row's), and candidates
    const int32_t top_n = draws[t].logprobs;
    const int32_t k = top_n < 0 ? 0 : int32_t(logprob_candidates(top_n, p.n_rows));
    host[t] = top_n < 0 ? cuda::DeviceTokenDraw{.skip = 1}
                        : cuda::DeviceTokenDraw{.temperature = 1.0f, .top_k = k, .nucleus = 1,
                                                .candidates_at = int32_t(n_candidates)};
    n_candidates += k;
  }
  const size_t candidate_bytes = size_t(n_candidates) * sizeof(cuda::DeviceDrawCandidate);
  logprob_.candidates.reserve(candidate_bytes);
  logprob_.candidates_host.reserve(candidate_bytes);
  const auto* pass = logprob_.draws.get<cuda::DeviceTokenDraw>();
  DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.draws.get(), host, n * sizeof(cuda::DeviceTokenDraw), cudaMemcpyHostToDevice, stream_));
  cuda::launch_row_draws(out_dev, p.n_tokens, p.n_rows, p.n_rows, pass, logprob_.drawn.get<int32_t>(),
                         logprob_.totals.get<double>(), row_draw_scratch(p.n_tokens, p.n_rows), stream_);
  cuda::launch_row_top_k(out_dev, p.n_tokens, p.n_rows, p.n_rows, pass, max_k,
                         logprob_.candidates.get<cuda::DeviceDrawCandidate>(), row_top_k_scratch(p.n_tokens, p.n_rows),
                         stream_);
  DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.drawn_host.get(), logprob_.drawn.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.totals_host.get(), logprob_.totals.get(), n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.candidates_host.get(), logprob_.candidates.get(), candidate_bytes,
                                cudaMemcpyDeviceToHost, stream_));
  return true;
}

// Sized for the most rows and candidates a split launch takes (for V4's vocabulary ~0.7 MB and ~10 MB on 132 SMs), so
// that the buffers never grow, and so never wait for the device, between one call's launches or from step to step.
void* CudaBackend::split_draw_scratch(DeviceBuffer& buffer, size_t bytes, int64_t n_rows) {
  if (!split_row_draws_ || n_rows >= sm_count_) return nullptr;
  ++split_row_draw_launches_;
  buffer.reserve(bytes);
  return buffer.get();
}

void* CudaBackend::row_draw_scratch(int64_t n_rows, int64_t width) {
  return split_draw_scratch(row_draw_scratch_, cuda::row_draw_split_scratch_bytes(sm_count_, width), n_rows);
}

void* CudaBackend::row_top_k_scratch(int64_t n_rows, int64_t width) {
  return split_draw_scratch(row_top_k_scratch_, cuda::row_top_k_split_scratch_bytes(sm_count_, width, cuda::kRowTopKMax),
                            n_rows);
}

void CudaBackend::queue_drawn_logits(const LinearParams& p, const float* out_dev, const cuda::DeviceTokenDraw* device_draws,
                                     int64_t n_candidates) {
  const size_t n = size_t(p.n_tokens), n_logits = device_draws ? size_t(n_candidates) : 0;
  logprob_.drawn_logits.reserve(n * sizeof(float));
  logprob_.drawn_logits_host.reserve(n * sizeof(float));
  logprob_.candidate_logits.reserve(std::max<size_t>(n_logits, 1) * sizeof(float));
  logprob_.candidate_logits_host.reserve(std::max<size_t>(n_logits, 1) * sizeof(float));
  cuda::launch_drawn_logits(out_dev, p.n_tokens, p.n_rows, logprob_.draws.get<cuda::DeviceTokenDraw>(),
                            drawn_dev_.get<int32_t>(), device_draws, candidates_dev_.get<cuda::DeviceDrawCandidate>(),
                            logprob_.drawn_logits.get<float>(), logprob_.candidate_logits.get<float>(), stream_);
  DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.drawn_logits_host.get(), logprob_.drawn_logits.get(), n * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  if (n_logits > 0) {
    DI_CUDA_CHECK(cudaMemcpyAsync(logprob_.candidate_logits_host.get(), logprob_.candidate_logits.get(),
                                  n_logits * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
}

void CudaBackend::finish_logprobs(const LinearParams& p, const uint8_t* out_host, std::span<const TokenDraw> draws,
                                  const int32_t* drawn, bool has_candidates, std::span<const uint8_t> came_back,
                                  TokenLogprob* logprobs) {
  const auto* device_drawn = drawn_host_.get<int32_t>();  // (the device's answers, before the host's draws)
  const auto* drawn_logits = logprob_.drawn_logits_host.get<float>();
  const auto* candidate_logits = logprob_.candidate_logits_host.get<float>();
  const auto* candidates = candidates_host_.get<cuda::DeviceDrawCandidate>();
  const auto* host_draws = draws_host_.get<cuda::DeviceTokenDraw>();
  const auto* pass = logprob_.draws_host.get<cuda::DeviceTokenDraw>();
  const auto* pass_drawn = logprob_.drawn_host.get<int32_t>();
  const auto* totals = logprob_.totals_host.get<double>();
  const auto* best_candidates = logprob_.candidates_host.get<cuda::DeviceDrawCandidate>();
  const auto* originals = logprob_.originals_host.get<float>();
  const auto* edits_at = edits_at_host_.get<int32_t>();
  host_->for_rows(p.n_tokens, [&](int64_t t0, int64_t t1) {
    std::vector<DrawCandidate> best;
    for (int64_t t = t0; t < t1; ++t) {
      const TokenDraw& d = draws[size_t(t)];
      if (d.logprobs < 0) continue;
      // The chosen id's logit, as edited and masked (an allowed id is never masked): where the device drew it, at its
      // draw; else among the candidates the host drew it from; else in the row that came back. An edited id's is its
      // original (edit_and_mask_rows kept it).
      const int32_t chosen = drawn[t];
      DI_CHECK(chosen >= 0 && chosen < p.n_rows);
      float chosen_logit = 0.0f;
      bool found = device_drawn[t] == chosen;
      if (found) chosen_logit = drawn_logits[t];
      for (int32_t j = 0; !found && has_candidates && j < host_draws[t].top_k; ++j) {
        const int32_t at = host_draws[t].candidates_at + j;
        if (candidates[at].id == chosen) {
          chosen_logit = candidate_logits[at];
          found = true;
        }
      }
      if (!found) {
        DI_CHECK_MSG(came_back[size_t(t)], "log-probabilities: the drawn id's logit is nowhere the device sent back");
        chosen_logit = reinterpret_cast<const float*>(out_host + size_t(t) * size_t(p.n_rows) * sizeof(float))[chosen];
      }
      for (size_t j = 0; j < d.edits.size(); ++j) {
        if (d.edits[j].id == chosen) chosen_logit = originals[edits_at[t] + int64_t(j)];
      }
      read_candidates(best_candidates, pass[t], best);
      // (the pass's answer is -1 with the total where the best is finite, else the argmax: the total is not read)
      logprobs_from_best(best, pass_drawn[t] < 0 ? totals[t] : 0.0, chosen, chosen_logit, d.logprobs, logprobs[t]);
    }
  });
}

void CudaBackend::bring_back_head(const LinearParams& p, float* out_dev, uint8_t* out_host, std::span<const uint8_t> keep_out,
                                  std::span<const TokenDraw> draws, int32_t* drawn, TokenLogprob* logprobs) {
  const size_t row_bytes = size_t(p.n_rows) * sizeof(float);
  const auto* out_bytes = reinterpret_cast<const uint8_t*>(out_dev);
  int max_top_k = 0;  // the most candidates a row's draw wants (0: none)
  int64_t n_candidates = 0;  // all rows' (one row's after another's: DeviceTokenDraw::candidates_at)
  bool any_logprobs = false;  // (a row asking for log-probabilities)
  const int nucleus_k = int(std::min(kNucleusCandidates, p.n_rows));
  bool nucleus = false;  // (a row with a nucleus draw)
  auto candidates_of = [&](const TokenDraw& d) {
    return draws_top_k(d, p.n_rows) ? d.top_k : draws_nucleus(d, p.n_rows) ? nucleus_k : 0;
  };
  if (drawn) {
    drawn_dev_.reserve(size_t(p.n_tokens) * sizeof(int32_t));
    drawn_host_.reserve(size_t(p.n_tokens) * sizeof(int32_t));
    bool sampled = false;  // (greedy rows alone need no draws on the device)
    for (const TokenDraw& d : draws) {
      sampled = sampled || d.temperature > 0.0f;
      max_top_k = std::max(max_top_k, candidates_of(d));
      nucleus = nucleus || draws_nucleus(d, p.n_rows);
    }
    DI_CHECK(max_top_k <= cuda::kRowTopKMax);  // (the callers decline wider ones: draws_fit)
    const cuda::DeviceTokenDraw* device_draws = nullptr;
    if (sampled) {  // (the pinned copy is free again: every call here ends in the stream's wait)
      const size_t bytes = size_t(p.n_tokens) * sizeof(cuda::DeviceTokenDraw);
      draws_dev_.reserve(bytes);
      draws_host_.reserve(bytes);
      auto* host = draws_host_.get<cuda::DeviceTokenDraw>();
      for (int64_t t = 0; t < p.n_tokens; ++t) {
        const TokenDraw& d = draws[size_t(t)];
        host[t] = {.uniform = d.uniform,
                   .temperature = d.temperature,
                   .top_k = candidates_of(d),
                   .nucleus = draws_nucleus(d, p.n_rows),
                   .candidates_at = int32_t(n_candidates)};
        n_candidates += candidates_of(d);
      }
      DI_CUDA_CHECK(cudaMemcpyAsync(draws_dev_.get(), host, bytes, cudaMemcpyHostToDevice, stream_));
      device_draws = draws_dev_.get<cuda::DeviceTokenDraw>();
    }
    any_logprobs = queue_logprob_pass(p, out_dev, draws);  // (before the edits and masks: over the model's logits)
    DI_CHECK(!any_logprobs || logprobs);
    edit_and_mask_rows(p, out_dev, keep_out, draws, /*originals=*/any_logprobs);
    if (nucleus) {
      totals_dev_.reserve(size_t(p.n_tokens) * sizeof(double));
      totals_host_.reserve(size_t(p.n_tokens) * sizeof(double));
    }
    // Top-k and nucleus rows: their candidates come back, and in drawn the argmax (a top-k row's fallback) or -1 with
    // the total (a nucleus row's); the host draws from them below.
    cuda::launch_row_draws(out_dev, p.n_tokens, p.n_rows, p.n_rows, device_draws, drawn_dev_.get<int32_t>(),
                           nucleus ? totals_dev_.get<double>() : nullptr, row_draw_scratch(p.n_tokens, p.n_rows), stream_);
    DI_CUDA_CHECK(cudaMemcpyAsync(drawn_host_.get(), drawn_dev_.get(), size_t(p.n_tokens) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream_));
    if (nucleus) {
      DI_CUDA_CHECK(cudaMemcpyAsync(totals_host_.get(), totals_dev_.get(), size_t(p.n_tokens) * sizeof(double),
                                    cudaMemcpyDeviceToHost, stream_));
    }
    if (max_top_k > 0) {  // (only the rows with candidates take room: one nucleus row among 256 brings back 8 KB, not 2 MB)
      const size_t bytes = size_t(n_candidates) * sizeof(cuda::DeviceDrawCandidate);
      candidates_dev_.reserve(bytes);
      candidates_host_.reserve(bytes);
      cuda::launch_row_top_k(out_dev, p.n_tokens, p.n_rows, p.n_rows, device_draws, max_top_k,
                             candidates_dev_.get<cuda::DeviceDrawCandidate>(),
                             row_top_k_scratch(p.n_tokens, p.n_rows), stream_);
      DI_CUDA_CHECK(cudaMemcpyAsync(candidates_host_.get(), candidates_dev_.get(), bytes, cudaMemcpyDeviceToHost, stream_));
    }
    if (any_logprobs) queue_drawn_logits(p, out_dev, max_top_k > 0 ? device_draws : nullptr, n_candidates);
  }
  // The kept tokens' rows, a run of consecutive ones a copy, to their places in the pinned mirror.
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, end)
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    if (!keep_out[size_t(t)]) continue;
    if (!runs.empty() && runs.back().second == t) ++runs.back().second;
    else runs.emplace_back(t, t + 1);
  }
  for (const auto& [t0, t1] : runs) {
    DI_CUDA_CHECK(cudaMemcpyAsync(out_host + size_t(t0) * row_bytes, out_bytes + size_t(t0) * row_bytes,
                                  size_t(t1 - t0) * row_bytes, cudaMemcpyDeviceToHost, stream_));
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (drawn) {
    std::memcpy(drawn, drawn_host_.get(), size_t(p.n_tokens) * sizeof(int32_t));
    std::vector<uint8_t> needs_logits(size_t(p.n_tokens), 0);  // nucleus rows whose cut lies past their candidates
    if (max_top_k > 0) {
      const auto* candidates = candidates_host_.get<cuda::DeviceDrawCandidate>();
      const auto* host_draws = draws_host_.get<cuda::DeviceTokenDraw>();  // (each row's candidates_at)
      const auto* totals = totals_host_.get<double>();
      host_->for_rows(p.n_tokens, [&](int64_t t0, int64_t t1) {
        thread_local std::vector<DrawCandidate> row;  // (kept from step to step)
        for (int64_t t = t0; t < t1; ++t) {
          const TokenDraw& d = draws[size_t(t)];
          const int k = candidates_of(d);
          if (k == 0 || (draws_nucleus(d, p.n_rows) && drawn[t] >= 0)) continue;  // (a nucleus row's argmax: drawn)
          read_candidates(candidates, host_draws[t], row);  // (its top_k: k)
          if (draws_top_k(d, p.n_rows)) {
            drawn[t] = draw_from_top_k(row, d, drawn[t]);
          } else {
            drawn[t] = draw_from_nucleus(row, k == p.n_rows, totals[t], d);
            needs_logits[size_t(t)] = drawn[t] < 0;
          }
        }
      });
      // Those rows' logits come back, and the host draws them (a row sits in its token's place in the pinned mirror).
      bool any = false;
      for (int64_t t = 0; t < p.n_tokens; ++t) {
        if (!needs_logits[size_t(t)]) continue;
        any = true;
        DI_CUDA_CHECK(cudaMemcpyAsync(out_host + size_t(t) * row_bytes, out_bytes + size_t(t) * row_bytes, row_bytes,
                                      cudaMemcpyDeviceToHost, stream_));
      }
      if (any) {
        draws_with_logits_back_ += std::count(needs_logits.begin(), needs_logits.end(), uint8_t(1));
        DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
        host_->for_rows(p.n_tokens, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            if (!needs_logits[size_t(t)]) continue;
            const auto* row = reinterpret_cast<const float*>(out_host + size_t(t) * row_bytes);
            TokenDraw edited = draws[size_t(t)];
            edited.edits = {};  // (the row came back with its edits and mask made)
            edited.allowed = {};
            drawn[t] = draw_token(row, p.n_rows, edited);
          }
        });
      }
    }
    if (any_logprobs) finish_logprobs(p, out_host, draws, drawn, max_top_k > 0, needs_logits, logprobs);
  }
  for (const auto& [t0, t1] : runs) {
    copy_rows_on_threads(host_.get(), reinterpret_cast<const float*>(out_host) + t0 * p.n_rows, p.n_rows, t1 - t0, p.n_rows,
                         p.out + t0 * p.out_stride, p.out_stride, p.n_rows);
  }
}

}  // namespace deepinfer
