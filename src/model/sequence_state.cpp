// SequenceState's packed stores: window rows, compressed rows and index keys go in through the codecs
// of kv_format.h and never change afterwards (rows are append-only; rollback truncates).
#include "model/sequence_state.h"

#include <cmath>

#include "core/status.h"
#include "model/config.h"

namespace deepinfer {

void CompressorState::append_row(const float* values) {
  Result<uint8_t*> slot = rows.append();
  DI_CHECK_MSG(slot.ok(), slot.ok() ? "" : slot.status().message());
  DI_CHECK_MSG(pack_kv_row(row_format, values, slot.value()), "a cache row is not exactly representable in its packed format");
}

void CompressorState::truncate_rows(int64_t n) { rows.truncate(n); }

void LayerState::store_window_row(int64_t pos, const float* values) {
  uint8_t* row = window.data() + slot(pos) * window_format.row_bytes;
  DI_CHECK_MSG(pack_kv_row(window_format, values, row), "a window row is not exactly representable in its packed format");
  window_stamps[size_t(slot(pos))] = new_row_stamp();
}

SequenceState new_sequence_state(const ModelConfig& c, std::shared_ptr<PagePool> pool) {
  if (!pool) pool = std::make_shared<PagePool>(kDefaultPageBytes, PagePool::kUnlimited);
  const KvFormats formats = kv_formats_of(c);
  auto make_layer = [&](int layer_id) {
    LayerState l;
    l.ring_slots = c.window_size + kSpecSlots;
    l.window_format = formats.window;
    l.window.assign(size_t(l.ring_slots * formats.window.row_bytes), 0);  // slots are written before they are read
    l.window_stamps.assign(size_t(l.ring_slots), 0);
    const int ratio = c.compress_ratio(layer_id);
    if (c.is_v41()) {  // only KV sources own compressed rows and index keys (spec §5.1 "semantics trap")
      if (layer_id < c.n_layers && c.is_kv_source(layer_id)) {
        l.compressor.ratio = ratio;
        l.compressor.width = c.head_dim;
        if (ratio > 1) {  // a ratio-1 source projects each position directly (step 15): no pooling ring
          l.compressor.kv.assign(size_t(l.compressor.ring_rows() * c.head_dim), 0.0f);
          l.compressor.score.assign(size_t(l.compressor.ring_rows() * c.head_dim), -INFINITY);
        }
        l.compressor.row_format = formats.compressed;
        l.compressor.rows = PagedRows(pool, formats.compressed.row_bytes);
        l.index_compressor.ratio = ratio;
        l.index_compressor.width = c.index_head_dim;
        l.index_compressor.row_format = formats.index_key;
        l.index_compressor.rows = PagedRows(pool, formats.index_key.row_bytes);
      }
      return l;
    }
    auto init = [&](CompressorState& cs, int64_t d, const KvRowFormat& row_format) {
      cs.ratio = ratio;
      cs.row_format = row_format;
      cs.rows = PagedRows(pool, row_format.row_bytes);
      cs.width = (ratio == 4 ? 2 : 1) * d;
      cs.kv.assign(size_t(cs.ring_rows() * cs.width), 0.0f);
      cs.score.assign(size_t(cs.ring_rows() * cs.width), -INFINITY);
    };
    if (ratio != 0) init(l.compressor, c.head_dim, formats.compressed);
    if (ratio == 4) init(l.index_compressor, c.index_head_dim, formats.index_key);
    return l;
  };
  SequenceState s;
  for (int l = 0; l < c.n_layers; ++l) s.layers.push_back(make_layer(l));
  for (int m = 0; m < c.n_mtp_layers; ++m) s.mtp_layers.push_back(make_layer(c.n_layers + m));
  return s;
}

int64_t SequenceState::fixed_bytes() const {
  int64_t bytes = 0;
  auto add = [&](const std::vector<LayerState>& layers) {
    for (const auto& l : layers) {
      bytes += int64_t(l.window.size() + l.window_stamps.size() * sizeof(uint64_t));
      bytes += int64_t(l.compressor.kv.size() + l.compressor.score.size() + l.index_compressor.kv.size() +
                       l.index_compressor.score.size()) * int64_t(sizeof(float));
    }
  };
  add(layers);
  add(mtp_layers);
  return bytes;
}

int64_t SequenceState::n_pages() const {
  int64_t n = 0;
  for (const auto* group : {&layers, &mtp_layers}) {
    for (const auto& l : *group) n += l.compressor.rows.n_pages() + l.index_compressor.rows.n_pages();
  }
  return n;
}

int64_t SequenceState::page_bytes() const {
  for (const auto* group : {&layers, &mtp_layers}) {
    for (const auto& l : *group) {
      if (const int64_t b = l.compressor.rows.page_bytes(); b > 0) return b;
      if (const int64_t b = l.index_compressor.rows.page_bytes(); b > 0) return b;
    }
  }
  return 0;
}

int64_t SequenceState::pages_to_grow(int64_t n_new) const {
  int64_t pages = 0;
  for (const LayerState& l : layers) {  // MTP / DSpark rows grow only through forward_mtp
    for (const CompressorState* cs : {&l.compressor, &l.index_compressor}) {
      if (cs->ratio <= 0 || cs->rows.row_bytes() == 0) continue;
      pages += cs->rows.pages_to_append((n_tokens + n_new) / cs->ratio - cs->n_rows());
    }
  }
  return pages;
}

int64_t SequenceState::cache_bytes() const { return fixed_bytes() + n_pages() * page_bytes(); }

}  // namespace deepinfer
