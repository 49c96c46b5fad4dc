// CUDA sparse attention and indexer scores against the exact reference, on the cases and bounds of the
// CPU kernel tests (tests/kernel/attention_test.cpp, index_scores_test.cpp).
// Attention, per output: 2 bf16 ulps of ref + 2^-10 of the head's largest |output|; both max variants
// (V4 64-block running max, V4.1 global max), empty slots, whole empty blocks, fp32 rows.
// Attention runs on both paths (DEEPINFER_CUDA_ATTENTION: the fused kernel and the split pair).
// Index scores, per score: 2 bf16 ulps of ref + 2^-7 * sum_h |p_h|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "kernel/attention_case.h"
#include "kernel/kernel_bounds.h"
#include "kernel/kernel_test_util.h"
#include "model/kv_format.h"
#include "model/ops.h"

namespace deepinfer::testing {
namespace {

// Random attention sinks, one per head, of about the model's size.
std::vector<float> random_sink(std::mt19937& rng, int64_t n_heads) {
  std::vector<float> sink(static_cast<size_t>(n_heads));
  for (auto& v : sink) v = std::normal_distribution<float>(0.0f, 0.8f)(rng);
  return sink;
}

void run_attention(const AttentionCase& c, uint32_t seed) {
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(seed);
  const int64_t H = c.n_heads, D = c.head_dim;
  const AttentionInputs in = make_attention_inputs(c, rng);
  auto reference = make_reference_backend();
  for (bool running : {true, false}) {
    std::vector<float> ref(size_t(H * D)), got(size_t(H * D), -7.0f);
    SparseAttentionParams p{in.q.data(), H, D, in.slots.data(), int64_t(in.slots.size()), in.sink.data(), in.softmax_scale, running, ref.data()};
    reference->sparse_attention(p);
    p.out = got.data();
    gpu->sparse_attention(p);
    const Diff d = expect_attention_within_bounds(ref, got, H, D, c.fp32_rows, c.name + " running=" + std::to_string(running), "cuda");
    print_diff(std::string(gpu->name()) + " " + c.name + (running ? " [block max]" : " [global max]"), d);
  }
}

class SparseAttentionCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseAttentionCuda, DecodeWindowPlusTopK) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  run_attention({"decode ratio-4: 128 window + 512 top-k"}, 1);
  AttentionCase v41{"V4.1 real softmax scale, 1024 top-k"};
  v41.n_compressed = 1024;
  v41.n_compressed_filled = 1000;
  v41.softmax_scale = 1.0 / std::sqrt(512.0);
  run_attention(v41, 7);
}

TEST_P(SparseAttentionCuda, ShortContextAndEmptySlots) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  AttentionCase c{"short context: 37 window rows, 9 compressed rows"};
  c.n_window_filled = 37;
  c.n_compressed = 64;
  c.n_compressed_filled = 9;
  run_attention(c, 2);
  AttentionCase e{"prefill layout: odd fills, an empty 64-block"};
  e.n_window_filled = 101;
  e.n_compressed_filled = 333;
  e.empty_block = 2;
  run_attention(e, 3);
  AttentionCase w{"window only (ratio 0), 1 row"};
  w.n_window_filled = 1;
  w.n_compressed = 0;
  w.n_compressed_filled = 0;
  run_attention(w, 4);
}

TEST_P(SparseAttentionCuda, SharpSoftmaxSmallHeads) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  AttentionCase c{"sharp scores, 8 heads x 128"};
  c.n_heads = 8;
  c.head_dim = 128;
  c.n_compressed_filled = 300;
  c.score_scale = 3.0f;
  run_attention(c, 5);
}

TEST_P(SparseAttentionCuda, NonBf16Rows) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  AttentionCase c{"fp32 kv rows"};
  c.n_heads = 16;
  c.n_compressed_filled = 200;
  c.fp32_rows = true;
  run_attention(c, 6);
}

// Shapes off every tile edge of the split kernels (8 heads, 32 / 128 columns, 128-slot steps): 12 heads,
// head_dim 100, 192 slots; and 3 heads x 40 with the window alone.
TEST_P(SparseAttentionCuda, OddHeadsAndWidths) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  run_attention({.name = "12 heads x 100, 128 window + 64 compressed", .n_heads = 12, .head_dim = 100, .n_compressed = 64,
                 .n_compressed_filled = 50},
                8);
  run_attention({.name = "3 heads x 40, window only", .n_heads = 3, .head_dim = 40, .n_window_filled = 70, .n_compressed = 0,
                 .n_compressed_filled = 0},
                9);
}

// A prefill block's tokens in one sparse_attentions call: they share most rows (the backend gathers each
// once) and have slot lists of different lengths (padded to the longest). Each token's outputs must be
// within the bound of the reference and equal to those of the same token run alone: a token's result never
// depends on its batch.
TEST_P(SparseAttentionCuda, BatchedTokensShareRowsAndMatchSingleRuns) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  DI_MAKE_CUDA_BACKEND(gpu);
  auto reference = make_reference_backend();
  std::mt19937 rng(11);
  const int64_t H = 16, D = 512, n_pool = 400, T = 9;
  std::vector<float> pool = random_bf16_values(rng, n_pool * D, 1.0f);
  std::vector<float> q = random_bf16_values(rng, T * H * D, 1.0f);
  std::vector<float> sink = random_sink(rng, H);
  std::vector<std::vector<const float*>> slots(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    auto& sl = slots[size_t(t)];
    for (int64_t j = 0; j < 128; ++j) {  // a window that slides by one row per token; later slots still empty
      sl.push_back(j <= 100 + t ? &pool[size_t((t + j) * D)] : nullptr);
    }
    const int64_t n_compressed = t % 3 == 0 ? 0 : 64 * (t % 3);  // 0, 64 or 128 compressed slots
    for (int64_t j = 0; j < n_compressed; ++j) sl.push_back(j % 5 ? &pool[size_t((n_pool - 1 - (j * 7 + t) % 150) * D)] : nullptr);
  }
  for (bool running : {true, false}) {
    std::vector<SparseAttentionParams> ps;
    std::vector<float> ref(size_t(T * H * D)), batched(size_t(T * H * D), -7.0f), alone(size_t(T * H * D), -7.0f);
    for (int64_t t = 0; t < T; ++t) {
      SparseAttentionParams p{&q[size_t(t * H * D)], H, D, slots[size_t(t)].data(), int64_t(slots[size_t(t)].size()),
                              sink.data(), double(float(1.0 / std::sqrt(double(D)))), running, &ref[size_t(t * H * D)]};
      reference->sparse_attention(p);
      p.out = &alone[size_t(t * H * D)];
      gpu->sparse_attention(p);
      p.out = &batched[size_t(t * H * D)];
      ps.push_back(p);
    }
    gpu->sparse_attentions(ps);
    int64_t n_bad = 0, n_unequal = 0;
    for (int64_t th = 0; th < T * H; ++th) {  // (token, head): run_attention's bound
      float head_max = 0;
      for (int64_t d = 0; d < D; ++d) head_max = std::max(head_max, std::fabs(ref[size_t(th * D + d)]));
      for (int64_t i = th * D; i < (th + 1) * D; ++i) {
        if (!(batched[size_t(i)] == alone[size_t(i)]) && ++n_unequal <= 3) {
          ADD_FAILURE() << "running=" << running << " element " << i << ": batched " << batched[size_t(i)] << ", alone "
                        << alone[size_t(i)];
        }
        const float r = ref[size_t(i)], g = batched[size_t(i)];
        const double bound = 2 * bf16_ulp(r) + std::ldexp(double(head_max), -10);
        if (!(std::fabs(double(g) - double(r)) <= bound) && ++n_bad <= 3) {
          ADD_FAILURE() << "running=" << running << " element " << i << ": ref " << r << ", cuda " << g;
        }
      }
    }
    const Diff d = compare(ref, batched, true);
    EXPECT_LT(d.calc_diff, 1e-5);
    print_diff(std::string(gpu->name()) + " batched attention, " + std::to_string(T) + " tokens" +
                   (running ? " [block max]" : " [global max]"),
               d);
  }
}

// With the split kernels, a token whose slot list does not fit their shared memory (6016 slots: ~236 KB at 8 heads,
// past an H200's 227 KB) runs on the fused kernel, which sums in another order; its batch-mates with short lists
// must still run split, each equal to itself alone. (On the fused path every token is fused: the same check.)
TEST_P(SparseAttentionCuda, ATokenTooLongForTheSplitKernelsLeavesTheOthersOnThem) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", GetParam());
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(19);
  const int64_t H = 8, D = 256, n_pool = 700;
  // fp32 rows and queries, whose products are not exact: the kernels' orders of summation then show in the bits.
  auto random_floats = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n), 0.0f);
    for (float& x : v) x = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    return v;
  };
  std::vector<float> pool = random_floats(n_pool * D);
  const std::vector<int64_t> lengths = {128, 6016, 192};
  const int64_t T = int64_t(lengths.size());
  std::vector<float> q = random_floats(T * H * D);
  std::vector<float> sink = random_sink(rng, H);
  std::vector<std::vector<const float*>> slots(lengths.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < lengths[size_t(t)]; ++j) {
      slots[size_t(t)].push_back(j % 7 == 3 ? nullptr : &pool[size_t((j * 13 + t) % n_pool * D)]);
    }
  }
  for (bool running : {true, false}) {
    std::vector<SparseAttentionParams> ps;
    std::vector<float> batched(size_t(T * H * D), -7.0f), alone(size_t(T * H * D), -7.0f);
    for (int64_t t = 0; t < T; ++t) {
      SparseAttentionParams p{&q[size_t(t * H * D)], H, D, slots[size_t(t)].data(), lengths[size_t(t)], sink.data(),
                              double(float(1.0 / std::sqrt(double(D)))), running, &alone[size_t(t * H * D)]};
      gpu->sparse_attention(p);
      p.out = &batched[size_t(t * H * D)];
      ps.push_back(p);
    }
    gpu->sparse_attentions(ps);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> b(batched.begin() + t * H * D, batched.begin() + (t + 1) * H * D);
      const std::vector<float> a(alone.begin() + t * H * D, alone.begin() + (t + 1) * H * D);
      EXPECT_EQ(n_differing(a, b), 0) << "token " << t << " (" << lengths[size_t(t)] << " slots), running=" << running;
      EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](float v) { return std::isfinite(v); }));
    }
  }
}

// A cache row of `format` as the model writes it: quantised the model's way (a V4 row's rope values stay bf16),
// packed into `bytes`, and replaced by unpack_kv_row's floats, what the device must read.
void pack_row_as_the_model(const KvRowFormat& format, float* row, uint8_t* bytes) {
  const int64_t n = format.n_values;
  switch (format.kind) {
    case KvRowKind::kV4Kv: qdq_fp8(row, n - format.n_rope, format.block); break;
    case KvRowKind::kV41Kv: qdq_fp8_v41(row, n, format.block); break;
    case KvRowKind::kV41Fp4: qdq_fp4_e4m3_scale(row, n, format.block); break;
    case KvRowKind::kFp4Key: qdq_fp4(row, n, format.block); break;
  }
  ASSERT_TRUE(pack_kv_row(format, row, bytes));
  unpack_kv_row(format, bytes, row);
}

// T tokens' attention on `gpu` twice: over as_floats (n_slots float rows each), and over `slots` beside `packed`
// (the same rows, some of them packed); how many outputs differ in their bits.
int64_t packed_outputs_differing(Backend& gpu, const std::vector<float>& q, const std::vector<float>& sink, int64_t H,
                                 int64_t D, int64_t n_slots, bool running, const std::vector<const float*>& as_floats,
                                 const std::vector<const float*>& slots, const std::vector<PackedSlot>& packed) {
  const int64_t T = int64_t(as_floats.size()) / n_slots;
  std::vector<float> want(size_t(T * H * D), -7.0f), got(size_t(T * H * D), -9.0f);
  std::vector<SparseAttentionParams> float_ps, packed_ps;
  for (int64_t t = 0; t < T; ++t) {
    SparseAttentionParams p{&q[size_t(t * H * D)], H, D, &as_floats[size_t(t * n_slots)], n_slots, sink.data(),
                            1.0 / std::sqrt(double(D)), running, &want[size_t(t * H * D)]};
    float_ps.push_back(p);
    p.slots = &slots[size_t(t * n_slots)];
    p.packed = &packed[size_t(t * n_slots)];
    p.out = &got[size_t(t * H * D)];
    packed_ps.push_back(p);
  }
  gpu.sparse_attentions(float_ps);
  gpu.sparse_attentions(packed_ps);
  return n_differing(want, got);
}

// test(attention path, rows mode) with the packed rows decoded first and (DEEPINFER_CUDA_ATTENTION_ROWS=packed)
// read packed by the attention kernels themselves.
void on_both_row_modes(void (*test)(const std::string&, const std::string&), const std::string& path) {
  DI_SKIP_WITHOUT_CUDA();
  for (const char* rows : {"decoded", "packed"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_ATTENTION_ROWS=") + rows);
    test(path, rows);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// DEEPINFER_CUDA_KV=packed: cache rows handed over packed (SparseAttentionParams::packed) are decoded on the
// device to the floats unpack_kv_row gives, so every output equals, bit for bit, that of the same slots given
// as those floats. Every row format, 3 tokens sharing rows, float and packed slots mixed, empty slots. This test
// and the two mirror tests run on both row modes (on_both_row_modes).
void packed_rows_match_their_decoded_floats(const std::string& path, const std::string& rows) {
  const ScopedCudaPaths paths("mma", path, "packed", rows);
  DI_MAKE_CUDA_BACKEND(gpu);
  ASSERT_TRUE(gpu->takes_packed_rows());
  const KvRowFormat formats[] = {kv_row_format(KvRowKind::kV4Kv, 512, 64), kv_row_format(KvRowKind::kV41Kv, 512),
                                  kv_row_format(KvRowKind::kV41Fp4, 512), kv_row_format(KvRowKind::kFp4Key, 128)};
  std::mt19937 rng(21);
  for (const KvRowFormat& format : formats) {
    const int64_t H = 8, D = format.n_values, n_pool = 150, T = 3, n_slots = 192;
    std::vector<float> decoded = random_bf16_values(rng, n_pool * D, 1.0f);
    std::vector<uint8_t> packed_rows(size_t(n_pool * format.row_bytes));
    for (int64_t r = 0; r < n_pool; ++r) {
      ASSERT_NO_FATAL_FAILURE(pack_row_as_the_model(format, &decoded[size_t(r * D)], &packed_rows[size_t(r * format.row_bytes)]));
    }
    std::vector<float> q = random_bf16_values(rng, T * H * D, 1.0f);
    std::vector<float> sink = random_sink(rng, H);
    std::vector<const float*> as_floats, mixed;
    std::vector<PackedSlot> packed;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < n_slots; ++j) {
        const int64_t r = (j * 7 + t * 5) % n_pool;
        const bool empty = j % 11 == 3 || j > 150 + 10 * t;
        const bool as_packed = !empty && j % 3 != 0;
        as_floats.push_back(empty ? nullptr : &decoded[size_t(r * D)]);
        mixed.push_back(empty || as_packed ? nullptr : &decoded[size_t(r * D)]);
        packed.push_back(as_packed ? PackedSlot{&packed_rows[size_t(r * format.row_bytes)], &format} : PackedSlot{});
      }
    }
    for (bool running : {true, false}) {
      const int64_t n_differ = packed_outputs_differing(*gpu, q, sink, H, D, n_slots, running, as_floats, mixed, packed);
      EXPECT_EQ(n_differ, 0) << "row kind " << int(format.kind) << " running=" << running << ": " << n_differ
                             << " outputs differ from the decoded-floats run";
    }
  }
}

TEST_P(SparseAttentionCuda, PackedRowsMatchTheirDecodedFloats) { on_both_row_modes(packed_rows_match_their_decoded_floats, GetParam()); }

// DEEPINFER_CUDA_KV=mirror: packed rows kept on the device by their stamps (PackedSlot::stamp). Four calls over
// one pool of stamped rows: every row new, every row kept, a third of the rows rewritten with new stamps (as the
// model's writes give them), and the first pool again; each output equal, bit for bit, to the same slots given
// as decoded floats. With the default budget, with one of 160 584-byte rows (the rewritten rows do not fit the
// 10 slots left: the arena is emptied and the call copies every row), and with one too small for a call's rows
// (every row copied, as with packed).
void mirrored_rows_match_their_decoded_floats(const std::string& path, const std::string& rows) {
  for (const char* budget_gb : {"2", "0.00028032", "0.00001"}) {  // a third of the budget per row size
    const ScopedCudaPaths paths("mma", path, "mirror", rows);
    setenv("DEEPINFER_CUDA_KV_MIRROR_GB", budget_gb, 1);
    DI_MAKE_CUDA_BACKEND(gpu);
    unsetenv("DEEPINFER_CUDA_KV_MIRROR_GB");
    ASSERT_TRUE(gpu->takes_packed_rows());
    for (const KvRowFormat& format : {kv_row_format(KvRowKind::kV4Kv, 512, 64), kv_row_format(KvRowKind::kV41Fp4, 512)}) {
      std::mt19937 rng(31);
      const int64_t H = 8, D = format.n_values, n_pool = 150, T = 3, n_slots = 192;
      uint64_t next_stamp = 1;
      std::vector<float> decoded(static_cast<size_t>(n_pool * D));
      std::vector<uint8_t> bytes(static_cast<size_t>(n_pool * format.row_bytes));
      std::vector<uint64_t> stamps(static_cast<size_t>(n_pool));
      auto write_row = [&](int64_t r) {  // new content, new stamp
        const std::vector<float> v = random_bf16_values(rng, D, 1.0f);
        std::copy(v.begin(), v.end(), decoded.begin() + r * D);
        ASSERT_NO_FATAL_FAILURE(pack_row_as_the_model(format, &decoded[size_t(r * D)], &bytes[size_t(r * format.row_bytes)]));
        stamps[size_t(r)] = next_stamp++;
      };
      for (int64_t r = 0; r < n_pool; ++r) write_row(r);
      const std::vector<float> q = random_bf16_values(rng, T * H * D, 1.0f);
      std::vector<float> sink = random_sink(rng, H);
      for (int round = 0; round < 4; ++round) {
        if (round == 2) {
          for (int64_t r = 0; r < n_pool; r += 3) write_row(r);
        }
        std::vector<const float*> as_floats, none(size_t(T * n_slots), nullptr);
        std::vector<PackedSlot> packed;
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < n_slots; ++j) {
            const int64_t r = (j * 7 + t * 5 + (round == 3 ? 0 : round)) % n_pool;
            const bool empty = j % 11 == 3 || j > 150 + 10 * t;
            as_floats.push_back(empty ? nullptr : &decoded[size_t(r * D)]);
            packed.push_back(empty ? PackedSlot{} : PackedSlot{&bytes[size_t(r * format.row_bytes)], &format, stamps[size_t(r)]});
          }
        }
        const int64_t n_differ = packed_outputs_differing(*gpu, q, sink, H, D, n_slots, true, as_floats, none, packed);
        EXPECT_EQ(n_differ, 0) << "budget " << budget_gb << " GB, row kind " << int(format.kind) << ", call " << round
                               << ": " << n_differ << " outputs differ from the decoded-floats run";
      }
    }
  }
}

TEST_P(SparseAttentionCuda, MirroredRowsMatchTheirDecodedFloats) { on_both_row_modes(mirrored_rows_match_their_decoded_floats, GetParam()); }

// DEEPINFER_CUDA_KV=mirror, as V4.1 calls it: two row sizes (528 B window rows, 288 B compressed rows, two
// arenas) and float rows in one call, 5 heads (the device's slot words behind an odd number of floats). The
// second call proves the rows were kept: their host bytes are changed under the same stamps (which the model
// never does), and the outputs must stay those of the first call, while the same slots as floats now differ.
void mirror_keeps_rows_of_two_sizes_across_calls(const std::string& path, const std::string& rows) {
  const ScopedCudaPaths paths("mma", path, "mirror", rows);
  DI_MAKE_CUDA_BACKEND(gpu);
  const KvRowFormat formats[2] = {kv_row_format(KvRowKind::kV41Kv, 512), kv_row_format(KvRowKind::kV41Fp4, 512)};
  std::mt19937 rng(41);
  const int64_t H = 5, D = 512, n_pool = 60, n_float = 20, T = 2, n_slots = 128;
  std::vector<float> decoded[2], floats = random_bf16_values(rng, n_float * D, 1.0f);
  std::vector<uint8_t> bytes[2];
  auto fill = [&](int f) {  // fresh contents for pool f (the stamps are not the test's to change)
    decoded[f] = random_bf16_values(rng, n_pool * D, 1.0f);
    bytes[f].assign(size_t(n_pool * formats[f].row_bytes), 0);
    for (int64_t r = 0; r < n_pool; ++r) {
      ASSERT_NO_FATAL_FAILURE(pack_row_as_the_model(formats[f], &decoded[f][size_t(r * D)], &bytes[f][size_t(r * formats[f].row_bytes)]));
    }
  };
  fill(0);
  fill(1);
  const std::vector<float> q = random_bf16_values(rng, T * H * D, 1.0f);
  std::vector<float> sink = random_sink(rng, H);
  // The slots, and the attention as floats and as (mostly) packed rows.
  auto run = [&](bool packed_rows, std::vector<float>& out) {
    std::vector<const float*> rows;
    std::vector<PackedSlot> packed;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < n_slots; ++j) {
        const int kind = int(j % 3);
        const int64_t r = (j * 5 + t) % n_pool;
        if (j % 13 == 4) {
          rows.push_back(nullptr);
          packed.push_back({});
        } else if (kind == 2) {
          rows.push_back(&floats[size_t((r % n_float) * D)]);
          packed.push_back({});
        } else if (packed_rows) {
          rows.push_back(nullptr);
          packed.push_back({&bytes[kind][size_t(r * formats[kind].row_bytes)], &formats[kind], uint64_t(1000 * (kind + 1) + r)});
        } else {
          rows.push_back(&decoded[kind][size_t(r * D)]);
          packed.push_back({});
        }
      }
    }
    out.assign(size_t(T * H * D), -7.0f);
    std::vector<SparseAttentionParams> ps;
    for (int64_t t = 0; t < T; ++t) {
      ps.push_back({&q[size_t(t * H * D)], H, D, &rows[size_t(t * n_slots)], n_slots, sink.data(), 1.0 / std::sqrt(double(D)),
                    false, &out[size_t(t * H * D)], &packed[size_t(t * n_slots)]});
    }
    gpu->sparse_attentions(ps);
  };
  std::vector<float> want, got, changed, kept;
  run(false, want);
  run(true, got);
  EXPECT_EQ(n_differing(want, got), 0) << "first call: packed rows differ from their decoded floats";
  fill(0);
  fill(1);
  run(false, changed);
  run(true, kept);
  EXPECT_GT(n_differing(want, changed), 0) << "the new contents change nothing: the test proves nothing";
  EXPECT_EQ(n_differing(want, kept), 0) << "second call: the device did not use the rows it kept under their stamps";
}

TEST_P(SparseAttentionCuda, MirrorKeepsRowsOfTwoSizesAcrossCalls) { on_both_row_modes(mirror_keeps_rows_of_two_sizes_across_calls, GetParam()); }

// Float rows and three packed formats (V4's 584-byte rows, V4.1's 528- and 288-byte rows) in one call, copied each
// call and mirrored: with the rows read packed, the attention's three groups (AttentionLaunch::packed) and the
// float rows before them; every output equal, bit for bit, to the same slots given as the decoded floats.
void three_formats_in_one_call(const std::string& path, const std::string& rows) {
  for (const char* kv : {"packed", "mirror"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_KV=") + kv);
    const ScopedCudaPaths paths("mma", path, kv, rows);
    DI_MAKE_CUDA_BACKEND(gpu);
    const KvRowFormat formats[3] = {kv_row_format(KvRowKind::kV4Kv, 512, 64), kv_row_format(KvRowKind::kV41Kv, 512),
                                    kv_row_format(KvRowKind::kV41Fp4, 512)};
    std::mt19937 rng(51);
    const int64_t H = 8, D = 512, n_pool = 40, T = 2, n_slots = 192;
    const std::vector<float> floats = random_bf16_values(rng, n_pool * D, 1.0f);
    std::vector<float> decoded[3];
    std::vector<uint8_t> bytes[3];
    for (int f = 0; f < 3; ++f) {
      decoded[f] = random_bf16_values(rng, n_pool * D, 1.0f);
      bytes[f].assign(size_t(n_pool * formats[f].row_bytes), 0);
      for (int64_t r = 0; r < n_pool; ++r) {
        ASSERT_NO_FATAL_FAILURE(pack_row_as_the_model(formats[f], &decoded[f][size_t(r * D)], &bytes[f][size_t(r * formats[f].row_bytes)]));
      }
    }
    const std::vector<float> q = random_bf16_values(rng, T * H * D, 1.0f);
    std::vector<float> sink = random_sink(rng, H);
    std::vector<const float*> as_floats, mixed;
    std::vector<PackedSlot> packed;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < n_slots; ++j) {
        const int kind = int(j % 4);  // 3: a float row
        const int64_t r = (j * 3 + t) % n_pool;
        if (j % 17 == 5) {
          as_floats.push_back(nullptr);
          mixed.push_back(nullptr);
          packed.push_back({});
        } else if (kind == 3) {
          as_floats.push_back(&floats[size_t(r * D)]);
          mixed.push_back(&floats[size_t(r * D)]);
          packed.push_back({});
        } else {
          as_floats.push_back(&decoded[kind][size_t(r * D)]);
          mixed.push_back(nullptr);
          packed.push_back({&bytes[kind][size_t(r * formats[kind].row_bytes)], &formats[kind], uint64_t(1000 * (kind + 1) + r)});
        }
      }
    }
    const int64_t n_differ = packed_outputs_differing(*gpu, q, sink, H, D, n_slots, false, as_floats, mixed, packed);
    EXPECT_EQ(n_differ, 0) << n_differ << " outputs differ from the decoded-floats run";
  }
}

TEST_P(SparseAttentionCuda, ThreePackedFormatsInOneCall) { on_both_row_modes(three_formats_in_one_call, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Paths, SparseAttentionCuda, ::testing::ValuesIn(attention_paths()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Every IndexScoresCuda test runs on both index-score kernels (DEEPINFER_CUDA_INDEX_SCORES): the FMA chains and
// the tensor cores, each within the reference's bound and equal to itself across batches, arrays and key forms.
void on_both_index_kernels(void (*test)()) {
  DI_SKIP_WITHOUT_CUDA();
  for (const char* kernel : {"fma", "mma"}) {
    SCOPED_TRACE(std::string("DEEPINFER_CUDA_INDEX_SCORES=") + kernel);
    const ScopedIndexScores scoped(kernel);
    test();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void run_index(int64_t n_heads, int64_t dim, int64_t n_keys, bool fp32_inputs, uint32_t seed) {
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(seed);
  std::vector<float> q = fp4_grid_values(rng, n_heads * dim), keys = fp4_grid_values(rng, n_keys * dim);
  std::vector<float> w = random_bf16_values(rng, n_heads, 0.125f);
  if (fp32_inputs) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : keys) v = u(rng);
  }
  auto reference = make_reference_backend();
  std::vector<float> ref(static_cast<size_t>(n_keys)), got(static_cast<size_t>(n_keys), -7.0f);
  IndexScoreParams p{q.data(), w.data(), n_heads, dim, keys.data(), n_keys, ref.data()};
  reference->index_scores(p);
  p.scores = got.data();
  gpu->index_scores(p);
  const Diff d = expect_index_scores_within_bounds(q, w, keys, n_heads, dim, n_keys, ref, got, "cuda");
  print_diff(std::string(gpu->name()) + " index " + std::to_string(n_heads) + " heads x " + std::to_string(dim) + ", " +
                 std::to_string(n_keys) + " keys" + (fp32_inputs ? " (fp32 keys)" : ""),
             d);
}

void v4flash_shapes() {
  DI_SKIP_WITHOUT_CUDA();
  for (int64_t n_keys : {1, 5, 100, 1024}) run_index(64, 128, n_keys, false, uint32_t(10 + n_keys));
}
TEST(IndexScoresCuda, V4FlashShapes) { on_both_index_kernels(v4flash_shapes); }

void odd_dim_few_heads_fp32_keys() {
  DI_SKIP_WITHOUT_CUDA();
  run_index(4, 100, 77, false, 21);
  run_index(8, 128, 300, false, 22);
  run_index(64, 128, 200, true, 31);
}
TEST(IndexScoresCuda, OddDimFewHeadsFp32Keys) { on_both_index_kernels(odd_dim_few_heads_fp32_keys); }

// A prefill block's tokens against one keys array in one index_scores_batch call, each reading its own
// prefix (1 .. 1000 keys, one token with none): every score equal to the same token scored alone, and the
// reference's within the bound of run_index.
void batched_tokens_match_single_calls() {
  DI_SKIP_WITHOUT_CUDA();
  DI_MAKE_CUDA_BACKEND(gpu);
  auto reference = make_reference_backend();
  std::mt19937 rng(41);
  const int64_t H = 64, dim = 128, max_keys = 1000;
  const std::vector<int64_t> n_keys = {1, 7, 33, 0, 500, 999, 1000, 64};
  const int64_t T = int64_t(n_keys.size());
  std::vector<float> keys = fp4_grid_values(rng, max_keys * dim), q = fp4_grid_values(rng, T * H * dim);
  std::vector<float> w = random_bf16_values(rng, T * H, 0.125f);
  std::vector<std::vector<float>> ref(static_cast<size_t>(T)), alone(static_cast<size_t>(T)), batched(static_cast<size_t>(T));
  std::vector<IndexScoreParams> ps;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = n_keys[size_t(t)];
    ref[size_t(t)].assign(size_t(n), -7.0f);
    alone[size_t(t)].assign(size_t(n), -7.0f);
    batched[size_t(t)].assign(size_t(n), -7.0f);
    IndexScoreParams p{&q[size_t(t * H * dim)], &w[size_t(t * H)], H, dim, keys.data(), n, ref[size_t(t)].data()};
    reference->index_scores(p);
    p.scores = alone[size_t(t)].data();
    gpu->index_scores(p);
    p.scores = batched[size_t(t)].data();
    ps.push_back(p);
  }
  gpu->index_scores_batch(ps);
  for (int64_t t = 0; t < T; ++t) {
    int64_t n_bad = 0;
    for (int64_t j = 0; j < n_keys[size_t(t)]; ++j) {
      const float r = ref[size_t(t)][size_t(j)], a = alone[size_t(t)][size_t(j)], g = batched[size_t(t)][size_t(j)];
      EXPECT_EQ(g, a) << "token " << t << " key " << j << ": batched differs from alone";
      double mass = 0;
      for (int64_t h = 0; h < H; ++h) {
        double s = 0;
        for (int64_t d = 0; d < dim; ++d) s += double(q[size_t((t * H + h) * dim + d)]) * keys[size_t(j * dim + d)];
        mass += std::fabs(std::max(s, 0.0) * w[size_t(t * H + h)]);
      }
      const double ulp = bf16_ulp(r);
      if (!(std::fabs(double(g) - double(r)) <= 2 * ulp + std::ldexp(mass, -7)) && ++n_bad <= 3) {
        ADD_FAILURE() << "token " << t << " key " << j << " ref=" << r << " cuda=" << g;
      }
    }
  }
}
TEST(IndexScoresCuda, BatchedTokensMatchSingleCalls) { on_both_index_kernels(batched_tokens_match_single_calls); }

// DEEPINFER_CUDA_KV=packed: index keys handed over packed (IndexScoreParams::key_runs, runs of 7 rows as
// pages would give) are decoded on the device to unpack_kv_row's floats: every score equals, bit for bit, that of
// the same keys given as those floats, for tokens of 0 .. 300 keys in one batch.
void packed_keys_match_their_decoded_floats() {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", "fused", "packed");
  DI_MAKE_CUDA_BACKEND(gpu);
  ASSERT_TRUE(gpu->takes_packed_rows());
  std::mt19937 rng(43);
  const int64_t H = 64, dim = 128, max_keys = 300;
  const KvRowFormat format = kv_row_format(KvRowKind::kFp4Key, dim);
  std::vector<float> keys = random_bf16_values(rng, max_keys * dim, 1.0f);
  std::vector<uint8_t> packed(size_t(max_keys * format.row_bytes));
  for (int64_t j = 0; j < max_keys; ++j) {
    float* key = &keys[size_t(j * dim)];
    qdq_fp4(key, dim, 32);
    ASSERT_TRUE(pack_kv_row(format, key, &packed[size_t(j * format.row_bytes)]));
    unpack_kv_row(format, &packed[size_t(j * format.row_bytes)], key);
  }
  std::vector<PackedRowRun> runs;
  for (int64_t j = 0; j < max_keys; j += 7) runs.push_back({&packed[size_t(j * format.row_bytes)], std::min<int64_t>(7, max_keys - j)});
  const std::vector<int64_t> n_keys = {1, 0, 64, 299, 300, 13};
  const int64_t T = int64_t(n_keys.size());
  std::vector<float> q = fp4_grid_values(rng, T * H * dim), w = random_bf16_values(rng, T * H, 0.125f);
  std::vector<std::vector<float>> want(static_cast<size_t>(T)), got(static_cast<size_t>(T));
  std::vector<IndexScoreParams> as_floats, as_packed;
  for (int64_t t = 0; t < T; ++t) {
    want[size_t(t)].assign(size_t(n_keys[size_t(t)]), -7.0f);
    got[size_t(t)].assign(size_t(n_keys[size_t(t)]), -9.0f);
    IndexScoreParams p{&q[size_t(t * H * dim)], &w[size_t(t * H)], H, dim, keys.data(), n_keys[size_t(t)], want[size_t(t)].data()};
    as_floats.push_back(p);
    p.keys = nullptr;
    p.key_format = &format;
    p.key_runs = runs;
    p.scores = got[size_t(t)].data();
    as_packed.push_back(p);
  }
  gpu->index_scores_batch(as_floats);
  gpu->index_scores_batch(as_packed);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < n_keys[size_t(t)]; ++j) {
      ASSERT_EQ(std::memcmp(&want[size_t(t)][size_t(j)], &got[size_t(t)][size_t(j)], 4), 0)
          << "token " << t << " key " << j << ": " << want[size_t(t)][size_t(j)] << " vs " << got[size_t(t)][size_t(j)];
    }
  }
}
TEST(IndexScoresCuda, PackedKeysMatchTheirDecodedFloats) { on_both_index_kernels(packed_keys_match_their_decoded_floats); }

// A batched decode step's tokens, each scoring against its own sequence's keys, in one index_scores_batch call:
// three float key arrays and two packed ones (runs of 5 rows), the tokens interleaved over them with 0 .. 250
// keys each. Every score equals, bit for bit, the same token's scored alone against its keys as floats.
void several_key_arrays_in_one_batch_match_single_calls() {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma", "fused", "packed");
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(47);
  const int64_t H = 64, dim = 128, n_arrays = 5;
  const int64_t array_keys[n_arrays] = {250, 40, 130, 250, 77};  // arrays 3 and 4 go packed
  const KvRowFormat format = kv_row_format(KvRowKind::kFp4Key, dim);
  std::vector<std::vector<float>> keys(n_arrays);
  std::vector<std::vector<uint8_t>> packed(n_arrays);
  std::vector<std::vector<PackedRowRun>> runs(n_arrays);
  for (int64_t a = 0; a < n_arrays; ++a) {
    const int64_t n = array_keys[a];
    keys[size_t(a)] = random_bf16_values(rng, n * dim, 1.0f);
    packed[size_t(a)].resize(size_t(n * format.row_bytes));
    for (int64_t j = 0; j < n; ++j) {  // values a packed row holds exactly, for the float arrays too
      float* key = &keys[size_t(a)][size_t(j * dim)];
      uint8_t* row = &packed[size_t(a)][size_t(j * format.row_bytes)];
      qdq_fp4(key, dim, 32);
      ASSERT_TRUE(pack_kv_row(format, key, row));
      unpack_kv_row(format, row, key);
    }
    for (int64_t j = 0; j < n; j += 5) runs[size_t(a)].push_back({&packed[size_t(a)][size_t(j * format.row_bytes)], std::min<int64_t>(5, n - j)});
  }
  const int64_t T = 23;
  std::vector<float> q = fp4_grid_values(rng, T * H * dim), w = random_bf16_values(rng, T * H, 0.125f);
  std::vector<std::vector<float>> want(static_cast<size_t>(T)), got(static_cast<size_t>(T));
  std::vector<IndexScoreParams> batch;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t a = (t * 3) % n_arrays, n = t == 4 ? 0 : 1 + (t * 37) % array_keys[a];
    want[size_t(t)].assign(size_t(n), -7.0f);
    got[size_t(t)].assign(size_t(n), -9.0f);
    IndexScoreParams p{&q[size_t(t * H * dim)], &w[size_t(t * H)], H, dim, keys[size_t(a)].data(), n, want[size_t(t)].data()};
    gpu->index_scores(p);
    p.scores = got[size_t(t)].data();
    if (a >= 3) {
      p.keys = nullptr;
      p.key_format = &format;
      p.key_runs = runs[size_t(a)];
    }
    batch.push_back(p);
  }
  gpu->index_scores_batch(batch);
  for (int64_t t = 0; t < T; ++t) {
    for (size_t j = 0; j < want[size_t(t)].size(); ++j) {
      ASSERT_EQ(std::memcmp(&want[size_t(t)][j], &got[size_t(t)][j], 4), 0)
          << "token " << t << " key " << j << ": " << want[size_t(t)][j] << " alone vs " << got[size_t(t)][j] << " batched";
    }
  }
}
TEST(IndexScoresCuda, SeveralKeyArraysInOneBatchMatchSingleCalls) { on_both_index_kernels(several_key_arrays_in_one_batch_match_single_calls); }

// DEEPINFER_CUDA_KV=mirror for the index keys: three sequences' stamped key arrays (runs of 6 rows) in one batch,
// one of them as floats or not (with none, the kernel reads the keys packed from the arena), scored three times:
// every key new; every key kept, with the packed arrays' host bytes zeroed under the same stamps (which the model
// never does), so that only keys kept on the device give the first call's scores; and with 20 keys appended to
// each packed array (new stamps, new bytes), whose scores must be those of the same keys as floats. A budget too
// small for the keys (every key copied each call) gives the same bits.
void expect_mirrored_keys_kept(bool with_floats, const char* budget_gb) {
  SCOPED_TRACE(std::string("DEEPINFER_CUDA_KV_MIRROR_GB=") + budget_gb + (with_floats ? ", a float array" : ", all packed"));
  const ScopedCudaPaths paths("mma", "fused", "mirror");
  setenv("DEEPINFER_CUDA_KV_MIRROR_GB", budget_gb, 1);
  DI_MAKE_CUDA_BACKEND(gpu);
  unsetenv("DEEPINFER_CUDA_KV_MIRROR_GB");
  const bool kept = std::string(budget_gb) == "2";
  std::mt19937 rng(53);
  const int64_t H = 16, dim = 128, n_arrays = 3, n_first = 90, n_all = 110;
  const KvRowFormat format = kv_row_format(KvRowKind::kFp4Key, dim);
  uint64_t next_stamp = 1000;
  std::vector<std::vector<float>> keys(n_arrays);
  std::vector<std::vector<uint8_t>> packed(n_arrays);
  std::vector<std::vector<uint64_t>> stamps(n_arrays);
  std::vector<std::vector<PackedRowRun>> runs(n_arrays);
  for (int64_t a = 0; a < n_arrays; ++a) {
    keys[size_t(a)] = random_bf16_values(rng, n_all * dim, 1.0f);
    packed[size_t(a)].resize(size_t(n_all * format.row_bytes));
    for (int64_t j = 0; j < n_all; ++j) {
      float* key = &keys[size_t(a)][size_t(j * dim)];
      uint8_t* row = &packed[size_t(a)][size_t(j * format.row_bytes)];
      qdq_fp4(key, dim, 32);
      ASSERT_TRUE(pack_kv_row(format, key, row));
      unpack_kv_row(format, row, key);
      stamps[size_t(a)].push_back(next_stamp++);
    }
    for (int64_t j = 0; j < n_all; j += 6) {
      runs[size_t(a)].push_back({&packed[size_t(a)][size_t(j * format.row_bytes)], std::min<int64_t>(6, n_all - j),
                                 &stamps[size_t(a)][size_t(j)]});
    }
  }
  const int64_t T = 5;  // token t reads array t % 3
  const int64_t n_packed = with_floats ? 2 : 3;  // arrays [0, n_packed) go packed
  const std::vector<float> q = fp4_grid_values(rng, T * H * dim), w = random_bf16_values(rng, T * H, 0.125f);
  auto score = [&](int64_t n_keys, bool packed_keys, std::vector<std::vector<float>>& out) {
    std::vector<IndexScoreParams> batch;
    out.assign(size_t(T), {});
    for (int64_t t = 0; t < T; ++t) {
      const int64_t a = t % n_arrays, n = n_keys - t;
      out[size_t(t)].assign(size_t(n), -7.0f);
      IndexScoreParams p{&q[size_t(t * H * dim)], &w[size_t(t * H)], H, dim, keys[size_t(a)].data(), n, out[size_t(t)].data()};
      if (packed_keys && a < n_packed) {
        p.keys = nullptr;
        p.key_format = &format;
        p.key_runs = runs[size_t(a)];
      }
      batch.push_back(p);
    }
    gpu->index_scores_batch(batch);
  };
  std::vector<std::vector<float>> want, got;
  score(n_first, false, want);
  score(n_first, true, got);
  EXPECT_EQ(want, got) << "every key new";
  const std::vector<std::vector<uint8_t>> saved = packed;
  for (int64_t a = 0; a < n_packed; ++a) std::fill(packed[size_t(a)].begin(), packed[size_t(a)].end(), uint8_t(0));
  score(n_first, true, got);
  if (kept) {
    EXPECT_EQ(want, got) << "every key kept: the zeroed host bytes must not be read";
  } else {
    EXPECT_NE(want, got) << "a mirror too small for the keys copies them every call";
  }
  for (int64_t a = 0; a < n_packed; ++a) std::copy(saved[size_t(a)].begin(), saved[size_t(a)].end(), packed[size_t(a)].begin());
  score(n_all, false, want);
  score(n_all, true, got);
  EXPECT_EQ(want, got) << "20 keys appended to each packed array";
}

void mirrored_keys_are_kept_across_calls() {
  DI_SKIP_WITHOUT_CUDA();
  for (const bool with_floats : {true, false}) {
    for (const char* budget_gb : {"2", "0.000001"}) expect_mirrored_keys_kept(with_floats, budget_gb);
  }
}
TEST(IndexScoresCuda, MirroredKeysAreKeptAcrossCalls) { on_both_index_kernels(mirrored_keys_are_kept_across_calls); }

}  // namespace
}  // namespace deepinfer::testing
