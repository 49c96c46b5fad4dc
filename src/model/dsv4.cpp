// V4 top level: loading, embedding, the block loop with two-pass mHC, the head and the MTP layer
// (spec §3.1, §3.2, §3.8; golden op table E1, B1-B8, P1-P2, H1-H5, T1-T6).
#include "model/model.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/dtypes.h"
#include "model/model_internal.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> Model::open(const std::string& model_dir, const ModelOptions& options) {
  auto config = load_model_config(model_dir);
  if (!config.ok()) return config.status();
  Checkpoint::OpenOptions open_options;
  open_options.show_progress = options.show_progress;
  open_options.lock_in_memory = options.lock_weights;
  auto checkpoint = Checkpoint::open(model_dir, open_options);
  if (!checkpoint.ok()) return checkpoint.status();
  auto weights = bind_weights(config.value(), *checkpoint.value());
  if (!weights.ok()) return weights.status();

  std::unique_ptr<Model> model(new Model());
  model->config_ = config.value();
  model->checkpoint_ = std::move(checkpoint.value());
  model->weights_ = std::move(weights.value());
  if (options.make_backend) {
    model->backend_ = options.make_backend();
    if (!model->backend_) return Status::error("ModelOptions::make_backend returned no backend");
  } else if (options.cuda) {
    if (options.exact) return Status::error("the exact (reference) kernels run on the CPU only: drop --exact or the CUDA backend");
    std::string error;
    model->backend_ = make_cuda_backend(options.cuda_device, options.n_threads, &error);
    if (!model->backend_) return Status::error(error);
  } else {
    std::string error;
    model->backend_ = options.exact ? make_reference_backend() : make_fast_backend(options.n_threads, &error);
    if (!model->backend_) return Status::error(error);
  }
  if (options.wrap_backend) {
    model->backend_ = options.wrap_backend(std::move(model->backend_));
    if (!model->backend_) return Status::error("ModelOptions::wrap_backend returned no backend");
  }
  DI_RETURN_IF_ERROR(model->place_experts());
  model->options_ = options;
  const ModelConfig& c = model->config_;
  if (options.show_progress) {
    std::fprintf(stderr, "loaded %s: %zu tensors, %.2f GB mapped, resident %.2f GB\n", model_dir.c_str(),
                 model->checkpoint_->tensor_names().size(), model->checkpoint_->total_bytes() / 1e9, resident_bytes() / 1e9);
  }
  if (options.swa_bounded_replay) {
    auto plan = plan_swa_replay(c);
    if (!plan.ok()) return plan.status();
    model->replay_ = plan.value();
  }
  if (c.is_v41() && !c.engram_layers.empty()) {
    auto engram = load_engram_hashing(c, model_dir);
    if (!engram.ok()) return engram.status();
    model->engram_ = std::move(engram.value());
  }
  for (int l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    // spec §1.3: window-only layers use the plain table, compressed layers theta 160000 with YaRN.
    model->layer_rope_.push_back(c.compress_ratio(l) == 0
                                     ? make_rope_table(c.rope_head_dim, c.rope.theta)
                                     : make_yarn_rope_table(c.rope_head_dim, c.rope.compress_theta, c.rope.yarn_factor,
                                                            c.rope.yarn_original_max_pos, c.rope.beta_fast,
                                                            c.rope.beta_slow));
  }
  return model;
}

Status Model::validate_tokens(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return Status::error("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is outside the vocabulary (0.." +
                           std::to_string(config_.vocab_size - 1) + ")");
    }
  }
  return Status();
}

SequenceState Model::new_sequence(std::shared_ptr<PagePool> pool) const {
  return new_sequence_state(config_, pool ? std::move(pool) : default_pool_);
}

// Flattens chunks into per-token metadata; `start` gives each chunk's first position.
template <typename Chunk, typename StartFn>
Model::Batch make_batch(std::span<const Chunk> chunks, int window_size, StartFn start, int64_t n_of_chunk(const Chunk&)) {
  Model::Batch b;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const Chunk& ch = chunks[ci];
    const int64_t n = n_of_chunk(ch);
    const int64_t p0 = start(ch);
    DI_CHECK_MSG(ch.prompt_len == 0 || ch.prompt_len >= p0 + n, "prompt_len must cover the chunk");
    b.states.push_back(ch.state);
    b.first_token.push_back(b.n_tokens());
    b.n_chunk_tokens.push_back(n);
    b.first_pos.push_back(p0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = p0 + i;
      b.pos.push_back(t);
      b.chunk.push_back(int(ci));
      b.is_prompt.push_back(ch.prompt_len > 0);
      if (ch.prompt_len > 0) {
        b.window_slots.push_back(std::min<int64_t>(ch.prompt_len, window_size));
        b.layout_tokens.push_back(ch.prompt_len);
      } else {
        b.window_slots.push_back(window_size);
        b.layout_tokens.push_back(t + 1);
      }
    }
  }
  return b;
}

bool wants_last_streams(std::span<const ForwardChunk> chunks) {
  return std::any_of(chunks.begin(), chunks.end(), [](const ForwardChunk& ch) { return ch.layer_streams_of_last != nullptr; });
}

void append_last_streams(const Model::Batch& batch, std::span<const ForwardChunk> chunks, const std::vector<float>& h, int64_t dim) {
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    std::vector<float>* streams = chunks[ci].layer_streams_of_last;
    if (!streams || batch.n_chunk_tokens[ci] == 0) continue;
    const int64_t last = batch.first_token[ci] + batch.n_chunk_tokens[ci] - 1;
    streams->insert(streams->end(), h.begin() + last * 4 * dim, h.begin() + (last + 1) * 4 * dim);
  }
}

namespace {
// head_outputs' buffer where a call has several chunks or draws, kept by each thread from call to call up to 256 MB.
// Never value-initialised: where a GPU draws a batch's tokens it writes none of their rows, whose pages then are
// never touched (a zero-filled vector past 256 MB would be faulted in and cleared every step for nothing).
struct StackedLogits {
  std::unique_ptr<float[]> data;
  size_t capacity = 0;
  float* reserve(size_t n) {
    if (n > capacity) {
      data.reset();
      data.reset(new float[n]);
      capacity = n;
    }
    return data.get();
  }
  void release_if_large() {  // as model_internal.h's release_if_large
    if (capacity * sizeof(float) > kKeptBufferMaxBytes) {
      data.reset();
      capacity = 0;
    }
  }
};
thread_local StackedLogits stacked_logits;
}  // namespace

bool head_outputs_with(Backend& backend, const LinearWeight& head, const float* y, int64_t dim, std::span<const int64_t> counts,
                       std::span<const std::optional<TokenDraw>> draws, std::vector<ChunkOutput>& outputs, const HeadRun& run) {
  const int64_t vocab = head.n_out;
  std::vector<int64_t> first_row(outputs.size() + 1, 0);
  for (size_t ci = 0; ci < outputs.size(); ++ci) first_row[ci + 1] = first_row[ci] + counts[ci];
  const int64_t n_rows = first_row.back();
  auto draws_only = [&](size_t ci) { return draws[ci].has_value(); };
  bool any_draw = false;
  for (size_t ci = 0; ci < outputs.size(); ++ci) any_draw = any_draw || draws_only(ci);
  const bool in_place = outputs.size() == 1 && !any_draw;
  if (in_place) outputs[0].logits.resize(size_t(n_rows * vocab));
  float* logits = in_place ? outputs[0].logits.data() : stacked_logits.reserve(size_t(n_rows * vocab));  // (this thread's)
  if (n_rows > 0) {
    std::vector<uint8_t> keep_out(size_t(n_rows), 1);
    std::vector<TokenDraw> row_draws(size_t(any_draw ? n_rows : 0));  // (greedy for the kept rows: never read)
    std::vector<size_t> drawing;  // the chunks whose row's draw is all they want
    for (size_t ci = 0; ci < outputs.size(); ++ci) {
      if (!draws_only(ci) || counts[ci] == 0) continue;
      DI_CHECK(counts[ci] == 1);
      keep_out[size_t(first_row[ci])] = 0;
      row_draws[size_t(first_row[ci])] = *draws[ci];
      drawing.push_back(ci);
    }
    std::vector<int32_t> ids(size_t(n_rows), -1);
    bool any_logprobs = false;
    for (const TokenDraw& d : row_draws) any_logprobs = any_logprobs || d.logprobs >= 0;
    std::vector<TokenLogprob> logprobs(any_logprobs ? size_t(n_rows) : 0);
    const LinearParams p{y, dim, n_rows, &head, 0, vocab, Epilogue::kF32, nullptr, logits, vocab};
    if (!run(p, keep_out, row_draws, any_draw ? ids.data() : nullptr, any_logprobs ? logprobs.data() : nullptr)) return false;
    for (size_t ci : drawing) {
      outputs[ci].drawn = ids[size_t(first_row[ci])];
      if (draws[ci]->logprobs >= 0) outputs[ci].logprob = std::move(logprobs[size_t(first_row[ci])]);
    }
  }
  if (in_place) return true;
  backend.for_rows(int64_t(outputs.size()), [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci) {
      if (draws_only(size_t(ci))) continue;
      outputs[size_t(ci)].logits.assign(logits + first_row[size_t(ci)] * vocab, logits + first_row[size_t(ci + 1)] * vocab);
    }
  });
  stacked_logits.release_if_large();
  return true;
}

void head_outputs(Backend& backend, const LinearWeight& head, const float* y, int64_t dim, std::span<const int64_t> counts,
                  std::span<const std::optional<TokenDraw>> draws, std::vector<ChunkOutput>& outputs) {
  head_outputs_with(backend, head, y, dim, counts, draws, outputs,
                    [&](const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> row_draws,
                        int32_t* drawn, TokenLogprob* logprobs) {
                      if (!drawn) {
                        backend.linear(p);
                      } else if (!backend.linear_draws(p, keep_out, row_draws, drawn, logprobs)) {
                        backend.linear(p);
                        backend.for_rows(p.n_tokens, [&](int64_t r0, int64_t r1) {  // the drawing rows' draws
                          for (int64_t r = r0; r < r1; ++r) {
                            if (keep_out[size_t(r)]) continue;
                            const TokenDraw& d = row_draws[size_t(r)];
                            const float* row = p.out + r * p.out_stride;  // (draw_token edits and masks a copy)
                            drawn[r] = draw_token(row, p.n_rows, d);
                            if (d.logprobs >= 0) token_logprobs(row, p.n_rows, drawn[r], d.logprobs, logprobs[r]);
                          }
                        });
                      }
                      return true;
                    });
}

Model::Batch make_forward_batch(std::span<const ForwardChunk> chunks, int window_size) {
  Model::Batch batch = make_batch<ForwardChunk>(chunks, window_size, [](const ForwardChunk& ch) { return ch.state->n_tokens; },
                                               [](const ForwardChunk& ch) { return int64_t(ch.ids.size()); });
  for (const auto& ch : chunks) batch.ids.insert(batch.ids.end(), ch.ids.begin(), ch.ids.end());
  return batch;
}

void Model::run_block(const BlockWeights& w, const RopeTable& rope, Batch& batch, bool is_mtp, int layer_index,
                          std::vector<float>& h, KeptStream* stream) {
  BlockBuffers& buffers = block_buffers(h.size());  // reused from call to call
  std::vector<float>& h_next = buffers.h_next;
  // Two-pass mHC (spec §3.2): the attention side, then the FFN side on its output (h -> h_next -> h), the
  // attention's output projection and the attention side's expansion run with the FFN side (MhcSide::finish_with).
  const MhcSideParams attention_side = side_params(w, batch, 0, h, h_next);
  MhcSide side(*backend_, attention_side, buffers.side, [&](MhcFront& front, MhcBack& back) {
    attention(w, rope, batch, is_mtp, layer_index, front, back);
  }, stream);
  side.finish_with({side_params(w, batch, 1, h_next, h), moe_params(w, batch)});
}

template <class Chunk>
void Model::run_head(const HeadWeights& w, const Batch& batch, std::span<const Chunk> chunks, const std::vector<float>& h_all,
                     std::vector<ChunkOutput>& outputs) {
  const ModelConfig& c = config_;
  const int64_t D = c.dim;
  std::vector<int64_t> counts;
  thread_local std::vector<float> stacked_h;  // (16 MB at batch 256: kept, not zero-filled each step)
  std::vector<float>& hs = stacked_h;         // (this thread's, wherever it is read)
  stack_logit_rows(*backend_, batch, chunks, h_all, 4 * D, counts, hs);
  const int64_t n_tokens = int64_t(hs.size()) / (4 * D);
  std::vector<float> y;
  if (n_tokens > 0) head_norm_rows(w, hs.data(), n_tokens, y);  // H1-H4
  head_outputs(*backend_, weights_.head_proj, y.data(), D, counts, draws_of(chunks), outputs);  // H5: fp32 logits
  release_if_large(hs);
}
template void Model::run_head(const HeadWeights&, const Batch&, std::span<const ForwardChunk>, const std::vector<float>&,
                              std::vector<ChunkOutput>&);
template void Model::run_head(const HeadWeights&, const Batch&, std::span<const MtpChunk>, const std::vector<float>&,
                              std::vector<ChunkOutput>&);

void Model::head_norm_rows(const HeadWeights& w, const float* h, int64_t n_tokens, std::vector<float>& y) {
  const ModelConfig& c = config_;
  const int64_t D = c.dim;
  const double eps = double(float(c.norm_eps)), hc_eps = double(float(c.hc_eps));
  std::vector<float> mixes(static_cast<size_t>(n_tokens * 4));
  y.resize(size_t(n_tokens * D));
  backend_->hc_mix({h, n_tokens, 4 * D, w.hc_fn, 4, eps, mixes.data()});  // H1
  backend_->for_rows(n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float pre[4];
      hc_head_pre(&mixes[size_t(t * 4)], w.hc_scale, w.hc_base, hc_eps, pre);  // H2
      hc_collapse(h + t * 4 * D, pre, D, &y[size_t(t * D)]);                  // H3
      rmsnorm(&y[size_t(t * D)], w.norm, D, eps, &y[size_t(t * D)]);          // H4
    }
  });
}

void Model::rollback(SequenceState& seq, int64_t n_tokens) const {
  DI_CHECK_MSG(n_tokens <= seq.n_tokens && seq.n_tokens - n_tokens <= kSpecSlots, "rollback past the spare ring slots");
  for (const LayerState& l : seq.layers) {  // an SWA replay's missing window rows stay behind the kept positions
    DI_CHECK_MSG(l.window_valid_from <= n_tokens, "rollback into positions an SWA bounded replay skipped");
  }
  const int64_t removed = seq.n_tokens - n_tokens;
  seq.n_tokens = n_tokens;
  // Rings: the slots of removed positions are rewritten before anything reads them, and the spare slots
  // kept every slot an earlier position needs. Rows and keys: keep the groups completed by n_tokens.
  auto truncate = [&](CompressorState& cs) {
    if (cs.ratio != 0) cs.truncate_rows(n_tokens / cs.ratio);
  };
  for (LayerState& l : seq.layers) {
    truncate(l.compressor);
    truncate(l.index_compressor);
  }
  if (!seq.engram_history.empty()) {
    DI_CHECK(int64_t(seq.engram_history.size()) >= removed);
    seq.engram_history.resize(seq.engram_history.size() - size_t(removed));
  }
  seq.n_mtp_tokens = std::min(seq.n_mtp_tokens, n_tokens);
}

void act_qdq_rows(Backend& backend, float* x, int64_t n_rows, int64_t width, int64_t block, bool v41) {
  // Ranges of whole quantisation blocks (each block's scale depends on that block alone).
  const int64_t range = (kColumnRange + block - 1) / block * block;
  for_token_ranges(backend, n_rows, width, range, [&](int64_t r, int64_t c0, int64_t c1) {
    float* xs = x + r * width + c0;
    if (v41) {
      qdq_fp8_v41(xs, c1 - c0, block);
    } else {
      qdq_fp8(xs, c1 - c0, block);
    }
  });
}

void embed_streams(Backend& backend, const uint16_t* embed, const std::vector<int32_t>& ids, int64_t dim, std::vector<float>& h) {
  const int64_t T = int64_t(ids.size());
  h.resize(size_t(T * 4 * dim));
  backend.for_rows(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const uint16_t* row = embed + int64_t(ids[size_t(t)]) * dim;
      for (int k = 0; k < 4; ++k) {
        for (int64_t i = 0; i < dim; ++i) h[size_t((t * 4 + k) * dim + i)] = bf16_to_float(row[i]);
      }
    }
  });
}

void for_each_chunk(Backend& backend, const Model::Batch& batch, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t n_chunks = int64_t(batch.states.size());
  std::vector<SequenceState*> states = batch.states;
  std::sort(states.begin(), states.end());
  auto chunks = [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci) body(batch.first_token[size_t(ci)], batch.first_token[size_t(ci)] + batch.n_chunk_tokens[size_t(ci)]);
  };
  if (std::adjacent_find(states.begin(), states.end()) == states.end()) {
    backend.for_rows(n_chunks, chunks);
  } else {
    chunks(0, n_chunks);
  }
}

void Model::act_qdq_rows(std::vector<float>& x, int64_t n_rows, int64_t width) const {
  deepinfer::act_qdq_rows(*backend_, x.data(), n_rows, width, config_.act_block, config_.is_v41());
}

// Runs `pass` over all chunks at once, or, where the backend's kernels differ by token kind, over the prompt
// chunks and then over the generated ones (each chunk's result never depends on the others in its pass); the
// outputs keep the chunks' order.
template <typename Chunk, typename Pass>
std::vector<ChunkOutput> forward_by_token_kind(Backend& backend, std::span<const Chunk> chunks, Pass&& pass) {
  if (!backend.kernels_differ_by_token_kind()) return pass(chunks);
  std::vector<ChunkOutput> outputs(chunks.size());
  for (const bool prompt : {true, false}) {
    std::vector<Chunk> group;
    std::vector<size_t> index;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if ((chunks[i].prompt_len > 0) != prompt) continue;
      group.push_back(chunks[i]);
      index.push_back(i);
    }
    if (group.empty()) continue;
    backend.set_token_kind(prompt ? TokenKind::kPrompt : TokenKind::kGenerated);
    std::vector<ChunkOutput> out = pass(std::span<const Chunk>(group));
    for (size_t j = 0; j < group.size(); ++j) outputs[index[j]] = std::move(out[j]);
  }
  return outputs;
}

std::vector<ChunkOutput> Model::forward(std::span<const ForwardChunk> chunks) {
  for (const ForwardChunk& ch : chunks) {
    DI_CHECK_MSG(!ch.draw_only || !ch.all_logits, "a chunk asks for draw_only and all_logits");
  }
  return forward_by_token_kind(*backend_, chunks, [this](std::span<const ForwardChunk> group) {
    return config_.is_v41() ? forward_v41(group) : forward_v4(group);
  });
}

std::vector<ChunkOutput> Model::forward_mtp(std::span<const MtpChunk> chunks) {
  return forward_by_token_kind(*backend_, chunks,
                               [this](std::span<const MtpChunk> group) { return forward_mtp_pass(group); });
}

std::vector<ChunkOutput> Model::forward_v4(std::span<const ForwardChunk> chunks) {
  const ModelConfig& c = config_;
  const int64_t D = c.dim;
  Batch batch = make_forward_batch(chunks, c.window_size);
  const int64_t T = batch.n_tokens();
  for (int64_t t = 0; t < T; ++t) {
    DI_CHECK_MSG(batch.ids[size_t(t)] >= 0 && batch.ids[size_t(t)] < c.vocab_size, "token id out of range");
  }
  std::vector<float> h;
  embed_streams(*backend_, weights_.embed, batch.ids, D, h);  // E1
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    if (chunks[ci].layer_streams_of_last) chunks[ci].layer_streams_of_last->clear();
  }
  // The stream may stay on a backend that keeps arrays from block to block; fetched where the host reads it.
  KeptStream stream;
  const bool streams_read = wants_last_streams(chunks);
  for (int l = 0; l < c.n_layers; ++l) {
    run_block(weights_.layers[size_t(l)], layer_rope_[size_t(l)], batch, false, l, h, &stream);
    if (streams_read) stream.fetch(*backend_, h);
    append_last_streams(batch, chunks, h, D);
  }

  std::vector<ChunkOutput> outputs(chunks.size());
  const HeadWeights& hw = weights_.head;  // H1-H5 where the stream is, else on the host
  const HeadRowsParams rows{.h = h.data(), .n_stream_tokens = batch.n_tokens(), .dim = D, .hc_fn = hw.hc_fn,
                            .hc_scale = hw.hc_scale, .hc_base = hw.hc_base, .hc_eps = double(float(c.hc_eps)),
                            .norm = hw.norm, .eps = double(float(c.norm_eps))};
  if (!head_outputs_on_kept_stream(*backend_, weights_.head_proj, rows, stream, batch, chunks, outputs)) {
    stream.fetch(*backend_, h);
    run_head(weights_.head, batch, chunks, h, outputs);
  }
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int64_t first = batch.first_token[ci], n = batch.n_chunk_tokens[ci];
    if (chunks[ci].keep_hidden) {
      outputs[ci].hidden.assign(h.begin() + first * 4 * D, h.begin() + (first + n) * 4 * D);
    }
    chunks[ci].state->n_tokens += n;
  }
  return outputs;
}

std::vector<ChunkOutput> Model::forward_mtp_pass(std::span<const MtpChunk> chunks) {
  const ModelConfig& c = config_;
  DI_CHECK_MSG(c.n_mtp_layers > 0, "this checkpoint has no MTP layer");
  const MtpWeights& mw = weights_.mtp[0];
  const int64_t D = c.dim;
  const double eps = double(float(c.norm_eps));
  Batch batch = make_batch<MtpChunk>(chunks, c.window_size, [](const MtpChunk& ch) { return ch.state->n_mtp_tokens; },
                                     [](const MtpChunk& ch) { return int64_t(ch.next_ids.size()); });
  for (const auto& ch : chunks) {
    DI_CHECK(ch.hidden.size() == ch.next_ids.size() * size_t(4 * D));
    batch.ids.insert(batch.ids.end(), ch.next_ids.begin(), ch.next_ids.end());
  }
  const int64_t T = batch.n_tokens();
  std::vector<float> e(static_cast<size_t>(T * D)), hh(size_t(T * 4 * D)), ep(size_t(T * D)), hp(size_t(T * 4 * D)), h(size_t(T * 4 * D));
  int64_t t = 0;
  for (const auto& ch : chunks) {
    for (size_t i = 0; i < ch.next_ids.size(); ++i, ++t) {
      DI_CHECK_MSG(ch.next_ids[i] >= 0 && ch.next_ids[i] < c.vocab_size, "token id out of range");
      const uint16_t* row = weights_.embed + int64_t(ch.next_ids[i]) * D;
      for (int64_t k = 0; k < D; ++k) e[size_t(t * D + k)] = bf16_to_float(row[k]);
      rmsnorm(&e[size_t(t * D)], mw.enorm, D, eps, &e[size_t(t * D)]);  // T1
      for (int k = 0; k < 4; ++k) {                                        // T2: per copy
        rmsnorm(&ch.hidden[i * size_t(4 * D) + size_t(k * D)], mw.hnorm, D, eps, &hh[size_t((t * 4 + k) * D)]);
      }
    }
  }
  act_qdq_rows(e, T, D);  // T3
  act_qdq_rows(hh, T * 4, D);
  const LinearParams projections[] = {
      {e.data(), D, T, &mw.e_proj, 0, D, Epilogue::kBf16, nullptr, ep.data(), D, c.act_block},
      {hh.data(), D, T * 4, &mw.h_proj, 0, D, Epilogue::kBf16, nullptr, hp.data(), D, c.act_block},
  };
  backend_->linears(projections);  // independent: one batch (one wait on a GPU)
  for (int64_t i = 0; i < T; ++i) {  // T4
    for (int k = 0; k < 4; ++k) {
      for (int64_t j = 0; j < D; ++j) {
        h[size_t((i * 4 + k) * D + j)] = round_bf16(double(ep[size_t(i * D + j)]) + hp[size_t((i * 4 + k) * D + j)]);
      }
    }
  }
  run_block(mw.block, layer_rope_[size_t(c.n_layers)], batch, true, 0, h);  // T5
  std::vector<ChunkOutput> outputs(chunks.size());
  run_head(mw.head, batch, chunks, h, outputs);  // T6
  for (size_t ci = 0; ci < chunks.size(); ++ci) chunks[ci].state->n_mtp_tokens += batch.n_chunk_tokens[ci];
  return outputs;
}

}  // namespace deepinfer
