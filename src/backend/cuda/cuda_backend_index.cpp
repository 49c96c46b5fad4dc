// The CUDA backend's indexer (CudaBackend, cuda_backend.h): index scores over float, packed or mirrored keys, and the
// top-k selections on the device, brought back or kept there for the attention.
#include "backend/cuda/cuda_backend.h"

namespace deepinfer {

void CudaBackend::index_scores_batch(std::span<const IndexScoreParams> ps) {
  auto same_shape = [](const IndexScoreParams& a, const IndexScoreParams& b) { return a.n_heads == b.n_heads && a.dim == b.dim; };
  bind_device();
  for_each_run(ps, kMaxGridYZ, same_shape, [&](auto run) { score(run); });
}

bool CudaBackend::index_select_batch(std::span<const IndexSelectParams> ps) {
  if (!device_select_ || ps.empty()) return false;
  int64_t max_keys = 0, block_size = 0, total_select = 0;
  for (const IndexSelectParams& p : ps) {
    DI_CHECK_MSG(p.keep_selected == ps[0].keep_selected && !(p.keep_selected && p.candidates) &&
                     !(p.keep_selected && !keeps_selections()),
                 "index select: kept selections for some tokens and not others, with candidates, or on a backend that keeps none");
    total_select += p.n_select;
    if (p.n_select > cuda::kIndexSelectMax || p.n_select > p.score.n_keys) return false;
    const bool blocks = p.masked || p.candidates;
    if (blocks && (p.block_size <= 0 || (block_size && p.block_size != block_size))) return false;
    if (p.candidates && (p.masked || p.n_candidates > cuda::kIndexSelectMax ||
                         p.n_candidates > (p.score.n_keys + p.block_size - 1) / p.block_size)) {
      return false;
    }
    if (blocks) block_size = p.block_size;
    max_keys = std::max(max_keys, p.score.n_keys);
  }
  if (block_size && cuda::index_select_shared_bytes(max_keys, block_size) + 20 * 1024 > max_shared_bytes_) return false;
  bind_device();
  if (ps[0].keep_selected) {  // the selections stay in selections_dev_, replacing those kept before
    kept_selections_.clear();
    kept_selection_index_.reset(int64_t(ps.size()));
    kept_selected_ = 0;
    selections_dev_.reserve(size_t(std::max<int64_t>(total_select, 1)) * 4);
  }
  auto same_shape = [](const IndexSelectParams& a, const IndexSelectParams& b) {
    return a.score.n_heads == b.score.n_heads && a.score.dim == b.score.dim;
  };
  for_each_run(ps, kMaxGridYZ, same_shape, [&](std::span<const IndexSelectParams> run) {
    select_scores_.clear();
    for (const IndexSelectParams& p : run) select_scores_.push_back(p.score);
    score(select_scores_, run);
  });
  return true;
}

void CudaBackend::score(std::span<const IndexScoreParams> batch, std::span<const IndexSelectParams> selects) {
  const IndexScoreParams& p0 = batch[0];
  index_staging_.wait();  // index_host_ below
  const int64_t T = int64_t(batch.size()), H = p0.n_heads, dim = p0.dim;
  key_arrays_.plan(batch);
  const int64_t max_keys = key_arrays_.max_keys(), total = key_arrays_.total_keys(), n_rows = key_arrays_.n_rows();
  if (max_keys == 0) return;
  const std::vector<IndexKeyArrays::Array>& arrays = key_arrays_.arrays();
  const int64_t n_float_rows = key_arrays_.n_float_rows();
  // The packed keys' bytes: with the mirror only the rows the device lacks, followed by every packed row's slot
  // in the arena and the staged rows' slots; without it every packed array's rows, array after array.
  const bool mirrored = plan_key_upload(arrays, n_float_rows);
  const int64_t row_bytes = mirrored ? key_group_.format.row_bytes : 0;
  const size_t staged_bytes = mirrored ? (key_upload_.staged.size() * size_t(row_bytes) + 15) / 16 * 16 : 0;
  const size_t packed_bytes = mirrored ? staged_bytes + key_upload_.slots.size() * 8 : size_t(key_arrays_.packed_bytes());
  const int64_t qw = T * H * dim + T * H;  // q, then weights
  const int64_t qw_even = qw + (qw & 1);
  const size_t float_key_bytes = size_t(n_float_rows * dim) * 4;
  // The words per token: key count, output offset, first key row; selecting, also the selection's size and
  // offset, the kept blocks' count (-1: no mask) and offset among the kept blocks behind the words, and the
  // candidate blocks' count, their block scores' offset, the candidates' count and their offset (behind the
  // selections).
  const bool selecting = !selects.empty();
  const int64_t n_meta = (selecting ? 11 : 3) * T;
  int64_t n_keep_words = 0, total_select = 0, block_size = 0, total_blocks = 0, total_candidates = 0, max_blocks = 0;
  for (const IndexSelectParams& sp : selects) {
    if (sp.masked) n_keep_words += int64_t(sp.keep_blocks.size());
    if (sp.masked || sp.candidates) block_size = sp.block_size;
    total_select += sp.n_select;
    if (sp.candidates) {
      const int64_t n_blocks = (sp.score.n_keys + sp.block_size - 1) / sp.block_size;
      total_blocks += n_blocks;
      max_blocks = std::max(max_blocks, n_blocks);
      total_candidates += sp.n_candidates;
    }
  }
  // Host staging: q and weights, the words, the kept blocks, the float keys, then the packed section at a 16-byte
  // aligned offset (the device's is too: the scatter reads 4-byte words, the slots are 8 bytes).
  const size_t meta_bytes = size_t(n_meta + n_keep_words) * 8;
  const size_t packed_at = (size_t(qw_even) * 4 + meta_bytes + float_key_bytes + 15) / 16 * 16;
  index_host_.reserve(packed_at + packed_bytes);
  float* q_host = index_host_.get<float>();
  auto* meta_host = reinterpret_cast<int64_t*>(q_host + qw_even);
  auto* float_keys_host = reinterpret_cast<float*>(meta_host + n_meta + n_keep_words);
  uint8_t* packed_host = index_host_.get<uint8_t>() + packed_at;
  // The arrays' copies on the host's threads (a 256-sequence decode step stages 256 of them per layer).
  host_->for_rows(int64_t(arrays.size()), [&](int64_t a0, int64_t a1) {
    for (int64_t i = a0; i < a1; ++i) {
      const IndexKeyArrays::Array& a = arrays[size_t(i)];
      if (a.n_keys == 0) continue;
      if (!a.format) {
        std::memcpy(float_keys_host + a.first_row * dim, a.keys, size_t(a.n_keys * dim) * 4);
        continue;
      }
      if (mirrored) continue;
      const size_t end = size_t(a.first_byte + a.n_keys * a.format->row_bytes);
      size_t at = size_t(a.first_byte);
      for (const PackedRowRun& run : a.runs) {
        const size_t n = std::min(size_t(run.n_rows) * size_t(a.format->row_bytes), end - at);
        std::memcpy(packed_host + at, run.rows, n);
        at += n;
        if (at == end) break;
      }
      DI_CHECK_MSG(at == end, "packed index keys: the runs hold fewer rows than n_keys");
    }
  });
  if (mirrored) {
    copy_staged_rows(key_group_, key_upload_, packed_host);
    std::memcpy(packed_host + staged_bytes, key_upload_.slots.data(), key_upload_.slots.size() * 8);
  }
  // q kept on the device (IndexScoreParams::q_kept): every token's, as the model's.
  for (int64_t t = 0; t < T; ++t) {
    DI_CHECK_MSG(batch[size_t(t)].q_kept == p0.q_kept, "index scores: some tokens' q kept on the device, some not");
  }
  if (!p0.q_kept) {
    copy_pieces_on_threads(host_.get(), T, size_t(H * dim) * 4, [&](int64_t t) { return q_host + t * H * dim; },
                           [&](int64_t t) { return batch[size_t(t)].q; });
  }
  int64_t at = 0;
  for (int64_t t = 0; t < T; ++t) {
    const IndexScoreParams& p = batch[size_t(t)];
    std::memcpy(q_host + T * H * dim + t * H, p.weights, size_t(H) * 4);
    meta_host[t] = p.n_keys;
    meta_host[T + t] = at;
    meta_host[2 * T + t] = arrays[size_t(key_arrays_.array_of(t))].first_row;
    at += p.n_keys;
  }
  if (selecting) {
    int64_t selected_at = 0, keep_at = 0, blocks_at = 0, candidates_at = total_select;
    for (int64_t t = 0; t < T; ++t) {
      const IndexSelectParams& sp = selects[size_t(t)];
      meta_host[3 * T + t] = sp.n_select;
      meta_host[4 * T + t] = selected_at;
      meta_host[5 * T + t] = sp.masked ? int64_t(sp.keep_blocks.size()) : -1;
      meta_host[6 * T + t] = keep_at;
      if (sp.masked) std::copy(sp.keep_blocks.begin(), sp.keep_blocks.end(), meta_host + n_meta + keep_at);
      const int64_t n_blocks = sp.candidates ? (sp.score.n_keys + sp.block_size - 1) / sp.block_size : 0;
      meta_host[7 * T + t] = n_blocks;
      meta_host[8 * T + t] = blocks_at;
      meta_host[9 * T + t] = sp.candidates ? sp.n_candidates : 0;
      meta_host[10 * T + t] = candidates_at;
      selected_at += sp.n_select;
      keep_at += sp.masked ? int64_t(sp.keep_blocks.size()) : 0;
      blocks_at += n_blocks;
      candidates_at += sp.candidates ? sp.n_candidates : 0;
    }
  }
  // Mirrored keys of the index-key format, and no float keys: the kernel reads them packed from the arena, with
  // no float copy of every key each call. Device: rows_ holds the keys as floats [n_rows, dim] (none where the
  // kernel reads them packed), then the packed section as staged.
  const bool read_packed = mirrored && n_float_rows == 0 && key_group_.format.kind == KvRowKind::kFp4Key &&
                           key_group_.format.n_values == dim &&
                           cuda::index_scores_shared_bytes(H, dim, true) <= max_shared_bytes_;
  const size_t packed_dev_at = read_packed ? 0 : (size_t(n_rows * dim) * 4 + 15) / 16 * 16;
  x_.reserve(size_t(qw) * 4);
  index_meta_.reserve(meta_bytes);
  rows_.reserve(packed_dev_at + packed_bytes);
  out_.reserve(size_t(total + total_select + total_candidates + total_blocks) * 4);  // the scores, the selections and
                                                                                    // candidates, the block scores
  const float* q_dev = x_.get<float>();
  if (p0.q_kept) {  // the weights in; q from its kept array
    DI_CUDA_CHECK(cudaMemcpyAsync(x_.get<float>() + T * H * dim, q_host + T * H * dim, size_t(T * H) * 4, cudaMemcpyHostToDevice, stream_));
    q_dev = kept_rows(T, H * dim, [&](int64_t t) { return batch[size_t(t)].q; }, x_.get<float>());
  } else {
    DI_CUDA_CHECK(cudaMemcpyAsync(x_.get(), q_host, size_t(qw) * 4, cudaMemcpyHostToDevice, stream_));
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(index_meta_.get(), meta_host, meta_bytes, cudaMemcpyHostToDevice, stream_));
  if (float_key_bytes) DI_CUDA_CHECK(cudaMemcpyAsync(rows_.get(), float_keys_host, float_key_bytes, cudaMemcpyHostToDevice, stream_));
  uint8_t* packed_dev = rows_.get<uint8_t>() + packed_dev_at;
  if (packed_bytes) DI_CUDA_CHECK(cudaMemcpyAsync(packed_dev, packed_host, packed_bytes, cudaMemcpyHostToDevice, stream_));
  cuda::IndexScoreLaunch l{q_dev, x_.get<float>() + T * H * dim, H, dim, rows_.get<float>(), max_keys, out_.get<float>()};
  if (mirrored) {
    // The rows the arena lacked into their slots; then the kernel reads every key from its slot, or every key is
    // decoded from its slot behind the floats.
    const int64_t n = int64_t(key_group_.rows.size());
    const auto* slots_dev = reinterpret_cast<const int64_t*>(packed_dev + staged_bytes);
    uint8_t* arena = key_upload_.arena->bytes.get<uint8_t>();
    cuda::launch_scatter_rows(packed_dev, int64_t(key_upload_.staged.size()), row_bytes, slots_dev + n, arena, stream_);
    if (read_packed) {
      l.keys = nullptr;
      l.packed_keys = arena;
      l.key_slots = slots_dev;
      l.key_row_bytes = row_bytes;
      l.key_block = key_group_.format.block;
    } else {
      cuda::UnpackRowsLaunch u = unpack_launch(key_group_.format, arena, n, rows_.get<float>() + n_float_rows * dim);
      u.row_slots = slots_dev;
      cuda::launch_unpack_rows(u, stream_);
    }
  } else {
    for (const IndexKeyArrays::Array& a : arrays) {
      if (a.format && a.n_keys) {
        cuda::launch_unpack_rows(unpack_launch(*a.format, packed_dev + a.first_byte, a.n_keys, rows_.get<float>() + a.first_row * dim),
                                 stream_);
      }
    }
  }
  l.n_tokens = T;
  l.token_keys = index_meta_.get<int64_t>();
  l.token_scores_at = index_meta_.get<int64_t>() + T;
  l.token_keys_at = index_meta_.get<int64_t>() + 2 * T;
  if (mma_index_scores_ && H <= cuda::kIndexScoresMmaMaxHeads && cuda::index_scores_mma_shared_bytes(H, dim) <= max_shared_bytes_) {
    cuda::launch_index_scores_mma(l, stream_);
  } else {
    cuda::launch_index_scores(l, stream_);
  }
  if (selecting) {
    const int64_t* meta = index_meta_.get<int64_t>();
    const bool keep = selects[0].keep_selected;
    auto* selected_dev = keep ? selections_dev_.get<int32_t>() + kept_selected_
                              : reinterpret_cast<int32_t*>(out_.get<float>() + total);
    cuda::IndexSelectLaunch sl;
    sl.scores = out_.get<float>();
    sl.token_keys = meta;
    sl.token_scores_at = meta + T;
    sl.token_select = meta + 3 * T;
    sl.token_selected_at = meta + 4 * T;
    sl.keep_blocks = block_size ? meta + n_meta : nullptr;
    sl.token_keep = meta + 5 * T;
    sl.token_keep_at = meta + 6 * T;
    sl.block_size = block_size;
    sl.max_keys = max_keys;
    sl.selected = selected_dev;
    sl.n_tokens = T;
    cuda::launch_index_select(sl, stream_);
    if (total_candidates) {  // V4.1's candidate blocks: their scores, then the same selection over them
      float* block_scores = out_.get<float>() + total + total_select + total_candidates;
      cuda::CandidateBlocksLaunch cl{out_.get<float>(), meta, meta + T, block_size, block_scores, meta + 8 * T, max_blocks, T};
      cuda::launch_candidate_blocks(cl, stream_);
      cuda::IndexSelectLaunch bl;
      bl.scores = block_scores;
      bl.token_keys = meta + 7 * T;
      bl.token_scores_at = meta + 8 * T;
      bl.token_select = meta + 9 * T;
      bl.token_selected_at = meta + 10 * T;
      bl.token_keep = meta + 5 * T;  // unread: no mask
      bl.token_keep_at = meta + 6 * T;
      bl.max_keys = max_blocks;
      bl.selected = selected_dev;
      bl.n_tokens = T;
      cuda::launch_index_select(bl, stream_);
    }
    if (keep) {  // nothing comes back: the attention reads them there (keep_selection_slots)
      for (const IndexSelectParams& sp : selects) {
        if (sp.n_select > 0) {  // (a selection of none is never looked up: SparseAttentionParams::kept_selection)
          kept_selection_index_.try_emplace(reinterpret_cast<uintptr_t>(sp.selected), int32_t(kept_selections_.size()));
          kept_selections_.push_back({sp.n_select, kept_selected_});
        }
        kept_selected_ += sp.n_select;
      }
      index_staging_.queued(stream_);
      return;
    }
    const int64_t n_back = total_select + total_candidates;
    out_host_.reserve(size_t(std::max<int64_t>(n_back, 1)) * 4);
    if (n_back) {
      DI_CUDA_CHECK(cudaMemcpyAsync(out_host_.get(), selected_dev, size_t(n_back) * 4, cudaMemcpyDeviceToHost, stream_));
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto* selected_host = out_host_.get<int32_t>();
    const int32_t* candidates_host = selected_host + total_select;
    for (const IndexSelectParams& sp : selects) {
      std::copy(selected_host, selected_host + sp.n_select, sp.selected);
      selected_host += sp.n_select;
      if (sp.candidates) {
        std::copy(candidates_host, candidates_host + sp.n_candidates, sp.candidates);
        candidates_host += sp.n_candidates;
      }
    }
    return;
  }
  out_host_.reserve(size_t(total) * 4);
  DI_CUDA_CHECK(cudaMemcpyAsync(out_host_.get(), out_.get(), size_t(total) * 4, cudaMemcpyDeviceToHost, stream_));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (int64_t t = 0; t < T; ++t) {
    const IndexScoreParams& p = batch[size_t(t)];
    if (p.n_keys > 0) std::memcpy(p.scores, out_host_.get<float>() + meta_host[T + t], size_t(p.n_keys) * 4);
  }
}

bool CudaBackend::plan_key_upload(const std::vector<IndexKeyArrays::Array>& arrays, int64_t n_float_rows) {
  if (!mirror_rows_) return false;
  SlotGather::PackedGroup& g = key_group_;
  g.rows.clear();
  g.stamps.clear();
  g.runs.clear();
  const KvRowFormat* format = nullptr;
  for (const IndexKeyArrays::Array& a : arrays) {
    if (!a.format || a.n_keys == 0) continue;
    if (format && !(*a.format == *format)) return false;
    format = a.format;
    g.format = *format;
    DI_CHECK_MSG(a.first_row == n_float_rows + int64_t(g.rows.size()), "packed index keys: the arrays' rows are not in order");
    int64_t left = a.n_keys;
    for (const PackedRowRun& run : a.runs) {
      if (!run.stamps) return false;
      const int64_t n = std::min(run.n_rows, left);
      if (n <= 0) continue;
      g.append_run(run, n);  // a page's run of keys, which the mirror finds whole from the next call on
      left -= n;
      if (left == 0) break;
    }
    DI_CHECK_MSG(left == 0, "packed index keys: the runs hold fewer rows than n_keys");
  }
  if (!format) return false;
  g.first_row = n_float_rows;
  plan_upload(g, key_upload_);
  return key_upload_.arena != nullptr;
}

}  // namespace deepinfer
