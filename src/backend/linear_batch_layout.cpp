// LinearBatchLayout: see linear_batch_layout.h.
#include "backend/linear_batch_layout.h"

#include <algorithm>
#include <cstring>

#include "backend/host_copy.h"
#include "core/status.h"

namespace deepinfer {

void copy_rows(const float* src, int64_t src_stride, int64_t n_rows, int64_t width, float* dst, int64_t dst_stride,
               int64_t dst_width) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = dst + r * dst_stride;
    std::memcpy(row, src + r * src_stride, size_t(width) * 4);
    std::fill(row + width, row + dst_width, 0.0f);
  }
}

void copy_rows_on_threads(Backend* threads, const float* src, int64_t src_stride, int64_t n_rows, int64_t width, float* dst,
                          int64_t dst_stride, int64_t dst_width) {
  for_rows_on(threads_for_copy(threads, size_t(n_rows * dst_width) * 4), n_rows, [&](int64_t r0, int64_t r1) {
    copy_rows(src + r0 * src_stride, src_stride, r1 - r0, width, dst + r0 * dst_stride, dst_stride, dst_width);
  });
}

void LinearBatchLayout::plan(std::span<const LinearParams> ps, std::span<const int64_t> k, std::span<const int64_t> k_pad) {
  DI_CHECK(k.size() == ps.size() && k_pad.size() == ps.size());
  places_.assign(ps.size(), Place{});
  ScratchLayout layout;
  for (size_t i = 0; i < ps.size(); ++i) {
    const LinearParams& p = ps[i];
    if (p.n_tokens == 0 || p.n_rows == 0) continue;
    DI_CHECK(k[i] <= k_pad[i]);
    Place& place = places_[i];
    place.empty = false;
    place.k = k[i];
    place.k_pad = k_pad[i];
    place.upload_x = true;
    for (size_t j = 0; j < i; ++j) {  // the same x, read the same way, by an earlier op of the batch
      const LinearParams& q = ps[j];
      const Place& other = places_[j];
      if (!other.empty && q.x == p.x && q.x_stride == p.x_stride && q.n_tokens == p.n_tokens && other.k == place.k &&
          other.k_pad == place.k_pad) {
        place.upload_x = false;
        place.x = other.x;
        break;
      }
    }
    if (place.upload_x) place.x = layout.take(size_t(p.n_tokens * place.k_pad) * 4);
    if (p.epilogue == Epilogue::kF32AddBias) place.bias = layout.take(size_t(p.n_tokens * p.n_rows) * 4);
  }
  input_bytes_ = layout.bytes;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!places_[i].empty) places_[i].out = layout.take(size_t(ps[i].n_tokens * ps[i].n_rows) * 4);
  }
  bytes_ = layout.bytes;
}

void LinearBatchLayout::stage_inputs(std::span<const LinearParams> ps, uint8_t* host, Backend* threads) const {
  for (size_t i = 0; i < ps.size(); ++i) {
    const Place& place = places_[i];
    if (place.empty) continue;
    const LinearParams& p = ps[i];
    if (place.upload_x) {
      copy_rows_on_threads(threads, p.x, p.x_stride, p.n_tokens, place.k, reinterpret_cast<float*>(host + place.x), place.k_pad,
                           place.k_pad);
    }
    if (p.epilogue == Epilogue::kF32AddBias) copy_on_threads(threads, host + place.bias, p.bias, size_t(p.n_tokens * p.n_rows) * 4);
  }
}

void LinearBatchLayout::scatter_outputs(std::span<const LinearParams> ps, const uint8_t* host, Backend* threads) const {
  for (size_t i = 0; i < ps.size(); ++i) {
    const Place& place = places_[i];
    if (place.empty) continue;
    const LinearParams& p = ps[i];
    copy_rows_on_threads(threads, reinterpret_cast<const float*>(host + place.out), p.n_rows, p.n_tokens, p.n_rows, p.out,
                         p.out_stride, p.n_rows);
  }
}

}  // namespace deepinfer
