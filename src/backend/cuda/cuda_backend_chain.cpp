// The CUDA backend's chains (CudaBackend, cuda_backend.h): the attention side's front and its projections with the
// q path, the output projection, the stream taps and V4.1's Engram update, their intermediates kept on the device.
#include "backend/cuda/cuda_backend.h"
#include "model/engram.h"

namespace deepinfer {

bool CudaBackend::linear_chain(const LinearChainParams& p) {
  OutputChain chain;
  if (!plan_output_chain(p, chain)) return false;
  const int64_t T = p.n_tokens, n_out = chain.n_out;
  uint8_t* host = chain_host_.get<uint8_t>();
  // The stream work, replayed as a CUDA graph where graphs are on (the inputs and descriptors are staged in
  // plan_output_chain, per call, and the graph's first copy takes them).
  auto enqueue = [&] {
    enqueue_output_chain(chain);
    DI_CUDA_CHECK(cudaMemcpyAsync(host, chain.y, size_t(T * n_out) * 4, cudaMemcpyDeviceToHost, stream_));
  };
  if (graphs_) {
    GraphKey key = {kChainGraph};
    add_output_chain_words(p, key);
    std::vector<const void*> buffers = {chain_scratch_.get(), chain_host_.get(), partials_.get()};
    buffers.insert(buffers.end(), chain.kept_x.begin(), chain.kept_x.end());
    run_as_graph(key, std::move(buffers), enqueue);
  } else {
    enqueue();
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  copy_rows(reinterpret_cast<const float*>(host), n_out, T, n_out, p.second.out, p.second.out_stride, n_out);
  return true;
}

bool CudaBackend::projection_chain(const ProjectionChainParams& p) {
  if (!chain_takes(p)) return false;
  bind_device();
  ChainSecond second;
  if (!plan_chain_second(p, second)) return false;
  const float* mid_norm = p.mid_norm ? weights_.bf16_constant(p.mid_norm, p.mid_width, stream_) : nullptr;
  upload_mma_descriptors(chain_launches_, chain_descriptors_host_, chain_descriptors_);
  const bool queued = enqueue_linears(p.first);
  DI_CHECK_MSG(queued, "projection chain: first has no work");
  enqueue_chain_second(p, second, reinterpret_cast<const float*>(batch_.get<uint8_t>() + layout_.places()[size_t(second.mid_op)].out),
                       mid_norm);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  layout_.scatter_outputs(p.first, staging_.get<uint8_t>(), host_.get());
  finish_chain_second(p, second);
  return true;
}

bool CudaBackend::mhc_projection_chain(const MhcProjectionParams& p) {
  const MhcSideParams& side = p.side;
  const ProjectionChainParams& chain = p.chain;
  const int64_t T = side.n_tokens, D = side.dim, HW = 4 * D, NC = cuda::kHcCoefficientFloats;
  if (!chain_takes(chain) || side.mhc.n_mix != NC || D > cuda::kHcPreMaxDim || chain.n_tokens != T) return false;
  bind_device();
  // First's ops each read u or uq, all at one padded width kx (the u rows the kernels write).
  int64_t kx = 0;
  std::vector<const cuda::DeviceWeight*> first_weights;
  for (const LinearParams& op : chain.first) {
    DI_CHECK_MSG((op.x == p.u || op.x == p.uq) && op.x_stride == D && op.n_tokens == T && op.weight->n_in == D,
                 "mHC projection chain: a first op does not read u or uq");
    const cuda::DeviceWeight& d = weights_.get(*op.weight, stream_);
    if (kx == 0) kx = d.k_pad;
    if (d.k_pad != kx) return false;
    first_weights.push_back(&d);
  }
  ChainSecond second;
  if (!plan_chain_second(chain, second)) return false;
  // Device scratch, mirrored in pinned memory: the inputs (h, the collapse's pre, the biases), then what comes
  // back (the coefficients, u, uq, first's outputs), then the mixes.
  ScratchLayout layout;
  const bool side_pre = side.collapse_pre != nullptr;
  const size_t pre_at = side_pre ? layout.take(size_t(T * 4) * 4) : 0;
  std::vector<size_t> bias_at, out_at;
  for (const LinearParams& op : chain.first) {
    bias_at.push_back(op.epilogue == Epilogue::kF32AddBias ? layout.take(size_t(T * op.n_rows) * 4) : 0);
  }
  const size_t h_at = layout.take(size_t(T * HW) * 4);
  const size_t in_bytes = p.h_on_backend ? h_at : layout.bytes;  // h last: from its kept array where it is there
  const size_t coeffs_at = layout.take(size_t(T * NC) * 4);
  for (const LinearParams& op : chain.first) out_at.push_back(layout.take(size_t(T * op.n_rows) * 4));
  const size_t u_at = layout.take(size_t(T * kx) * 4), uq_at = layout.take(size_t(T * kx) * 4);  // back where u_back
  const size_t back_end = p.u_back ? layout.bytes : u_at, mixes_at = layout.take(size_t(T * NC) * 4);
  front_scratch_.reserve(layout.bytes);
  front_host_.reserve(layout.bytes);
  uint8_t* dev = front_scratch_.get<uint8_t>();
  uint8_t* host = front_host_.get<uint8_t>();
  auto f32 = [&](size_t offset) { return reinterpret_cast<float*>(dev + offset); };
  DI_CHECK_MSG(side_pre || !p.pre_on_backend, "mHC projection chain: a pre on the device, but no collapse_pre");
  if (!p.h_on_backend) copy_on_threads(host_.get(), host + h_at, side.h, size_t(T * HW) * 4);
  // (a pre on the device is copied over its stale bytes after the upload)
  if (side_pre && !p.pre_on_backend) std::memcpy(host + pre_at, side.collapse_pre, size_t(T * 4) * 4);
  front_launches_.clear();
  std::vector<cuda::LinearLaunch> other;  // first's ops off the tensor cores, as enqueue_linears runs them
  for (size_t i = 0; i < chain.first.size(); ++i) {
    const LinearParams& op = chain.first[i];
    cuda::LinearLaunch l = launch_of(*first_weights[i], op, f32(op.x == p.u ? u_at : uq_at), f32(out_at[i]));
    if (op.epilogue == Epilogue::kF32AddBias) {
      copy_rows(op.bias, op.n_rows, T, op.n_rows, reinterpret_cast<float*>(host + bias_at[i]), op.n_rows, op.n_rows);
      l.bias = f32(bias_at[i]);
    }
    (first_weights[i]->mma_exact ? front_launches_ : other).push_back(l);
  }
  sort_by_mma_shape(front_launches_);
  const int64_t partial_floats = std::max(mma_group_partial_floats(front_launches_), second.partial_floats);
  if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * 4);  // before anything is queued

  const MhcSideDevice device = mhc_side_device(side);
  const cuda::HcPreLaunch pre = hc_pre_launch(device, f32(h_at), f32(mixes_at), side_pre ? f32(pre_at) : nullptr,
                                              f32(coeffs_at), f32(u_at), kx);
  // A copy of h for the block's tail; where h is on the device already, that array itself.
  const float* h_in = p.h_on_backend ? kept_at(side.h, T * HW) : nullptr;
  float* kept_h = p.keep_h && !h_in ? keep_array(side.h, T * HW) : nullptr;
  const float* pre_in = p.pre_on_backend ? kept_at(side.collapse_pre, T * 4) : nullptr;
  const cuda::ActQdqRule rule = chain.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4;
  // Nothing below allocates, uploads a constant or waits, so that it can be captured.
  const float* mid_norm = chain.mid_norm ? weights_.bf16_constant(chain.mid_norm, chain.mid_width, stream_) : nullptr;
  upload_mma_descriptors(front_launches_, front_descriptors_host_, front_descriptors_);
  upload_mma_descriptors(chain_launches_, chain_descriptors_host_, chain_descriptors_);
  // Where the second stage brings nothing back (mid not wanted, its outputs kept), the call waits only for first's
  // outputs, and the second stage (the front's largest weights: wq_b, the indexer's wq_b) runs while the host works
  // with them.
  const bool second_stays = !chain.mid_back && all_second_outputs_kept(chain);
  auto enqueue_first = [&] {
    // Nothing to copy where h is kept and nothing precedes it (no pre, no bias): a zero-byte copy is not left to a
    // capture to accept.
    if (in_bytes) DI_CUDA_CHECK(cudaMemcpyAsync(dev, host, in_bytes, cudaMemcpyHostToDevice, stream_));
    if (h_in) DI_CUDA_CHECK(cudaMemcpyAsync(f32(h_at), h_in, size_t(T * HW) * 4, cudaMemcpyDeviceToDevice, stream_));
    if (pre_in) DI_CUDA_CHECK(cudaMemcpyAsync(f32(pre_at), pre_in, size_t(T * 4) * 4, cudaMemcpyDeviceToDevice, stream_));
    if (kept_h) DI_CUDA_CHECK(cudaMemcpyAsync(kept_h, f32(h_at), size_t(T * HW) * 4, cudaMemcpyDeviceToDevice, stream_));
    cuda::launch_hc_mix({f32(h_at), T, HW, device.fn, side.mhc.n_mix, side.mhc.eps, f32(mixes_at)}, stream_);
    cuda::launch_hc_pre(pre, stream_);
    cuda::launch_act_qdq({f32(u_at), kx, T, D, chain.qdq_block, rule, f32(uq_at), kx, kx}, stream_);
    launch_uploaded_mma_groups(front_launches_, front_descriptors_);
    for (const cuda::LinearLaunch& l : other) cuda::launch_linear(l, stream_);
    DI_CUDA_CHECK(cudaMemcpyAsync(host + coeffs_at, dev + coeffs_at, back_end - coeffs_at, cudaMemcpyDeviceToHost, stream_));
  };
  auto enqueue_second = [&] { enqueue_chain_second(chain, second, f32(out_at[size_t(second.mid_op)]), mid_norm, !second_stays); };
  // One part (one graph), or where the call waits for the first stage alone, two with front_back_ between them.
  auto run_parts = [&](const std::function<void(int64_t, const std::function<void()>&)>& run_part) {
    if (!second_stays) {
      run_part(0, [&] {
        enqueue_first();
        enqueue_second();
      });
      return;
    }
    run_part(1, enqueue_first);
    DI_CUDA_CHECK(cudaEventRecord(front_back_, stream_));
    run_part(2, enqueue_second);
  };
  if (graphs_) {
    // The key: the side, the token count, and each op's weight, rows and epilogue and what it reads.
    GraphKey key = {kFrontGraph, T, kx, word(p.keep_h), word(p.u_back), word(p.h_on_backend), word(p.pre_on_backend)};
    add_side_words(side, key);
    for (const LinearParams& op : chain.first) {
      for (int64_t w : {word(op.weight), op.row_begin, op.n_rows, int64_t(op.epilogue), word(op.x == p.u), word(op.bias != nullptr)}) {
        key.push_back(w);
      }
    }
    for (const LinearParams& op : chain.second) {
      for (int64_t w : {word(op.weight), op.row_begin, op.n_rows, int64_t(op.epilogue)}) key.push_back(w);
    }
    for (int64_t w : {second.mid_op, chain.mid_width, word(chain.mid_norm), word(chain.eps), chain.qdq_block, word(chain.v41)}) {
      key.push_back(w);
    }
    if (const HeadRope* rope = chain.q_rope) {
      for (int64_t w : {rope->n_heads, rope->head_dim, rope->rope_dim, word(rope->inverse), word(rope->normalize), word(rope->eps)}) {
        key.push_back(w);
      }
    }
    if (const IndexQueryWork* index = chain.index_q) {
      for (int64_t w : {int64_t(-1), index->n_heads, index->head_dim, index->rope_dim, word(index->v41)}) key.push_back(w);
    }
    const std::vector<const void*> buffers = {front_scratch_.get(), front_host_.get(), chain_scratch_.get(), second_host_.get(),
                                              partials_.get(), front_descriptors_.get(), chain_descriptors_.get(), second.kept[0],
                                              second.kept[1], kept_h, h_in, pre_in};
    run_parts([&](int64_t part, const std::function<void()>& enqueue) {
      if (!graphs_) return enqueue();  // the first part's capture failed
      GraphKey part_key = key;
      part_key.push_back(part);
      run_as_graph(part_key, buffers, enqueue);
    });
  } else {
    run_parts([](int64_t, const std::function<void()>& enqueue) { enqueue(); });
  }
  if (second_stays) {
    second_staging_.queued(stream_);  // the second stage reads its angles from second_host_
    DI_CUDA_CHECK(cudaEventSynchronize(front_back_));
  } else {
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::memcpy(p.coeffs, host + coeffs_at, size_t(T * NC) * 4);
  if (p.u_back) {
    copy_rows(reinterpret_cast<const float*>(host + u_at), kx, T, D, p.u, D, D);
    copy_rows(reinterpret_cast<const float*>(host + uq_at), kx, T, D, p.uq, D, D);
  }
  for (size_t i = 0; i < chain.first.size(); ++i) {
    const LinearParams& op = chain.first[i];
    copy_rows(reinterpret_cast<const float*>(host + out_at[i]), op.n_rows, T, op.n_rows, op.out, op.out_stride, op.n_rows);
  }
  if (!second_stays) finish_chain_second(chain, second);
  return true;
}

bool CudaBackend::stream_tap(const StreamTapParams& p) {
  if (!device_chain_ || p.n_tokens == 0 || p.n_tokens > 65535) return false;
  DI_CHECK_MSG(p.out >= p.out_array && p.out + (p.n_tokens - 1) * p.out_stride + p.dim <= p.out_array + p.out_floats,
               "stream tap: the taps lie outside their kept array");
  bind_device();
  const float* h = kept_at(p.h, p.n_tokens * 4 * p.dim);
  if (p.out_array_kept) kept_at(p.out_array, p.out_floats);  // an error where it is gone, not a fresh array's garbage
  float* taps = keep_array(p.out_array, p.out_floats);
  cuda::launch_stream_tap({h, p.n_tokens, p.dim, taps + (p.out - p.out_array), p.out_stride}, stream_);
  return true;
}

bool CudaBackend::engram_gate(const EngramGateParams& p) {
  const LinearParams& op = p.kv;
  // (A lone linear launch takes at most 8 x 65535 tokens: a larger batch takes the host's route.)
  if (!device_chain_ || p.n_tokens == 0 || p.n_tokens > 8 * int64_t(kMaxGridYZ) || host_experts_.count(op.weight->data)) {
    return false;
  }
  const EngramTable& table = *p.table;
  const int64_t T = p.n_tokens, D = p.dim, width = p.rows_per_token * table.dim;
  DI_CHECK_MSG(op.n_tokens == T && op.row_begin == 0 && op.n_rows == 5 * D && op.epilogue == Epilogue::kBf16,
               "engram gate: kv is not 5 x dim bf16 rows of each token");
  DI_CHECK_MSG(table.dim % 32 == 0 && p.qdq_block > 0, "engram gate: table rows of whole scale groups and a QDQ block");
  bind_device();
  const cuda::DeviceWeight& w = weights_.get(*op.weight, stream_);
  if (takes_fp8_path(op, w)) return false;
  DI_CHECK_MSG(width == w.n_in, "engram gate: the tokens' table rows are not wkv's input width");
  float* h = const_cast<float*>(kept_at(p.h, T * 4 * D));  // a kept array is the backend's own: updated in place
  const float* q = weights_.bf16_constant(p.q_weight, 4 * D, stream_);
  const float* k = weights_.bf16_constant(p.k_weight, 4 * D, stream_);
  const int64_t code_bytes = T * width, bytes = code_bytes + code_bytes / 32;
  engram_staging_.wait();  // engram_host_ below
  engram_host_.reserve(size_t(bytes));
  engram_rows_.reserve(size_t(bytes));
  engram_x_.reserve(size_t(T * w.k_pad) * 4);
  engram_kv_.reserve(size_t(T * 5 * D) * 4);
  uint8_t* codes = engram_host_.get<uint8_t>();
  uint8_t* scales = codes + code_bytes;
  host_->for_rows(T * p.rows_per_token, [&](int64_t r0, int64_t r1) {  // row r: token r / rows_per_token's
    copy_engram_table_rows(table, p.rows, r0, r1, codes, scales);
  });
  DI_CUDA_CHECK(cudaMemcpyAsync(engram_rows_.get(), codes, size_t(bytes), cudaMemcpyHostToDevice, stream_));
  engram_staging_.queued(stream_);  // the staging is free once its copy ran
  float* x = engram_x_.get<float>();
  const uint8_t* device_codes = engram_rows_.get<uint8_t>();
  cuda::launch_engram_rows({device_codes, device_codes + code_bytes, T, width, x, w.k_pad, p.qdq_block}, stream_);
  cuda::LinearLaunch l = launch_of(w, op, x, engram_kv_.get<float>());
  if (tensor_core_linear_ && w.mma_exact) {
    partials_.reserve(size_t(cuda::linear_mma_partial_floats(l, mma_choice_)) * 4);
    launch_lone_mma(l);
  } else {
    cuda::launch_linear(l, stream_);
  }
  cuda::launch_engram_gate({h, engram_kv_.get<float>(), T, D, q, k, p.eps}, stream_);
  return true;
}

bool CudaBackend::chain_takes(const ProjectionChainParams& p) const {
  if (!device_chain_ || !tensor_core_linear_ || p.n_tokens == 0 || p.second.empty()) return false;
  if (fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt) return false;
  for (std::span<const LinearParams> ops : {p.first, p.second}) {
    for (const LinearParams& op : ops) {
      if (host_experts_.count(op.weight->data)) return false;
    }
  }
  return true;
}

bool CudaBackend::plan_output_chain(const LinearChainParams& p, OutputChain& c) {
  const int64_t T = p.n_tokens, n_first = int64_t(p.first.size());
  if (!device_chain_ || !tensor_core_linear_ || T == 0 || n_first == 0) return false;
  if (fp8_prompt_linear_ && token_kind_ == TokenKind::kPrompt) return false;
  if (p.second.epilogue == Epilogue::kF32AddBias) return false;
  bind_device();
  tail_staging_.wait();  // chain_host_ below
  std::vector<const LinearParams*> ops;
  for (const LinearParams& op : p.first) ops.push_back(&op);
  ops.push_back(&p.second);
  std::vector<const cuda::DeviceWeight*> weights;
  for (const LinearParams* op : ops) {
    if (host_experts_.count(op->weight->data)) return false;
    const cuda::DeviceWeight& d = weights_.get(*op->weight, stream_);
    if (!d.mma_exact) return false;
    weights.push_back(&d);
  }
  const cuda::DeviceWeight& w0 = *weights[0];
  int64_t covered = 0;
  for (int64_t i = 0; i < n_first; ++i) {
    const LinearParams& op = p.first[size_t(i)];
    if (weights[size_t(i)]->kind != w0.kind || weights[size_t(i)]->k_pad != w0.k_pad) return false;
    const int64_t column = op.out - p.mid;
    DI_CHECK_MSG(op.n_tokens == T && op.out_stride == p.mid_width && column >= 0 && column + op.n_rows <= p.mid_width,
                 "linear chain: a first op does not write columns of mid");
    covered += op.n_rows;
    c.max_rows = std::max(c.max_rows, op.n_rows);
    c.mid_column.push_back(column);
  }
  DI_CHECK_MSG(covered == p.mid_width, "linear chain: the first ops do not cover mid's columns");
  DI_CHECK_MSG(p.second.x == p.mid && p.second.x_stride == p.mid_width && p.second.n_tokens == T &&
                   p.second.weight->n_in == p.mid_width,
               "linear chain: the second op does not read mid");
  const cuda::DeviceWeight& w2 = *weights.back();
  const int64_t k1 = w0.k_pad, k2 = w2.k_pad, n_out = p.second.n_rows;
  c.n_first = n_first;
  c.k1 = k1;
  c.k2 = k2;
  c.n_out = n_out;
  c.kind = w0.kind;
  c.mid_width = p.mid_width;
  c.qdq_block = p.qdq_block;
  c.v41 = p.v41;
  c.x_width = p.first[0].weight->n_in;
  c.x_stride = p.first[0].x_stride;
  for (const LinearParams& op : p.first) {
    DI_CHECK_MSG(!p.x_kept || (op.weight->n_in == c.x_width && op.x_stride == c.x_stride),
                 "linear chain: kept first ops' x of different widths or strides");
  }
  // Device: the first ops' descriptors, their x [T, k1] each, their outputs [T, n_rows] each, mid [T, k2], the
  // output [T, n_out]; host (pinned): the descriptors and the x rows (one copy in; x_kept: the descriptors, the x
  // rows copied on the device from their kept array), then the output.
  ScratchLayout layout;
  c.desc_at = layout.take(size_t(n_first) * sizeof(cuda::LinearLaunch));
  const size_t x_at = layout.take(size_t(n_first * T * k1) * 4);
  c.in_bytes = p.x_kept ? x_at : layout.bytes;
  std::vector<size_t> out_at;
  for (int64_t i = 0; i < n_first; ++i) out_at.push_back(layout.take(size_t(T * p.first[size_t(i)].n_rows) * 4));
  const size_t mid_at = layout.take(size_t(T * k2) * 4), y_at = layout.take(size_t(T * n_out) * 4);
  chain_scratch_.reserve(layout.bytes);
  chain_host_.reserve(std::max(c.in_bytes, size_t(T * n_out) * 4));
  uint8_t* dev = chain_scratch_.get<uint8_t>();
  uint8_t* host = chain_host_.get<uint8_t>();
  c.launches.resize(size_t(n_first));
  c.kept_x.clear();
  for (int64_t i = 0; i < n_first; ++i) {
    const LinearParams& op = p.first[size_t(i)];
    if (p.x_kept) {
      c.kept_x.push_back(kept_at(op.x, (T - 1) * op.x_stride + op.weight->n_in));
    } else {
      copy_rows(op.x, op.x_stride, T, op.weight->n_in, reinterpret_cast<float*>(host + x_at) + i * T * k1, k1, k1);
    }
    c.launches[size_t(i)] = launch_of(*weights[size_t(i)], op, reinterpret_cast<const float*>(dev + x_at) + i * T * k1,
                                      reinterpret_cast<float*>(dev + out_at[size_t(i)]));
  }
  std::memcpy(host + c.desc_at, c.launches.data(), c.launches.size() * sizeof(cuda::LinearLaunch));
  c.mid = reinterpret_cast<float*>(dev + mid_at);
  c.y = reinterpret_cast<const float*>(dev + y_at);
  c.second = launch_of(w2, p.second, c.mid, reinterpret_cast<float*>(dev + y_at));
  int64_t partial_floats = cuda::linear_mma_partial_floats(c.second, mma_choice_);
  if (n_first == 1) partial_floats = std::max(partial_floats, cuda::linear_mma_partial_floats(c.launches[0], mma_choice_));
  if (partial_floats > 0) partials_.reserve(size_t(partial_floats) * 4);  // before anything is queued
  return true;
}

void CudaBackend::enqueue_output_chain(const OutputChain& c) {
  const int64_t T = c.second.n_tokens;
  uint8_t* dev = chain_scratch_.get<uint8_t>();
  DI_CUDA_CHECK(cudaMemcpyAsync(dev, chain_host_.get(), c.in_bytes, cudaMemcpyHostToDevice, stream_));
  for (size_t i = 0; i < c.kept_x.size(); ++i) {  // x_kept: each op's rows from the kept array, zero-padded to k1
    const cuda::LinearLaunch& l = c.launches[i];
    auto* x = const_cast<float*>(l.x);
    if (c.k1 > c.x_width) DI_CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(T * c.k1) * 4, stream_));
    DI_CUDA_CHECK(cudaMemcpy2DAsync(x, size_t(c.k1) * 4, c.kept_x[i], size_t(c.x_stride) * 4, size_t(c.x_width) * 4, size_t(T),
                                    cudaMemcpyDeviceToDevice, stream_));
  }
  if (c.n_first == 1) {
    launch_lone_mma(c.launches[0]);
  } else {
    cuda::launch_linear_mma_grouped(reinterpret_cast<const cuda::LinearLaunch*>(dev + c.desc_at), int(c.n_first), c.kind, c.k1,
                                    c.max_rows, T, stream_, mma_choice_);
  }
  for (int64_t i = 0; i < c.n_first; ++i) {  // each op's [T, n_rows] into its columns of mid
    const cuda::LinearLaunch& l = c.launches[size_t(i)];
    DI_CUDA_CHECK(cudaMemcpy2DAsync(c.mid + c.mid_column[size_t(i)], size_t(c.k2) * 4, l.out, size_t(l.n_rows) * 4,
                                    size_t(l.n_rows) * 4, size_t(T), cudaMemcpyDeviceToDevice, stream_));
  }
  const cuda::ActQdqRule rule = c.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4;
  cuda::launch_act_qdq({c.mid, c.k2, T, c.mid_width, c.qdq_block, rule, c.mid, c.k2, c.k2}, stream_);
  launch_lone_mma(c.second);
}

bool CudaBackend::all_second_outputs_kept(const ProjectionChainParams& p) {
  for (size_t i = 0; i < p.second.size(); ++i) {
    if (!kept_output(p, i)) return false;
  }
  return true;
}

bool CudaBackend::plan_chain_second(const ProjectionChainParams& p, ChainSecond& c) {
  const int64_t T = p.n_tokens, W = p.mid_width;
  second_staging_.wait();  // second_host_ below
  for (size_t i = 0; i < p.first.size(); ++i) {
    if (p.first[i].out == p.mid) c.mid_op = int64_t(i);
  }
  DI_CHECK_MSG(c.mid_op >= 0 && p.first[size_t(c.mid_op)].n_rows == W && p.first[size_t(c.mid_op)].out_stride == W &&
                   p.first[size_t(c.mid_op)].n_tokens == T,
               "projection chain: no first op writes mid whole");
  std::vector<const cuda::DeviceWeight*> weights;
  for (const LinearParams& op : p.second) {
    const cuda::DeviceWeight& d = weights_.get(*op.weight, stream_);
    if (!d.mma_exact || op.epilogue == Epilogue::kF32AddBias) return false;
    DI_CHECK_MSG(op.x == p.mid_q && op.x_stride == W && op.n_tokens == T && op.weight->n_in == W,
                 "projection chain: a second op does not read mid_q");
    if (!weights.empty() && d.k_pad != weights[0]->k_pad) return false;
    weights.push_back(&d);
  }
  c.k2 = weights[0]->k_pad;
  if (const HeadRope* rope = p.q_rope) {
    const LinearParams& q = p.second[0];
    DI_CHECK_MSG(q.n_rows == rope->n_heads * rope->head_dim && q.out_stride == q.n_rows && rope->rope_dim % 2 == 0 &&
                     rope->rope_dim <= rope->head_dim && T <= 65535,
                 "projection chain: q_rope does not fit second[0]'s output");
  }
  if (const IndexQueryWork* index = p.index_q) {
    DI_CHECK_MSG(p.second.size() >= 2 && p.second[1].n_rows == index->n_heads * index->head_dim &&
                     p.second[1].out_stride == p.second[1].n_rows && index->head_dim == 128 && index->rope_dim % 4 == 0 &&
                     index->rope_dim <= index->head_dim && T <= 65535,
                 "projection chain: index_q does not fit second[1]'s output");
  }
  const int64_t rope_dims[2] = {p.q_rope ? p.q_rope->rope_dim : 0, p.index_q ? p.index_q->rope_dim : 0};
  const float* angles[2] = {p.q_rope ? p.q_rope->cos_sin : nullptr, p.index_q ? p.index_q->cos_sin : nullptr};
  ScratchLayout layout;
  c.normed_at = layout.take(size_t(T * W) * 4);
  c.mid_q_at = layout.take(size_t(T * c.k2) * 4);
  c.out_at.assign(p.second.size(), 0);
  for (size_t i = 0; i < p.second.size(); ++i) {
    if (!kept_output(p, i)) c.out_at[i] = layout.take(size_t(T * p.second[i].n_rows) * 4);
  }
  c.back_bytes = layout.bytes;
  for (size_t i = 0; i < 2; ++i) {
    if (!kept_output(p, i)) continue;
    c.out_at[i] = layout.take(size_t(T * p.second[i].n_rows) * 4);
    c.cos_sin_at[i] = layout.take(size_t(T * rope_dims[i]) * 4);
  }
  c.bytes = layout.bytes;
  chain_scratch_.reserve(c.bytes);
  second_host_.reserve(c.bytes);
  for (size_t i = 0; i < 2; ++i) {
    if (!kept_output(p, i)) continue;
    std::memcpy(second_host_.get<uint8_t>() + c.cos_sin_at[i], angles[i], size_t(T * rope_dims[i]) * 4);
    c.kept[i] = keep_array(p.second[i].out, T * p.second[i].out_stride);
  }
  uint8_t* dev = chain_scratch_.get<uint8_t>();
  chain_launches_.clear();
  for (size_t i = 0; i < p.second.size(); ++i) {
    chain_launches_.push_back(launch_of(*weights[i], p.second[i], reinterpret_cast<const float*>(dev + c.mid_q_at),
                                        reinterpret_cast<float*>(dev + c.out_at[i])));
  }
  sort_by_mma_shape(chain_launches_);
  c.partial_floats = mma_group_partial_floats(chain_launches_);
  // partials_ sized before anything is queued: growing it later would free what queued work reads.
  if (c.partial_floats > 0) partials_.reserve(size_t(c.partial_floats) * 4);
  return true;
}

void CudaBackend::enqueue_chain_second(const ProjectionChainParams& p, const ChainSecond& c, const float* mid_dev, const float* mid_norm,
                                       bool copy_back) {
  const int64_t T = p.n_tokens, W = p.mid_width;
  DI_CHECK(partials_.bytes() >= size_t(c.partial_floats) * 4);
  uint8_t* dev = chain_scratch_.get<uint8_t>();
  cuda::ActQdqLaunch norm_qdq{mid_dev, W, T, W, p.qdq_block, p.v41 ? cuda::ActQdqRule::kV41 : cuda::ActQdqRule::kV4,
                              reinterpret_cast<float*>(dev + c.mid_q_at), c.k2, c.k2};
  norm_qdq.rmsnorm = true;
  norm_qdq.norm = mid_norm;
  norm_qdq.eps = p.eps;
  norm_qdq.normed = reinterpret_cast<float*>(dev + c.normed_at);
  norm_qdq.normed_stride = W;
  cuda::launch_act_qdq(norm_qdq, stream_);
  launch_uploaded_mma_groups(chain_launches_, chain_descriptors_);
  auto angles = [&](size_t i, int64_t rope_dim) {  // second[i]'s angles, copied in
    DI_CUDA_CHECK(cudaMemcpyAsync(dev + c.cos_sin_at[i], second_host_.get<uint8_t>() + c.cos_sin_at[i], size_t(T * rope_dim) * 4,
                                  cudaMemcpyHostToDevice, stream_));
    return reinterpret_cast<const float*>(dev + c.cos_sin_at[i]);
  };
  if (const HeadRope* rope = p.q_rope) {
    const LinearParams& q = p.second[0];
    cuda::launch_head_rope({{reinterpret_cast<const float*>(dev + c.out_at[0]), q.n_rows, c.kept[0], q.out_stride, T, rope->n_heads,
                             rope->head_dim, rope->rope_dim, angles(0, rope->rope_dim)},
                            rope->inverse, rope->normalize, rope->eps},
                           stream_);
  }
  if (const IndexQueryWork* index = p.index_q) {
    const LinearParams& iq = p.second[1];
    cuda::launch_index_query({{reinterpret_cast<const float*>(dev + c.out_at[1]), iq.n_rows, c.kept[1], iq.out_stride, T,
                               index->n_heads, index->head_dim, index->rope_dim, angles(1, index->rope_dim)},
                              index->v41, double(float(1.0 / std::sqrt(128.0)))},
                             stream_);
  }
  if (copy_back) DI_CUDA_CHECK(cudaMemcpyAsync(second_host_.get(), dev, c.back_bytes, cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::finish_chain_second(const ProjectionChainParams& p, const ChainSecond& c) const {
  const int64_t T = p.n_tokens, W = p.mid_width;
  const uint8_t* host = second_host_.get<uint8_t>();
  copy_on_threads(host_.get(), p.mid, host + c.normed_at, size_t(T * W) * 4);
  copy_rows(reinterpret_cast<const float*>(host + c.mid_q_at), c.k2, T, W, p.mid_q, W, W);
  for (size_t i = 0; i < p.second.size(); ++i) {
    if (kept_output(p, i)) continue;  // it stays on the device
    const LinearParams& op = p.second[i];
    copy_rows(reinterpret_cast<const float*>(host + c.out_at[i]), op.n_rows, T, op.n_rows, op.out, op.out_stride, op.n_rows);
  }
}

}  // namespace deepinfer
