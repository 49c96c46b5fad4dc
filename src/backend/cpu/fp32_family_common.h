// What the two fp32 kernel families share (simd_avx2.cpp: 8 lanes, simd_avx512.cpp: 16): packing x and the
// PV side of attention. Included by those two files INSIDE their target region and namespace; nowhere else
// (no include guard on purpose). The including file includes <algorithm>, <cstdint>, <vector> and
// simd_kernels.h before its namespace.

// x as fp32 rows of out_stride elements, zero padded past k; for fp4 weights each chunk of 2 * kHalf elements
// holds its kHalf even elements, then its kHalf odd ones (the order in which the packed nibbles decode).
template <int kHalf>
bool pack_x_fp32(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t k, int64_t out_stride,
                 bool fp4_order, void* out) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* src = x + t * x_stride;
    float* dst = static_cast<float*>(out) + t * out_stride;
    if (fp4_order) {
      for (int64_t i = 0; i < k; i += 2 * kHalf) {
        for (int j = 0; j < kHalf; ++j) {
          dst[i + j] = src[i + 2 * j];
          dst[i + kHalf + j] = src[i + 2 * j + 1];
        }
      }
    } else {
      std::copy_n(src, k, dst);
      std::fill(dst + k, dst + out_stride, 0.0f);
    }
  }
  return true;
}

// PV: V rows read from the packed K rows (V = K, and the fp32 packing copies each row exactly, pads as zero
// rows), P as fp32 values of bf16; the family's S adds pv_v and pv_p, which load them. Reading the cache rows in
// place instead, 640 rows scattered over the cache, PV took half of a token's attention (kernel_bench, one core
// of an Ice Lake Xeon); the packed rows are one contiguous stream.
struct Fp32PvRows {
  struct PvSource {
    const float* v = nullptr;  // the packed K rows: V row j at v + j * stride
    int64_t stride = 0;
  };
  using PvRow = float;
  static void pv_prepare(const AttentionLayout& a, const float* p, int64_t /*n_heads*/, PvSource* src,
                         std::vector<uint32_t>*, const PvRow** rows, int64_t* stride) {
    *src = PvSource{static_cast<const float*>(a.k_packed), a.stride};
    *rows = p;
    *stride = a.n_rows;
  }
  static bool pack_v_pairs(const float* const*, int64_t, int64_t, int64_t, uint32_t*) { return true; }
};
