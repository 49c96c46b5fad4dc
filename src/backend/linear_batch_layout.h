// Where a linears() batch's operands sit in one device buffer, and the host side of the copies (free of any
// device API so that the CPU tests cover it). Inputs first: each distinct x (an x that an earlier op of the
// batch reads the same way is placed once, as an expert's w1 and w3 share theirs), as [n_tokens, k_pad] rows
// whose columns past the weight's K are zero (they meet zero weights and must be finite), then each op's bias;
// then every op's output, [n_tokens, n_rows]. Each place starts on a 256-byte boundary. A pinned host buffer
// that mirrors the layout lets the inputs cross in one copy and the outputs in one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace deepinfer {

// Parts of one device buffer (and of its pinned host mirror) laid out one after another, each starting on a
// 256-byte boundary.
struct ScratchLayout {
  size_t bytes = 0;
  size_t take(size_t n) {  // the offset of the next part, of n bytes
    const size_t at = bytes;
    bytes += (n + 255) / 256 * 256;
    return at;
  }
};

// dst[r, 0 .. width) = src[r, 0 .. width) and dst[r, width .. dst_width) = 0 for r < n_rows, strides in floats:
// rows staged for a device that reads them zero-padded, or outputs copied back to their strided place.
void copy_rows(const float* src, int64_t src_stride, int64_t n_rows, int64_t width, float* dst, int64_t dst_stride,
               int64_t dst_width);
// The same on `threads` (nullptr: the calling thread) where the rows are large together (host_copy.h).
void copy_rows_on_threads(Backend* threads, const float* src, int64_t src_stride, int64_t n_rows, int64_t width, float* dst,
                          int64_t dst_stride, int64_t dst_width);

class LinearBatchLayout {
 public:
  struct Place {
    bool empty = true;      // no tokens or no rows: nothing placed, nothing computed
    int64_t k = 0, k_pad = 0;
    bool upload_x = false;  // false: x shares the place of an earlier op's
    size_t x = 0, bias = 0, out = 0;  // byte offsets (bias: kF32AddBias ops only)
  };

  // k[i], k_pad[i]: the input width of op i's weight and its padded width on the device.
  void plan(std::span<const LinearParams> ps, std::span<const int64_t> k, std::span<const int64_t> k_pad);
  const std::vector<Place>& places() const { return places_; }
  size_t input_bytes() const { return input_bytes_; }
  size_t bytes() const { return bytes_; }  // inputs and outputs
  // Writes the inputs into host[0, input_bytes()); large copies on `threads` where given (a batch-256 step's x and
  // outputs are MBs an op).
  void stage_inputs(std::span<const LinearParams> ps, uint8_t* host, Backend* threads = nullptr) const;
  // Copies each op's output from host (the whole layout, outputs in place) to p.out with its stride.
  void scatter_outputs(std::span<const LinearParams> ps, const uint8_t* host, Backend* threads = nullptr) const;

 private:
  std::vector<Place> places_;
  size_t input_bytes_ = 0, bytes_ = 0;
};

}  // namespace deepinfer
