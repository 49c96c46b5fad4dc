// UTF-8 validation and lossy repair (Unicode "maximal subpart" replacement, as Rust's Utf8Chunks).
#include "core/utf8.h"

#include "core/status.h"

namespace deepinfer {

namespace {

// How a sequence starting at bytes[0] ends. kValid: `length` bytes are one code point. kInvalid: `length`
// bytes (1..3) are a maximal ill-formed subpart. kTruncated: all remaining bytes are a valid prefix.
enum class SeqKind { kValid, kInvalid, kTruncated };
struct SeqInfo {
  SeqKind kind;
  size_t length;
};

// Ranges for the second byte by lead byte (Unicode Table 3-7, "Well-Formed UTF-8 Byte Sequences").
SeqInfo classify(std::string_view b) {
  const uint8_t b0 = static_cast<uint8_t>(b[0]);
  if (b0 < 0x80) return {SeqKind::kValid, 1};
  size_t width = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    width = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    width = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    width = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SeqKind::kInvalid, 1};
  }
  for (size_t i = 1; i < width; ++i) {
    if (i >= b.size()) return {SeqKind::kTruncated, b.size()};
    const uint8_t c = static_cast<uint8_t>(b[i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (c < l || c > h) return {SeqKind::kInvalid, i};
  }
  return {SeqKind::kValid, width};
}

}  // namespace

size_t utf8_sequence_length(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const SeqInfo s = classify(bytes);
  return s.kind == SeqKind::kValid ? s.length : 0;
}

bool utf8_is_valid(std::string_view bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, bytes.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<uint8_t>(bytes[i]) < 0x80) { ++i; continue; }
    const SeqInfo s = classify(bytes.substr(i));
    if (s.kind != SeqKind::kValid) return false;
    i += s.length;
  }
  return true;
}

size_t append_utf8_lossy_prefix(std::string_view bytes, bool at_end, std::string* out) {
  size_t i = 0, run_start = 0;
  const size_t n = bytes.size();
  while (i < n) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) { ++i; continue; }
    const SeqInfo s = classify(bytes.substr(i));
    if (s.kind == SeqKind::kValid) { i += s.length; continue; }
    out->append(bytes.substr(run_start, i - run_start));
    if (s.kind == SeqKind::kTruncated && !at_end) return i;
    out->append(kUtf8Replacement);
    i += s.length;
    run_start = i;
  }
  out->append(bytes.substr(run_start, n - run_start));
  return n;
}

void append_utf8_lossy(std::string_view bytes, std::string* out) {
  const size_t consumed = append_utf8_lossy_prefix(bytes, /*at_end=*/true, out);
  DI_CHECK(consumed == bytes.size());
}

void append_utf8(char32_t cp, std::string* out) {
  DI_CHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF));
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t utf8_decode(std::string_view bytes, size_t n) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(bytes[i])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: DI_CHECK_MSG(false, "utf8_decode: bad length " + std::to_string(n));
  }
  return 0;
}

}  // namespace deepinfer
