// Copies on a host backend's threads (host_copy.h, copy_rows_on_threads): the same bytes as one memcpy, for sizes
// below, at and past the threshold and past a whole number of pieces, and rows padded with zeros as copy_rows pads
// them; nothing written outside the destination.
#include "backend/host_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "backend/linear_batch_layout.h"

namespace deepinfer {
namespace {

TEST(HostCopy, CopiesOnThreadsEqualOneMemcpy) {
  std::string error;
  const std::unique_ptr<Backend> threads = make_fast_backend(2, &error);
  ASSERT_TRUE(threads) << error;
  for (size_t bytes : {size_t(0), size_t(5), kThreadedCopyBytes - 1, kThreadedCopyBytes, 3 * kThreadedCopyBytes + 12345}) {
    std::vector<uint8_t> src(bytes), dst(bytes + 64, 0xab);
    std::iota(src.begin(), src.end(), uint8_t(1));
    copy_on_threads(threads.get(), dst.data() + 32, src.data(), bytes);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 32)) << bytes << " bytes";
    EXPECT_TRUE(std::all_of(dst.begin(), dst.begin() + 32, [](uint8_t b) { return b == 0xab; })) << bytes << " bytes";
    EXPECT_TRUE(std::all_of(dst.end() - 32, dst.end(), [](uint8_t b) { return b == 0xab; })) << bytes << " bytes";
  }
  // 300 pieces of 4 KB (1.2 MB together: on the threads), each to its own place in reverse order.
  const int64_t n = 300;
  const size_t piece = 4096;
  std::vector<uint8_t> src(n * piece), dst(n * piece, 0);
  std::iota(src.begin(), src.end(), uint8_t(3));
  copy_pieces_on_threads(threads.get(), n, piece, [&](int64_t i) { return &dst[size_t(n - 1 - i) * piece]; },
                         [&](int64_t i) { return &src[size_t(i) * piece]; });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::equal(&src[size_t(i) * piece], &src[size_t(i + 1) * piece], &dst[size_t(n - 1 - i) * piece])) << "piece " << i;
  }
}

TEST(HostCopy, RowsOnThreadsEqualCopyRows) {
  std::string error;
  const std::unique_ptr<Backend> threads = make_fast_backend(2, &error);
  ASSERT_TRUE(threads) << error;
  // 700 rows of 500 of 600 floats, into rows of 512 (12 padded): 1.4 MB, on the threads.
  const int64_t n_rows = 700, width = 500, src_stride = 600, dst_width = 512, dst_stride = 520;
  std::vector<float> src(size_t(n_rows * src_stride));
  std::iota(src.begin(), src.end(), 1.0f);
  std::vector<float> want(size_t(n_rows * dst_stride), -1.0f), got = want;
  copy_rows(src.data(), src_stride, n_rows, width, want.data(), dst_stride, dst_width);
  copy_rows_on_threads(threads.get(), src.data(), src_stride, n_rows, width, got.data(), dst_stride, dst_width);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace deepinfer
