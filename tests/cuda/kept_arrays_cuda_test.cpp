// Arrays kept on the device (backend.h): q normed and rotated by a projection chain and kept there
// (ProjectionChainParams::q_rope, head_rope_kernel.cu), the indexer's query too (index_q) and the index scores
// reading it (IndexScoreParams::q_kept), the attention reading q and keeping its output rotated back
// (SparseAttentionParams::q_kept and out_rope), and the output projection reading that (LinearChainParams::x_kept),
// against the model's steps with the host's head work (head_rms_normalize, rope_rotate_heads, hadamard_128, the FP4
// QDQs) on the same kernels: the same bits, and the host arrays of what stays on the device never written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "backend/backend.h"
#include "cuda/cuda_util.h"
#include "cuda/random_output_projection.h"
#include "cuda/random_projections.h"
#include "kernel/kernel_test_util.h"
#include "model/engram.h"
#include "model/linear_chain.h"
#include "model/mhc_side.h"
#include "model/ops.h"

namespace deepinfer::testing {
namespace {

constexpr int64_t kHeadDim = 128, kRopeDim = 64;
constexpr double kEps = double(1e-6f);

// Each token's angles (RopeTable::cos_sin) at a random position up to 100k.
std::vector<float> random_angles(std::mt19937& rng, int64_t n_tokens) {
  const RopeTable rope = make_rope_table(int(kRopeDim), 10000.0);
  std::vector<float> cos_sin(size_t(n_tokens * kRopeDim));
  for (int64_t t = 0; t < n_tokens; ++t) rope.cos_sin(std::uniform_int_distribution<int64_t>(0, 100000)(rng), &cos_sin[size_t(t * kRopeDim)]);
  return cos_sin;
}

// The model's host work on the indexer's query [T, n_heads, 128]: V4's I2-I4, V4.1's steps 21-22.
void host_index_query(std::vector<float>& iq, const std::vector<float>& cos_sin, bool v41) {
  const int64_t n_heads = int64_t(iq.size()) / (int64_t(cos_sin.size()) / kRopeDim * 128);
  for (size_t t = 0; t < cos_sin.size() / kRopeDim; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* head = &iq[(t * size_t(n_heads) + size_t(h)) * 128];
      rope_rotate_heads(head + 128 - kRopeDim, 1, 128, &cos_sin[t * kRopeDim], kRopeDim / 2, false);
      if (v41) {
        qdq_fp4_pow2_v41(head, 128, 32);
      } else {
        hadamard_128(head);
        qdq_fp4(head, 128, 32);
      }
    }
  }
}

// The model's host work on [T, n_heads, kHeadDim] rows: A4-A9 (normalize) or AT4 (inverse).
void host_head_rope(std::vector<float>& x, int64_t n_heads, const std::vector<float>& cos_sin, bool normalize, bool inverse) {
  const int64_t T = int64_t(x.size()) / (n_heads * kHeadDim);
  for (int64_t t = 0; t < T; ++t) {
    float* row = &x[size_t(t * n_heads * kHeadDim)];
    if (normalize) head_rms_normalize(row, n_heads, kHeadDim, kEps);
    rope_rotate_heads(row + kHeadDim - kRopeDim, n_heads, kHeadDim, &cos_sin[size_t(t * kRopeDim)], kRopeDim / 2, inverse);
  }
}

bool all_untouched(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return v == -7.0f; });
}

// V4.1's 32-row weight blocks let one head's rows 32-63 come out 2^-30 times the others: its squares' exponents then
// span more bits than the exact sum in any order allows, and the kernel sums them in the host's order on one lane
// (a planted fault there fails this test; an order change alone rarely shows: A5 rounds the mean to bf16).
void shrink_head_rows(RandomProjections& r) {
  const int64_t k_blocks = RandomProjections::QL / 32;
  for (int64_t j = 0; j < k_blocks; ++j) r.wq_b.scale[size_t(1 * k_blocks + j)] -= 30;
}

// Index scores on the chain's kept indexer query (tokens in order: read where it is; reversed: copied into place)
// against those on the host's.
void expect_index_scores_on_kept_query(Backend& gpu, const std::vector<float>& host_iq, const float* kept_iq, int64_t n_heads,
                                       std::mt19937& rng) {
  const int64_t T = int64_t(host_iq.size()) / (n_heads * 128), n_keys = 70;
  const std::vector<float> keys = random_bf16_values(rng, n_keys * 128, 1.0f), weights = random_bf16_values(rng, T * n_heads, 0.25f);
  for (bool reversed : {false, true}) {
    std::vector<float> host_scores(size_t(T * n_keys), -7.0f), kept_scores(size_t(T * n_keys), -7.0f);
    std::vector<IndexScoreParams> host_ops, kept_ops;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t t = reversed ? T - 1 - i : i, n = n_keys - t;  // each token its own count of keys
      host_ops.push_back({&host_iq[size_t(t * n_heads * 128)], &weights[size_t(t * n_heads)], n_heads, 128, keys.data(), n,
                          &host_scores[size_t(t * n_keys)]});
      kept_ops.push_back(host_ops.back());
      kept_ops.back().q = kept_iq + t * n_heads * 128;
      kept_ops.back().q_kept = true;
      kept_ops.back().scores = &kept_scores[size_t(t * n_keys)];
    }
    gpu.index_scores_batch(host_ops);
    gpu.index_scores_batch(kept_ops);
    EXPECT_EQ(n_differing(host_scores, kept_scores), 0) << (reversed ? "reversed" : "in order");
    EXPECT_FALSE(all_untouched(kept_scores));
  }
}

constexpr int64_t kHeads = 2, kIndexHeads = 3;  // the kept-q tests' q and indexer query heads

// The model's host work on a chain's q and indexer query (the host's steps wrote them into o).
void host_query_work(RandomProjections::Outputs& o, const std::vector<float>& cos_sin, bool v41) {
  host_head_rope(o.q, kHeads, cos_sin, true, false);
  host_index_query(o.iq, cos_sin, v41);
}

// The chain's kept q and indexer query (fetched into device) and its kv rows: the host's bits.
void expect_kept_q_equals(Backend& gpu, const RandomProjections::Outputs& host, RandomProjections::Outputs& device) {
  gpu.fetch_kept(device.q.data(), int64_t(device.q.size()));
  EXPECT_EQ(n_differing(host.q, device.q), 0) << "of " << host.q.size() << " q values";
  gpu.fetch_kept(device.iq.data(), int64_t(device.iq.size()));
  EXPECT_EQ(n_differing(host.iq, device.iq), 0) << "of " << host.iq.size() << " indexer query values";
  EXPECT_EQ(n_differing(host.kv, device.kv), 0);
}

// An attention side's front on the device with q and the indexer's query kept (MhcFront::run_with), at the angles
// cos_sin; mid_back as ProjectionChainParams's.
void run_front_keeping_q(Backend& gpu, const MhcSideParams& side, RandomProjections& r, const std::vector<float>& cos_sin,
                         bool mid_back, MhcScratch& scratch, RandomProjections::Outputs& device) {
  const HeadRope rope{kHeads, kHeadDim, kRopeDim, cos_sin.data(), false, true, kEps};
  const IndexQueryWork index_q{kIndexHeads, 128, kRopeDim, cos_sin.data(), r.v41};
  MhcFront front(gpu, side, scratch);
  ProjectionChainParams p = r.chain(front.u().data(), front.uq().data(), device);
  p.q_rope = &rope;
  p.index_q = &index_q;
  p.mid_back = mid_back;
  ASSERT_TRUE(front.run_with(p)) << "the device front declined";
}

// The same front by the model's steps on steps_gpu, with the host's work on q and the indexer's query.
void run_front_steps(Backend& steps_gpu, const MhcSideParams& side, RandomProjections& r, const std::vector<float>& cos_sin,
                     MhcScratch& scratch, RandomProjections::Outputs& host) {
  MhcFront front(steps_gpu, side, scratch);
  EXPECT_FALSE(front.run_with(r.chain(front.u().data(), front.uq().data(), host)));
  host_query_work(host, cos_sin, r.v41);
}

// q and the indexer's query from a projection chain (alone, or with the mHC side's first half: two rounds at new
// positions, so a front replayed as a graph must take each call's angles; the second round without mid and mid_q
// back, so the front returns before its second stage ran) worked on and kept on the device.
void expect_kept_q_equals_the_host_work(int64_t n_tokens, bool v41, bool with_front, std::mt19937& rng) {
  SCOPED_TRACE(std::string(v41 ? "V4.1" : "V4") + " rules, " + std::to_string(n_tokens) + " tokens" + (with_front ? ", front" : ""));
  RandomProjections r(n_tokens, v41, rng, kHeads * kHeadDim, kIndexHeads * 128);
  if (v41) shrink_head_rows(r);
  const std::vector<float> u = random_bf16_values(rng, n_tokens * r.D, 1.0f), uq = random_bf16_values(rng, n_tokens * r.D, 1.0f);
  const RandomFrontSide side(n_tokens, RandomProjections::D, v41, rng);
  const std::unique_ptr<Backend> gpu = make_chain_backend("device"), steps_gpu = make_chain_backend("host");
  ASSERT_TRUE(gpu && steps_gpu);
  for (int round = 0; round < (with_front ? 2 : 1); ++round) {
    const std::vector<float> cos_sin = random_angles(rng, n_tokens);
    const bool mid_back = round == 0;
    SCOPED_TRACE(mid_back ? "mid back" : "mid not back");
    RandomProjections::Outputs host(r), device(r);
    MhcScratch host_scratch, device_scratch;
    if (with_front) {
      run_front_steps(*steps_gpu, side.side, r, cos_sin, host_scratch, host);
      run_front_keeping_q(*gpu, side.side, r, cos_sin, mid_back, device_scratch, device);
    } else {
      projection_chain_on_backend(*steps_gpu, r.chain(u.data(), uq.data(), host));
      host_query_work(host, cos_sin, v41);
      const HeadRope rope{kHeads, kHeadDim, kRopeDim, cos_sin.data(), false, true, kEps};
      const IndexQueryWork index_q{kIndexHeads, 128, kRopeDim, cos_sin.data(), v41};
      ProjectionChainParams p = r.chain(u.data(), uq.data(), device);
      p.q_rope = &rope;
      p.index_q = &index_q;
      ASSERT_TRUE(gpu->projection_chain(p)) << "the device chain declined";
    }
    EXPECT_TRUE(all_untouched(device.q) && all_untouched(device.iq)) << "q's or the indexer query's host array written";
    if (mid_back) {
      EXPECT_EQ(n_differing(host.qr_q, device.qr_q), 0);
    } else {
      EXPECT_TRUE(all_untouched(device.qr_q)) << "mid_q came back: the front waited for its second stage";
    }
    expect_index_scores_on_kept_query(*gpu, host.iq, device.iq.data(), kIndexHeads, rng);
    expect_kept_q_equals(*gpu, host, device);
  }
}

TEST(KeptArraysCuda, ChainKeepsQNormedAndRotatedAsTheHostDoes) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(700);
  for (const char* linear : {"mma", "mma_split"}) {
    const ScopedCudaPaths paths(linear);
    SCOPED_TRACE(linear);
    for (int64_t n : {1, 3, 70}) {
      for (bool v41 : {false, true}) {
        for (bool with_front : {false, true}) expect_kept_q_equals_the_host_work(n, v41, with_front, rng);
      }
    }
  }
}

// Fronts that do not wait for their second stage (ProjectionChainParams::mid_back false, q and the indexer's query
// kept): two layers' fronts back to back, each at its own angles, with no wait between the first's return and the
// second's call. The first's second stage may still be queued when the second front rewrites the angles' staging;
// under the emulated runtime it runs only at the second front's wait, so a rewrite shows in the first layer's q.
TEST(KeptArraysCuda, FrontsThatDoNotWaitForTheirQKeepItsAngles) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(710);
  for (int64_t n : {1, 3}) {
    for (bool v41 : {false, true}) {
      SCOPED_TRACE(std::string(v41 ? "V4.1" : "V4") + " rules, " + std::to_string(n) + " tokens");
      const std::unique_ptr<Backend> gpu = make_chain_backend("device"), steps_gpu = make_chain_backend("host");
      ASSERT_TRUE(gpu && steps_gpu);
      struct Layer {
        RandomProjections r;
        RandomFrontSide side;
        std::vector<float> cos_sin;
        RandomProjections::Outputs host{r}, device{r};
        MhcScratch host_scratch, device_scratch;
        Layer(int64_t n, bool v41, std::mt19937& rng)
            : r(n, v41, rng, kHeads * kHeadDim, kIndexHeads * 128), side(n, RandomProjections::D, v41, rng), cos_sin(random_angles(rng, n)) {}
      };
      const std::unique_ptr<Layer> layers[2] = {std::make_unique<Layer>(n, v41, rng), std::make_unique<Layer>(n, v41, rng)};
      for (const std::unique_ptr<Layer>& l : layers) run_front_keeping_q(*gpu, l->side.side, l->r, l->cos_sin, false, l->device_scratch, l->device);
      for (const std::unique_ptr<Layer>& l : layers) {
        run_front_steps(*steps_gpu, l->side.side, l->r, l->cos_sin, l->host_scratch, l->host);
        expect_kept_q_equals(*gpu, l->host, l->device);
      }
    }
  }
}

// More arrays kept than the backend holds (a serving session's passes each keep their own): the least recently
// used go, so one a step keeps again and again (the model's thread_local q) stays, here beside twenty others.
TEST(KeptArraysCuda, ArraysInUseOutliveManyOthers) {
  DI_SKIP_WITHOUT_CUDA();
  const ScopedCudaPaths paths("mma");
  std::mt19937 rng(900);
  RandomProjections r(2, false, rng, 2 * kHeadDim);
  const std::vector<float> u = random_bf16_values(rng, 2 * r.D, 1.0f), uq = random_bf16_values(rng, 2 * r.D, 1.0f);
  const std::vector<float> cos_sin = random_angles(rng, 2);
  const HeadRope rope{2, kHeadDim, kRopeDim, cos_sin.data(), false, true, kEps};
  const std::unique_ptr<Backend> gpu = make_chain_backend("device");
  ASSERT_TRUE(gpu);
  auto kept_chain = [&](RandomProjections::Outputs& out) {
    ProjectionChainParams p = r.chain(u.data(), uq.data(), out);
    p.q_rope = &rope;
    return gpu->projection_chain(p);
  };
  RandomProjections::Outputs step(r);
  std::vector<std::unique_ptr<RandomProjections::Outputs>> others;  // alive, so that no two share an address
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(kept_chain(step));
    others.push_back(std::make_unique<RandomProjections::Outputs>(r));
    ASSERT_TRUE(kept_chain(*others.back()));
    gpu->fetch_kept(step.q.data(), int64_t(step.q.size()));  // aborts where the array was dropped
  }
  RandomProjections::Outputs& last = *others.back();
  gpu->fetch_kept(last.q.data(), int64_t(last.q.size()));
  EXPECT_EQ(n_differing(step.q, last.q), 0) << "the same inputs, the same kept q";
  EXPECT_FALSE(all_untouched(step.q));
}

// One layer's attention as a decode step runs it: q from a projection chain, the attention over cache rows (token t
// reads rows t, t + 1, ..., then empty slots; tokens given in order, or reversed so that neither q nor the outputs
// are one run), its outputs rotated back (AT4).
struct KeptAttentionLayer {
  static constexpr int64_t H = 4, HD = kHeadDim, n_rows = 96, n_slots = 128;
  int64_t n_tokens;
  bool reversed;
  RandomProjections r;
  std::vector<float> u, uq, rows, sink, cos_sin;
  std::vector<const float*> slots;

  KeptAttentionLayer(int64_t n_tokens_, bool reversed_, std::mt19937& rng)
      : n_tokens(n_tokens_), reversed(reversed_), r(n_tokens_, false, rng, H * HD),
        u(random_bf16_values(rng, n_tokens_ * r.D, 1.0f)), uq(random_bf16_values(rng, n_tokens_ * r.D, 1.0f)),
        rows(random_bf16_values(rng, n_rows * HD, 1.0f)), sink(random_bf16_values(rng, H, 1.0f)),
        cos_sin(random_angles(rng, n_tokens_)), slots(size_t(n_tokens_ * n_slots), nullptr) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t j = 0; j < n_rows - t; ++j) slots[size_t(t * n_slots + j)] = &rows[size_t((t + j) * HD)];
    }
  }

  // The attention's ops on q into o; with out_rope, each token's q kept and its output rotated back and kept in o.
  std::vector<SparseAttentionParams> attention(const float* q, float* o, std::span<const HeadRope> out_rope) const {
    std::vector<SparseAttentionParams> ps;
    for (int64_t i = 0; i < n_tokens; ++i) {
      const int64_t t = reversed ? n_tokens - 1 - i : i;
      ps.push_back({.q = q + t * H * HD, .n_heads = H, .head_dim = HD, .slots = &slots[size_t(t * n_slots)], .n_slots = n_slots,
                    .sink = sink.data(), .softmax_scale = double(float(1.0 / std::sqrt(double(HD)))), .block_running_max = true,
                    .out = o + t * H * HD, .q_kept = !out_rope.empty(), .out_rope = out_rope.empty() ? nullptr : &out_rope[size_t(t)],
                    .out_kept_array = out_rope.empty() ? nullptr : o, .out_kept_floats = out_rope.empty() ? 0 : n_tokens * H * HD});
    }
    return ps;
  }

  // The model's steps: q back to the host, its head work there, the attention, AT4 there.
  std::vector<float> host_output(Backend& steps_gpu) {
    RandomProjections::Outputs host(r);
    projection_chain_on_backend(steps_gpu, r.chain(u.data(), uq.data(), host));
    host_head_rope(host.q, H, cos_sin, true, false);
    std::vector<float> o(size_t(n_tokens * H * HD), -7.0f);
    steps_gpu.sparse_attentions(attention(host.q.data(), o.data(), {}));
    host_head_rope(o, H, cos_sin, false, true);
    return o;
  }

  // Kept: the chain keeps q (in device's array), then the attention its output (in o's), neither written on the host.
  void keep_q(Backend& gpu, RandomProjections::Outputs& device) {
    const HeadRope q_rope{H, HD, kRopeDim, cos_sin.data(), false, true, kEps};
    ProjectionChainParams p = r.chain(u.data(), uq.data(), device);
    p.q_rope = &q_rope;
    ASSERT_TRUE(gpu.projection_chain(p));
  }
  void attend_kept(Backend& gpu, const RandomProjections::Outputs& device, std::vector<float>& o) {
    out_rope.clear();
    for (int64_t t = 0; t < n_tokens; ++t) out_rope.push_back({H, HD, kRopeDim, &cos_sin[size_t(t * kRopeDim)], true, false, 0.0});
    std::fill(o.begin(), o.end(), -7.0f);
    gpu.sparse_attentions(attention(device.q.data(), o.data(), out_rope));
    EXPECT_TRUE(all_untouched(device.q) && all_untouched(o)) << "q's or the output's host array written";
  }
  std::vector<HeadRope> out_rope;
};

// A decode step's attention with kept arrays, then the output projection on its kept outputs.
void expect_attention_on_kept_arrays(int64_t n_tokens, bool reversed, std::mt19937& rng) {
  SCOPED_TRACE(std::to_string(n_tokens) + " tokens" + (reversed ? ", reversed" : ""));
  KeptAttentionLayer layer(n_tokens, reversed, rng);
  RandomOutputProjection out_proj(n_tokens, false, rng);
  ASSERT_EQ(int64_t(out_proj.o.size()), n_tokens * KeptAttentionLayer::H * KeptAttentionLayer::HD);
  const std::unique_ptr<Backend> gpu = make_chain_backend("device"), steps_gpu = make_chain_backend("host");
  ASSERT_TRUE(gpu && steps_gpu);

  // The model's steps, then the output projection.
  const std::vector<float> host_o = layer.host_output(*steps_gpu);
  std::vector<float> host_y(size_t(n_tokens * out_proj.D), -7.0f);
  std::copy(host_o.begin(), host_o.end(), out_proj.o.begin());
  linear_chain_on_backend(*steps_gpu, out_proj.chain(host_y.data()));

  // Kept: nothing of q or o crosses to the host.
  RandomProjections::Outputs device(layer.r);
  layer.keep_q(*gpu, device);
  layer.attend_kept(*gpu, device, out_proj.o);
  gpu->fetch_kept(out_proj.o.data(), int64_t(out_proj.o.size()));
  EXPECT_EQ(n_differing(host_o, out_proj.o), 0) << "of " << host_o.size() << " attention outputs";
  std::fill(out_proj.o.begin(), out_proj.o.end(), -7.0f);  // the chain must read the kept array
  std::vector<float> device_y(host_y.size(), -7.0f);
  LinearChainParams chain = out_proj.chain(device_y.data());
  chain.x_kept = true;
  ASSERT_TRUE(gpu->linear_chain(chain)) << "the device chain declined kept inputs";
  EXPECT_EQ(n_differing(host_y, device_y), 0) << "of " << host_y.size() << " output projection values";
  EXPECT_FALSE(all_untouched(device_y));
  // A chain the backend declines reads the kept array from the host: the model's run_linear_chain fetches it first.
  std::vector<float> fetched_y(host_y.size(), -7.0f);
  LinearChainParams declined = out_proj.chain(fetched_y.data());
  declined.x_kept = true;
  declined.second.epilogue = Epilogue::kF32AddBias;  // which the device chain declines
  std::vector<float> zero_bias(host_y.size(), 0.0f);
  declined.second.bias = zero_bias.data();
  run_linear_chain(*gpu, declined);
  EXPECT_FALSE(all_untouched(out_proj.o)) << "the kept output was not fetched";
  EXPECT_EQ(n_differing(host_o, out_proj.o), 0);
}

TEST(KeptArraysCuda, AttentionAndOutputProjectionReadWhatIsKept) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(800);
  for (const std::string& attention : attention_paths()) {
    const ScopedCudaPaths paths("mma", attention);
    SCOPED_TRACE(attention);
    for (int64_t n : {1, 5}) {
      for (bool reversed : {false, true}) expect_attention_on_kept_arrays(n, reversed, rng);
    }
  }
}

TEST(KeptArraysCuda, AttentionsThatKeepTheirOutputsDoNotWaitYetKeepTheirInputs) {
  DI_SKIP_WITHOUT_CUDA();
  // An attention whose outputs stay on the device returns before its work has run; the next one (here another
  // layer's, its own q, rows and outputs, with no wait between them) must not rewrite the staging that work still
  // reads. Under the emulated runtime the queued copies read the staging only at the next wait, so a rewrite shows
  // in the first outputs.
  std::mt19937 rng(810);
  for (const std::string& attention : attention_paths()) {
    const ScopedCudaPaths paths("mma", attention);
    SCOPED_TRACE(attention);
    for (int64_t n : {1, 3}) {
      SCOPED_TRACE(std::to_string(n) + " tokens");
      KeptAttentionLayer first(n, false, rng), second(n, true, rng);
      const std::unique_ptr<Backend> gpu = make_chain_backend("device"), steps_gpu = make_chain_backend("host");
      ASSERT_TRUE(gpu && steps_gpu);
      const std::vector<float> host_first = first.host_output(*steps_gpu), host_second = second.host_output(*steps_gpu);
      RandomProjections::Outputs first_q(first.r), second_q(second.r);
      std::vector<float> first_o(host_first.size()), second_o(host_second.size());
      first.keep_q(*gpu, first_q);
      second.keep_q(*gpu, second_q);
      first.attend_kept(*gpu, first_q, first_o);
      second.attend_kept(*gpu, second_q, second_o);
      gpu->fetch_kept(first_o.data(), int64_t(first_o.size()));
      gpu->fetch_kept(second_o.data(), int64_t(second_o.size()));
      EXPECT_EQ(n_differing(host_first, first_o), 0) << "of the first layer's " << host_first.size() << " outputs";
      EXPECT_EQ(n_differing(host_second, second_o), 0) << "of the second layer's " << host_second.size() << " outputs";
    }
  }
}

// A kept stream of n tokens for the tests below: a chain's kept q ([n, 4, dim] values) stands for it, on a backend with
// the device chains (gpu), beside one without them (host_chain).
struct KeptStreamStandIn {
  static constexpr int64_t dim = KeptAttentionLayer::H * KeptAttentionLayer::HD / 4;
  KeptAttentionLayer layer;
  std::unique_ptr<Backend> gpu = make_chain_backend("device"), host_chain = make_chain_backend("host");
  RandomProjections::Outputs device;  // device.q: the stream's host array

  KeptStreamStandIn(int64_t n, std::mt19937& rng) : layer(n, false, rng), device(layer.r) {
    if (gpu) layer.keep_q(*gpu, device);
  }
};

// V4.1's DSpark tap on a kept stream (Backend::stream_tap, on a KeptStreamStandIn): the tap goes into one column of a
// kept taps array, the host's copies untouched until fetched (both at once: Backend::fetch_kept_arrays), and equals
// dsv41.cpp's step 5 on the fetched stream bit for bit. A backend without the device chains declines.
TEST(KeptArraysCuda, StreamTapOfTheKeptStreamStaysOnTheDevice) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(820);
  for (int64_t n : {1, 3}) {
    SCOPED_TRACE(std::to_string(n) + " tokens");
    KeptStreamStandIn s(n, rng);
    ASSERT_TRUE(s.gpu && s.host_chain);
    Backend &gpu = *s.gpu, &host_chain = *s.host_chain;
    RandomProjections::Outputs& device = s.device;
    const int64_t dim = KeptStreamStandIn::dim, n_taps = 3;
    std::vector<float> taps(size_t(n * n_taps * dim), -7.0f);
    const StreamTapParams tap{.h = device.q.data(), .n_tokens = n, .dim = dim, .out = &taps[size_t(dim)], .out_stride = n_taps * dim,
                              .out_array = taps.data(), .out_floats = int64_t(taps.size())};
    EXPECT_FALSE(host_chain.stream_tap(tap)) << "a backend without the device chains keeps no stream";
    ASSERT_TRUE(gpu.stream_tap(tap));
    StreamTapParams again = tap;  // another layer's tap into the array the first left on the device
    again.out = &taps[size_t(2 * dim)];
    again.out_array_kept = true;
    ASSERT_TRUE(gpu.stream_tap(again));
    EXPECT_TRUE(all_untouched(taps) && all_untouched(device.q)) << "the taps' or the stream's host array written";
    const KeptFetch both[] = {{taps.data(), int64_t(taps.size())}, {device.q.data(), int64_t(device.q.size())}};
    gpu.fetch_kept_arrays(both);  // both with one wait, as a V4.1 pass's end fetches its stream, pre and taps
    int64_t n_differ = 0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t d = 0; d < dim; ++d) {
        double sum = 0;
        for (int k = 0; k < 4; ++k) sum += device.q[size_t((t * 4 + k) * dim + d)];
        const float want = round_bf16(sum / 4.0);  // dsv41.cpp's step 5
        for (int64_t column : {1, 2}) n_differ += std::memcmp(&taps[size_t((t * n_taps + column) * dim + d)], &want, 4) != 0;
      }
    }
    EXPECT_EQ(n_differ, 0) << "of " << 2 * n * dim << " taps";
  }
}

// The head on a kept stream (Backend::head_on_kept_stream, on a KeptStreamStandIn) over the stacked rows (the last
// token's, or every token's in a scrambled order) and the head linear, with the rows kept or drawn, gives the host's
// steps bit for bit, and their draws (greedy, and the first row's at a temperature): V4's H1-H4 (model/dsv4.cpp: hc_mix and the linear on the same backend,
// hc_head_pre, hc_collapse and rmsnorm on the host over the fetched stream) and V4.1's step 43 (the collapse with a
// kept pre: here the stream's first floats stand for it, n x 4 of them). The stream's host array untouched; a backend
// without the device chains declines.
TEST(KeptArraysCuda, HeadOnTheKeptStreamGivesTheHostStepsBits) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(840);
  const int64_t dim = KeptStreamStandIn::dim, vocab = 300;
  const OwnedWeight head = random_bf16_weight(rng, vocab, dim);
  std::vector<float> hc_fn = random_bf16_values(rng, 4 * 4 * dim, 0.05f), hc_base = random_bf16_values(rng, 4, 0.5f);
  const std::vector<float> hc_scale = {0.75f};
  std::vector<uint16_t> norm(static_cast<size_t>(dim));
  for (uint16_t& b : norm) b = bf16_of(random_bf16_values(rng, 1, 0.5f)[0] + 1.0f);
  const double eps = 1e-6, hc_eps = 1e-3;  // apart, so that one taken for the other fails
  // The stacked rows: the last token's (one run), every token's scrambled (gathered), a run past the first token.
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> cases = {{1, {0}}, {3, {2}}, {3, {2, 1, 0}}, {3, {1, 2}}};
  for (const auto& [n, rows] : cases) {
    for (const bool v41 : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + " tokens, rows from " + std::to_string(rows[0]) + " (" + std::to_string(rows.size()) +
                   ")" + (v41 ? ", V4.1" : ", V4"));
      KeptStreamStandIn s(n, rng);
      ASSERT_TRUE(s.gpu && s.host_chain);
      Backend &gpu = *s.gpu, &host_chain = *s.host_chain;
      const int64_t R = int64_t(rows.size());
      HeadRowsParams hp{.h = s.device.q.data(), .n_stream_tokens = n, .dim = dim, .rows = rows, .hc_fn = hc_fn.data(),
                        .hc_scale = hc_scale.data(), .hc_base = hc_base.data(), .hc_eps = hc_eps, .norm = norm.data(), .eps = eps};
      if (v41) {
        hp.hc_fn = hp.hc_scale = hp.hc_base = nullptr;
        hp.pre = s.device.q.data();
      }
      std::vector<float> got(size_t(R * vocab), -7.0f);
      const LinearParams op{nullptr, dim, R, &head.w, 0, vocab, Epilogue::kF32, nullptr, got.data(), vocab};
      std::vector<uint8_t> keep_out(static_cast<size_t>(R), 1);
      keep_out[0] = 0;  // the first row drawn only
      std::vector<int32_t> ids(static_cast<size_t>(R), -1);
      std::vector<TokenDraw> draws(static_cast<size_t>(R));  // the first row at a temperature, the others greedy
      draws[0] = {.temperature = 0.8f, .uniform = 0.37};
      EXPECT_FALSE(host_chain.head_on_kept_stream(hp, op, keep_out, draws, ids.data(), nullptr)) << "a backend without the device chains";
      ASSERT_TRUE(gpu.head_on_kept_stream(hp, op, keep_out, draws, ids.data(), nullptr));
      EXPECT_TRUE(all_untouched(s.device.q)) << "the stream's host array written";
      gpu.fetch_kept(s.device.q.data(), int64_t(s.device.q.size()));
      // The host's steps (Model::head_norm_rows, then H5) on the stacked rows of the fetched stream.
      std::vector<float> hs(size_t(R * 4 * dim)), mixes(size_t(R * 4)), y(size_t(R * dim)), want(size_t(R * vocab));
      for (int64_t r = 0; r < R; ++r) {
        std::copy_n(&s.device.q[size_t(rows[size_t(r)] * 4 * dim)], 4 * dim, &hs[size_t(r * 4 * dim)]);
      }
      if (!v41) gpu.hc_mix({hs.data(), R, 4 * dim, hc_fn.data(), 4, eps, mixes.data()});
      for (int64_t r = 0; r < R; ++r) {
        float pre[4];
        if (v41) {
          std::copy_n(&s.device.q[size_t(rows[size_t(r)] * 4)], 4, pre);
        } else {
          hc_head_pre(&mixes[size_t(r * 4)], hc_scale.data(), hc_base.data(), hc_eps, pre);
        }
        hc_collapse(&hs[size_t(r * 4 * dim)], pre, dim, &y[size_t(r * dim)]);
        rmsnorm(&y[size_t(r * dim)], norm.data(), dim, eps, &y[size_t(r * dim)]);
      }
      gpu.linear({y.data(), dim, R, &head.w, 0, vocab, Epilogue::kF32, nullptr, want.data(), vocab});
      int64_t n_differ = 0;
      for (int64_t r = 0; r < R; ++r) {
        EXPECT_EQ(ids[size_t(r)], draw_token(&want[size_t(r * vocab)], vocab, draws[size_t(r)])) << "row " << r;
        for (int64_t v = 0; v < vocab; ++v) {
          const float expect = keep_out[size_t(r)] ? want[size_t(r * vocab + v)] : -7.0f;
          n_differ += std::memcmp(&got[size_t(r * vocab + v)], &expect, 4) != 0;
        }
      }
      EXPECT_EQ(n_differ, 0) << "of " << R * vocab << " outputs";
    }
  }
}

// V4.1's Engram update on a kept stream (Backend::engram_gate, on a KeptStreamStandIn): two layers' updates one after
// the other with no wait between (the second rewrites the gathered rows' staging while the first's upload may still
// be queued), the stream's and kv's host arrays untouched, and the stream afterwards dsv41.cpp's host steps (the
// table rows decoded by engram_table_row and QDQ'd as Model::act_qdq_rows does, wkv as linear() runs it, ops.h's
// engram_gate per copy) bit for bit. A backend without the device chains declines.
TEST(KeptArraysCuda, EngramGateUpdatesTheKeptStreamInPlace) {
  DI_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(830);
  // 160 columns: the QDQ's last block short (128 + 32).
  const int64_t dim = KeptStreamStandIn::dim, row_dim = 32, rows_per_token = 5, width = rows_per_token * row_dim;
  const int64_t table_rows = 37, qdq_block = 128;
  const OwnedWeight wkv = random_fp8_weight(rng, 5 * dim, width, 128);
  std::vector<uint16_t> qk_weights(size_t(2 * 4 * dim));  // q_weight, then k_weight
  for (uint16_t& b : qk_weights) b = bf16_of(random_bf16_values(rng, 1, 0.5f)[0]);
  const uint16_t* q_weight = qk_weights.data();
  const uint16_t* k_weight = qk_weights.data() + 4 * dim;
  // A table as the checkpoint stores it: e4m3 codes (no NaN) and e8m0 scales a few powers of two either side of 1,
  // so that the QDQ's 128-blocks mix scales.
  std::vector<uint8_t> codes(size_t(table_rows * row_dim)), scales(size_t(table_rows * row_dim / 32));
  for (uint8_t& c : codes) {
    c = uint8_t(std::uniform_int_distribution<int>(0, 255)(rng));
    if ((c & 0x7f) == 0x7f) c ^= 1;  // 448 in place of NaN
  }
  for (uint8_t& b : scales) b = uint8_t(std::uniform_int_distribution<int>(120, 130)(rng));
  const EngramTable table{.codes = codes.data(), .scales = scales.data(), .rows = table_rows, .dim = row_dim};
  for (int64_t n : {1, 3}) {
    SCOPED_TRACE(std::to_string(n) + " tokens");
    KeptStreamStandIn s(n, rng);
    ASSERT_TRUE(s.gpu && s.host_chain);
    Backend &gpu = *s.gpu, &host_chain = *s.host_chain;
    RandomProjections::Outputs& device = s.device;
    gpu.fetch_kept(device.q.data(), int64_t(device.q.size()));  // the stream as it starts (it stays kept)
    std::vector<float> want = device.q;
    std::fill(device.q.begin(), device.q.end(), -7.0f);
    std::vector<float> kv(size_t(n * 5 * dim), -7.0f);
    std::vector<std::vector<int64_t>> rows(2);  // each layer's table rows, rows_per_token a token (repeats allowed)
    for (std::vector<int64_t>& r : rows) {
      r.resize(size_t(n * rows_per_token));
      for (int64_t& row : r) row = std::uniform_int_distribution<int64_t>(0, table_rows - 1)(rng);
    }
    auto params = [&](const std::vector<int64_t>& token_rows, float* h) {
      return EngramGateParams{.kv = {.x = nullptr, .x_stride = width, .n_tokens = n, .weight = &wkv.w, .row_begin = 0,
                                     .n_rows = 5 * dim, .epilogue = Epilogue::kBf16, .bias = nullptr, .out = kv.data(),
                                     .out_stride = 5 * dim, .x_e4m3_block = qdq_block},
                              .table = &table, .rows = token_rows.data(), .rows_per_token = rows_per_token,
                              .qdq_block = qdq_block, .h = h, .n_tokens = n, .dim = dim, .q_weight = q_weight,
                              .k_weight = k_weight, .eps = 1e-20};
    };
    EXPECT_FALSE(host_chain.engram_gate(params(rows[0], want.data()))) << "a backend without the device chains keeps no stream";
    for (const std::vector<int64_t>& r : rows) ASSERT_TRUE(gpu.engram_gate(params(r, device.q.data())));
    EXPECT_TRUE(all_untouched(device.q) && all_untouched(kv)) << "the stream's or kv's host array written";
    for (const std::vector<int64_t>& r : rows) {
      std::vector<float> x(size_t(n * width)), host_kv(kv.size());
      for (int64_t i = 0; i < n * rows_per_token; ++i) engram_table_row(table, r[size_t(i)], &x[size_t(i * row_dim)]);
      for (int64_t t = 0; t < n; ++t) qdq_fp8_v41(&x[size_t(t * width)], width, qdq_block);
      EngramGateParams p = params(r, want.data());
      p.kv.x = x.data();
      p.kv.out = host_kv.data();
      host_chain.linear(p.kv);
      for (int64_t t = 0; t < n; ++t) {
        const float* row = &host_kv[size_t(t * 5 * dim)];
        for (int k = 0; k < 4; ++k) {
          engram_gate(&want[size_t((t * 4 + k) * dim)], q_weight + k * dim, k_weight + k * dim, row + k * dim, row + 4 * dim, dim, p.eps);
        }
      }
    }
    gpu.fetch_kept(device.q.data(), int64_t(device.q.size()));
    EXPECT_EQ(n_differing(want, device.q), 0) << "of " << want.size() << " stream values";
  }
}

}  // namespace
}  // namespace deepinfer::testing
