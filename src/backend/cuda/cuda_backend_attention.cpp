// The CUDA backend's sparse attention (CudaBackend, cuda_backend.h): a batch's rows gathered once, packed rows
// mirrored on the device by their stamps, slots built from kept selections, outputs kept on the device.
#include "backend/cuda/cuda_backend.h"

namespace deepinfer {

void CudaBackend::sparse_attentions(std::span<const SparseAttentionParams> ps) {
  // A launch's tokens also agree on the kernel pair (takes_split by each token's own slot count): the fused and split
  // kernels sum in different orders, so a token's path, and its bits, must not depend on a longer batch-mate's list.
  auto same_launch = [&](const SparseAttentionParams& a, const SparseAttentionParams& b) {
    return a.n_heads == b.n_heads && a.head_dim == b.head_dim && a.sink == b.sink && a.softmax_scale == b.softmax_scale &&
           a.block_running_max == b.block_running_max && takes_split(a.n_slots) == takes_split(b.n_slots);
  };
  bind_device();
  for_each_run(ps, kMaxAttentionTokens, same_launch, [&](auto run) { attend(run); });
}

CudaBackend::RowArena* CudaBackend::arena_for(int64_t row_bytes) {
  auto [it, fresh] = arenas_.try_emplace(row_bytes);
  if (fresh) {
    const int64_t capacity = int64_t(mirror_gb_ * 1e9 / 3) / row_bytes;
    DeviceBuffer bytes = capacity > 0 ? DeviceBuffer::try_allocate(size_t(capacity * row_bytes)) : DeviceBuffer();
    if (bytes.get()) it->second = std::make_unique<RowArena>(RowArena{RowMirror(capacity), std::move(bytes)});
    else std::fprintf(stderr, "%s: no device memory for the row mirror (%lld B rows); they are copied each call\n",
                      name_.c_str(), (long long)row_bytes);
  }
  return it->second.get();
}

void CudaBackend::plan_upload(const SlotGather::PackedGroup& g, PackedUpload& u) {
  const int64_t n = int64_t(g.rows.size());
  u.arena = mirror_rows_ && g.format.row_bytes % 4 == 0 ? arena_for(g.format.row_bytes) : nullptr;
  const bool stamped = std::find(g.stamps.begin(), g.stamps.end(), uint64_t(0)) == g.stamps.end();
  if (!u.arena || !stamped || n > u.arena->mirror.capacity()) {
    u.arena = nullptr;
    u.staged.resize(size_t(n));
    std::iota(u.staged.begin(), u.staged.end(), int64_t(0));
    u.slots.clear();
    return;
  }
  mirror_group_slots(u.arena->mirror, g, host_.get(), u.slots, u.staged);
  for (int64_t k : u.staged) u.slots.push_back(u.slots[size_t(k)]);  // the copied rows' slots, for the scatter
}

void CudaBackend::copy_staged_rows(const SlotGather::PackedGroup& g, const PackedUpload& u, uint8_t* dst) {
  const size_t row_bytes = size_t(g.format.row_bytes);
  host_->for_rows(int64_t(u.staged.size()), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) std::memcpy(dst + size_t(s) * row_bytes, g.rows[size_t(u.staged[size_t(s)])], row_bytes);
  });
}

void CudaBackend::attend(std::span<const SparseAttentionParams> batch) {
  const SparseAttentionParams& p0 = batch[0];
  const int64_t T = int64_t(batch.size()), H = p0.n_heads, D = p0.head_dim;
  // Kept q and outputs (backend.h): every token of a call the same, as the model's are.
  for (const SparseAttentionParams& p : batch) {
    DI_CHECK_MSG(p.q_kept == p0.q_kept && (p.out_rope != nullptr) == (p0.out_rope != nullptr),
                 "sparse attention: some tokens' q or outputs kept on the device, some not");
  }
  attention_staging_.wait();
  gather_.gather(batch, host_.get());
  const int64_t n_slots = gather_.n_slots(), n_float = int64_t(gather_.float_rows().size());
  const int64_t n_rows = gather_.n_rows();
  const std::vector<SlotGather::PackedGroup>& groups = gather_.packed_groups();
  uploads_.resize(groups.size());
  size_t packed_bytes = 0;
  int64_t n_slot_words = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    PackedUpload& u = uploads_[i];
    plan_upload(groups[i], u);
    u.byte_at = packed_bytes;  // a multiple of 16 from the packed bytes' start (itself only 4-byte aligned, below)
    packed_bytes += (u.staged.size() * size_t(groups[i].format.row_bytes) + 15) / 16 * 16;
    u.slot_at = n_slot_words;
    n_slot_words += int64_t(u.slots.size());
  }
  // The attention reads the packed rows as they are when it can: its kernels take a few groups; their shared
  // memory then holds each slot's row address too (the kernel the decoded rows would get must still fit); and
  // no two groups share an arena (one row size), since a later group's placing may reuse an earlier group's
  // slots, which the decoded path has read by then and the attention would read after.
  const bool split = takes_split(n_slots);
  const size_t packed_shared =
      split ? cuda::sparse_attention_split_shared_bytes(n_slots, true) : cuda::sparse_attention_shared_bytes(n_slots, true);
  bool read_packed = packed_attention_rows_ && !groups.empty() && groups.size() <= size_t(cuda::kMaxAttentionPackedGroups) &&
                     packed_shared <= max_shared_bytes_;
  for (size_t i = 0; read_packed && i < groups.size(); ++i) {
    for (size_t k = 0; k < i; ++k) read_packed = read_packed && !(uploads_[i].arena && uploads_[i].arena == uploads_[k].arena);
  }
  const int64_t n_decoded = read_packed ? n_float : n_rows;  // the float rows on the device
  // The slots after the packed bytes, at an 8-byte aligned device address (the packed bytes start 4-byte aligned,
  // behind the rows, q and sink, from the 256-byte aligned rows_).
  const size_t misalign = size_t(n_decoded * D + T * H * D + H) * 4 % 8;
  const size_t slot_words_at = (packed_bytes + misalign + 7) / 8 * 8 - misalign;
  const size_t packed_and_slots = slot_words_at + size_t(n_slot_words) * 8;
  rows_host_.reserve(size_t(n_float * D + T * H * D + H) * 4 + packed_and_slots);
  float* rows = rows_host_.get<float>();
  // The rows' copies into staging on the host's threads: a 256-sequence decode step gathers ~160k rows
  // (335 MB as floats) per layer, more than one thread copies in a few milliseconds.
  host_->for_rows(n_float, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(rows + r * D, gather_.float_rows()[size_t(r)], size_t(D) * 4);
  });
  float* q_host = rows + n_float * D;  // [T, H, D] after the float rows
  if (!p0.q_kept) {
    copy_pieces_on_threads(host_.get(), T, size_t(H * D) * 4, [&](int64_t t) { return q_host + t * H * D; },
                           [&](int64_t t) { return batch[size_t(t)].q; });
  }
  std::memcpy(q_host + T * H * D, p0.sink, size_t(H) * 4);  // then the sink
  auto* packed_host = reinterpret_cast<uint8_t*>(q_host + T * H * D + H);  // then the staged rows' bytes
  for (size_t i = 0; i < groups.size(); ++i) copy_staged_rows(groups[i], uploads_[i], packed_host + uploads_[i].byte_at);
  for (const PackedUpload& u : uploads_) {  // then the arenas' slots (host side possibly unaligned: memcpy)
    if (!u.slots.empty()) {
      copy_on_threads(host_.get(), packed_host + slot_words_at + size_t(u.slot_at) * 8, u.slots.data(), u.slots.size() * 8);
    }
  }
  // The slot rows, then for kept selections each token's words and the tables (keep_selection_slots).
  const std::vector<int32_t>& tables = gather_.selection_tables();
  const bool kept_selections = !tables.empty();
  const size_t words_at = (size_t(T * n_slots) * 4 + 7) / 8 * 8;
  const size_t index_bytes = kept_selections ? words_at + size_t(T * cuda::kSelectedSlotsWords) * 8 + tables.size() * 4
                                             : size_t(T * n_slots) * 4;
  slot_host_.reserve(std::max<size_t>(index_bytes, 4));
  int32_t* slot_row = slot_host_.get<int32_t>();
  copy_on_threads(host_.get(), slot_row, gather_.slot_rows().data(), size_t(T * n_slots) * 4);
  if (kept_selections) keep_selection_slots(batch, slot_host_.get<uint8_t>() + words_at);

  // Device: the float rows and the decoded packed rows, then q, then sink, then the staged packed bytes and the
  // arenas' slots; slot indices; outputs. The host's [float rows][q, sink, packed bytes, slots] go over in two
  // copies.
  const size_t staged = size_t(T * H * D + H) * 4 + packed_and_slots;
  rows_.reserve(size_t(n_decoded * D) * 4 + staged);
  index_.reserve(std::max<size_t>(index_bytes, 4));
  out_.reserve(size_t(T * H * D) * 4);
  float* rows_dev = rows_.get<float>();
  float* q_dev = rows_dev + n_decoded * D;
  float* sink_dev = q_dev + T * H * D;
  const auto* packed_dev = reinterpret_cast<const uint8_t*>(sink_dev + H);
  const auto* slots_dev = reinterpret_cast<const int64_t*>(packed_dev + slot_words_at);
  if (n_float) DI_CUDA_CHECK(cudaMemcpyAsync(rows_dev, rows, size_t(n_float * D) * 4, cudaMemcpyHostToDevice, stream_));
  const float* q_in = q_dev;
  if (p0.q_kept) {  // the staged part from the sink on; q from its kept array
    DI_CUDA_CHECK(cudaMemcpyAsync(sink_dev, q_host + T * H * D, staged - size_t(T * H * D) * 4, cudaMemcpyHostToDevice, stream_));
    q_in = kept_rows(T, H * D, [&](int64_t t) { return batch[size_t(t)].q; }, q_dev);
  } else {
    DI_CUDA_CHECK(cudaMemcpyAsync(q_dev, q_host, staged, cudaMemcpyHostToDevice, stream_));
  }
  cuda::AttentionLaunch a{q_in, H, D, rows_dev, nullptr, n_slots, sink_dev, p0.softmax_scale, p0.block_running_max,
                          out_.get<float>()};
  a.n_tokens = T;
  for (size_t i = 0; i < groups.size(); ++i) {
    const SlotGather::PackedGroup& g = groups[i];
    const PackedUpload& u = uploads_[i];
    const int64_t n = int64_t(g.rows.size());
    // Where the group's rows are on the device: staged one after another, or in the arena's slots (the rows it
    // lacked scattered there first; stream order keeps an earlier group's reads of a slot before a later
    // group's write to it).
    cuda::UnpackRowsLaunch l = unpack_launch(g.format, packed_dev + u.byte_at, n, rows_dev + g.first_row * D);
    if (u.arena) {
      l.rows = u.arena->bytes.get<uint8_t>();
      l.row_slots = slots_dev + u.slot_at;
      cuda::launch_scatter_rows(packed_dev + u.byte_at, int64_t(u.staged.size()), g.format.row_bytes, slots_dev + u.slot_at + n,
                                u.arena->bytes.get<uint8_t>(), stream_);
    }
    if (read_packed) {
      a.packed[a.n_packed++] = {g.first_row, n, l.rows, l.row_slots, l.row_bytes, l.kind, int32_t(l.n_rope), int32_t(l.block)};
    } else {
      cuda::launch_unpack_rows(l, stream_);
    }
  }
  if (n_slots) DI_CUDA_CHECK(cudaMemcpyAsync(index_.get(), slot_row, index_bytes, cudaMemcpyHostToDevice, stream_));
  a.slot_row = index_.get<int32_t>();
  if (kept_selections) {
    const auto* words = reinterpret_cast<const int64_t*>(index_.get<uint8_t>() + words_at);
    cuda::launch_selected_slots({index_.get<int32_t>(), n_slots, selections_dev_.get<int32_t>(),
                                 reinterpret_cast<const int32_t*>(words + T * cuda::kSelectedSlotsWords), words, T},
                                stream_);
  }
  if (split) {
    scores_.reserve(size_t(std::max<int64_t>(T * H * n_slots, 1)) * 4);
    cuda::launch_sparse_attention_split(a, scores_.get<float>(), stream_);
  } else {
    DI_CHECK_MSG(cuda::sparse_attention_shared_bytes(n_slots, read_packed) <= max_shared_bytes_,
                 "sparse attention: " + std::to_string(n_slots) + " slots need more shared memory than the device has per block");
    cuda::launch_sparse_attention(a, stream_);
  }
  if (p0.out_rope) {
    keep_outputs(batch);
    return;
  }
  out_host_.reserve(size_t(T * H * D) * 4);
  DI_CUDA_CHECK(cudaMemcpyAsync(out_host_.get(), out_.get(), size_t(T * H * D) * 4, cudaMemcpyDeviceToHost, stream_));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  copy_pieces_on_threads(host_.get(), T, size_t(H * D) * 4, [&](int64_t t) { return batch[size_t(t)].out; },
                         [&](int64_t t) { return out_host_.get<float>() + t * H * D; });
}

void CudaBackend::keep_selection_slots(std::span<const SparseAttentionParams> batch, uint8_t* dst) {
  const int64_t T = int64_t(batch.size());
  std::vector<int64_t> words(size_t(T * cuda::kSelectedSlotsWords), 0);
  for (int64_t t = 0; t < T; ++t) {
    const KeptSelectionSlots* k = batch[size_t(t)].kept_selection;
    if (!k || k->n == 0) continue;
    const int64_t i = kept_selection_index_.find(reinterpret_cast<uintptr_t>(k->selected));
    DI_CHECK_MSG(i >= 0 && kept_selections_[size_t(i)].n == k->n, name_ + ": a selection said to be kept on the device is not");
    int64_t* w = &words[size_t(t * cuda::kSelectedSlotsWords)];
    w[0] = k->n;
    w[1] = kept_selections_[size_t(i)].at;
    w[2] = k->at;
    w[3] = gather_.selection_table_at(t);
    w[4] = k->n_rows;
    w[5] = k->ascending ? 1 : 0;
  }
  std::memcpy(dst, words.data(), words.size() * 8);
  const std::vector<int32_t>& tables = gather_.selection_tables();
  copy_on_threads(host_.get(), dst + words.size() * 8, tables.data(), tables.size() * 4);
}

void CudaBackend::keep_outputs(std::span<const SparseAttentionParams> batch) {
  const SparseAttentionParams& p0 = batch[0];
  const HeadRope& r0 = *p0.out_rope;
  const int64_t T = int64_t(batch.size()), H = p0.n_heads, D = p0.head_dim, RD = r0.rope_dim;
  rope_host_.reserve(size_t(T * RD) * 4);
  rope_dev_.reserve(size_t(T * RD) * 4);
  for (int64_t t = 0; t < T; ++t) {
    const SparseAttentionParams& p = batch[size_t(t)];
    const HeadRope& r = *p.out_rope;
    DI_CHECK_MSG(r.n_heads == H && r.head_dim == D && r.rope_dim == RD && r.inverse == r0.inverse && !r.normalize &&
                     p.out_kept_array == p0.out_kept_array && p.out_kept_floats == p0.out_kept_floats &&
                     p.out >= p.out_kept_array && p.out + H * D <= p.out_kept_array + p.out_kept_floats,
                 "sparse attention: a token's out_rope or kept output array differs from the call's");
    std::memcpy(rope_host_.get<float>() + t * RD, r.cos_sin, size_t(RD) * 4);
  }
  const bool consecutive = one_run(T, H * D, [&](int64_t t) { return batch[size_t(t)].out; });
  float* kept = keep_array(p0.out_kept_array, p0.out_kept_floats);
  DI_CUDA_CHECK(cudaMemcpyAsync(rope_dev_.get(), rope_host_.get(), size_t(T * RD) * 4, cudaMemcpyHostToDevice, stream_));
  const float* out = out_.get<float>();
  const float* cos_sin = rope_dev_.get<float>();
  for (int64_t t0 = 0; t0 < T;) {  // runs of consecutive outputs
    const int64_t n = consecutive ? T : 1;
    cuda::launch_head_rope({{out + t0 * H * D, H * D, kept + (batch[size_t(t0)].out - p0.out_kept_array), H * D, n, H, D, RD,
                             cos_sin + t0 * RD},
                            r0.inverse, false, 0.0},
                           stream_);
    t0 += n;
  }
  attention_staging_.queued(stream_);
}

}  // namespace deepinfer
