// The packed serving formats of the KV caches (spec §4.4 for V4, §8.3 for V4.1) and their row codecs.
// A row is packed from the floats the model's QDQ produced (ops.h) and unpacks to exactly those floats:
// pack_kv_row picks, per block, a scale under which every value is a code of the element format and checks
// the decoded value bit for bit (sign of zero included); it returns false instead of rounding anything.
// Pure codecs: no model or sequence state here. Row layout: element codes, then (V4) bf16 rope, then scales.
#pragma once

#include <cstdint>

namespace deepinfer {

struct ModelConfig;

enum class KvRowKind {
  kV4Kv,     // V4 window / compressed row: nope e4m3, e8m0 scale per 64; rope bf16; pad (584 B at 512/64)
  kV41Kv,    // V4.1 window row: e4m3, e8m0 scale per 32 (528 B at 512)
  kV41Fp4,   // V4.1 compressed row "V41_FP4": e2m1, e4m3 scale per 16 (288 B at 512)
  kFp4Key,   // index key (V4 and V4.1): e2m1, e8m0 scale per 32 (68 B at 128)
};

struct KvRowFormat {
  KvRowKind kind = KvRowKind::kV4Kv;
  int64_t n_values = 0;   // floats per row
  int64_t n_rope = 0;     // kV4Kv: the trailing values stored as bf16
  int64_t block = 0;      // values per scale
  int64_t n_scales = 0;
  int64_t row_bytes = 0;  // codes + rope + scales (+ pad to a multiple of 8 for kV4Kv)
  bool operator==(const KvRowFormat&) const = default;
};

KvRowFormat kv_row_format(KvRowKind kind, int64_t n_values, int64_t n_rope = 0);

// The formats of one model's caches (window ring rows, compressed rows, index keys).
struct KvFormats {
  KvRowFormat window;
  KvRowFormat compressed;
  KvRowFormat index_key;
};
KvFormats kv_formats_of(const ModelConfig& config);

// values: [n_values] QDQ'd floats; out: [row_bytes]. False when some value has no exact code (a bug
// upstream: the value did not come from this format's QDQ).
[[nodiscard]] bool pack_kv_row(const KvRowFormat& format, const float* values, uint8_t* out);
// row: [row_bytes] -> out: [n_values] floats.
void unpack_kv_row(const KvRowFormat& format, const uint8_t* row, float* out);
// rows: [n_rows, row_bytes] -> out: [n_rows, n_values].
void unpack_kv_rows(const KvRowFormat& format, const uint8_t* rows, int64_t n_rows, float* out);

}  // namespace deepinfer
