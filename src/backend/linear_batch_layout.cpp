// LinearBatchLayout: see linear_batch_layout.h.
#include "backend/linear_batch_layout.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace deepinfer {

namespace {
size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

void LinearBatchLayout::plan(std::span<const LinearParams> ps, std::span<const int64_t> k, std::span<const int64_t> k_pad) {
  DI_CHECK(k.size() == ps.size() && k_pad.size() == ps.size());
  places_.assign(ps.size(), Place{});
  size_t at = 0;
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
    if (place.upload_x) {
      place.x = at;
      at += aligned(size_t(p.n_tokens * place.k_pad) * 4);
    }
    if (p.epilogue == Epilogue::kF32AddBias) {
      place.bias = at;
      at += aligned(size_t(p.n_tokens * p.n_rows) * 4);
    }
  }
  input_bytes_ = at;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (places_[i].empty) continue;
    places_[i].out = at;
    at += aligned(size_t(ps[i].n_tokens * ps[i].n_rows) * 4);
  }
  bytes_ = at;
}

void LinearBatchLayout::stage_inputs(std::span<const LinearParams> ps, uint8_t* host) const {
  for (size_t i = 0; i < ps.size(); ++i) {
    const Place& place = places_[i];
    if (place.empty) continue;
    const LinearParams& p = ps[i];
    if (place.upload_x) {
      for (int64_t t = 0; t < p.n_tokens; ++t) {
        float* row = reinterpret_cast<float*>(host + place.x) + t * place.k_pad;
        std::memcpy(row, p.x + t * p.x_stride, size_t(place.k) * 4);
        std::fill(row + place.k, row + place.k_pad, 0.0f);
      }
    }
    if (p.epilogue == Epilogue::kF32AddBias) std::memcpy(host + place.bias, p.bias, size_t(p.n_tokens * p.n_rows) * 4);
  }
}

void LinearBatchLayout::scatter_outputs(std::span<const LinearParams> ps, const uint8_t* host) const {
  for (size_t i = 0; i < ps.size(); ++i) {
    const Place& place = places_[i];
    if (place.empty) continue;
    const LinearParams& p = ps[i];
    const float* out = reinterpret_cast<const float*>(host + place.out);
    for (int64_t t = 0; t < p.n_tokens; ++t) std::memcpy(p.out + t * p.out_stride, out + t * p.n_rows, size_t(p.n_rows) * 4);
  }
}

}  // namespace deepinfer
