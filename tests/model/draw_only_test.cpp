// ForwardChunk::draw_only: a chunk that asks for its last token's draw alone (greedy or at a plain temperature) gets
// draw_token of the logits it would otherwise have got (ChunkOutput::drawn) and no logits, and the chunks beside it
// in the call get their logits as before. On a golden model of each family, prompts and decode steps of several
// sequences in one forward (some chunks asking for logits, some for all of them, some for the draw alone), on the
// host's draws (the CPU backends decline Backend::linear_draws) and on a backend that draws itself and leaves the
// drawn rows unwritten.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "golden_util.h"
#include "model/ops.h"
#include "model/token_draw.h"

namespace deepinfer {
namespace {

// The fast backend, but drawing the way a GPU backend does: Backend::linear_draws computes the op into a scratch
// buffer, writes only the kept tokens' rows to p.out and poisons the others (so a model that read a drawn row would
// see NaNs), and draws each token itself.
class DrawsItself final : public Backend {
 public:
  DrawsItself(std::unique_ptr<Backend> inner, int64_t* n_draw_calls) : inner_(std::move(inner)), n_draw_calls_(n_draw_calls) {}
  const char* name() const override { return inner_->name(); }
  void linear(const LinearParams& p) override { inner_->linear(p); }
  void linears(std::span<const LinearParams> ps) override { inner_->linears(ps); }
  void hc_mix(const HcMixParams& p) override { inner_->hc_mix(p); }
  void sparse_attention(const SparseAttentionParams& p) override { inner_->sparse_attention(p); }
  void sparse_attentions(std::span<const SparseAttentionParams> ps) override { inner_->sparse_attentions(ps); }
  void index_scores(const IndexScoreParams& p) override { inner_->index_scores(p); }
  void index_scores_batch(std::span<const IndexScoreParams> ps) override { inner_->index_scores_batch(ps); }
  void for_rows(int64_t n, const std::function<void(int64_t, int64_t)>& body) override { inner_->for_rows(n, body); }
  bool kernels_differ_by_token_kind() const override { return inner_->kernels_differ_by_token_kind(); }
  void set_token_kind(TokenKind kind) override { inner_->set_token_kind(kind); }
  bool linear_draws(const LinearParams& p, std::span<const uint8_t> keep_out, std::span<const TokenDraw> draws,
                    int32_t* drawn, TokenLogprob* logprobs) override {
    EXPECT_EQ(int64_t(keep_out.size()), p.n_tokens);
    EXPECT_EQ(int64_t(draws.size()), p.n_tokens);
    ++*n_draw_calls_;
    std::vector<float> all(size_t(p.n_tokens * p.n_rows));
    LinearParams q = p;
    q.out = all.data();
    q.out_stride = p.n_rows;
    inner_->linear(q);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const float* row = &all[size_t(t * p.n_rows)];
      drawn[t] = draw_token(row, p.n_rows, draws[size_t(t)]);
      if (draws[size_t(t)].logprobs >= 0) token_logprobs(row, p.n_rows, drawn[t], draws[size_t(t)].logprobs, logprobs[t]);
      float* out = p.out + t * p.out_stride;
      if (keep_out[size_t(t)]) std::copy_n(row, p.n_rows, out);
      else std::fill_n(out, p.n_rows, std::numeric_limits<float>::quiet_NaN());
    }
    return true;
  }

 private:
  std::unique_ptr<Backend> inner_;
  int64_t* n_draw_calls_;
};

std::unique_ptr<Model> open_model(const std::string& dir, int64_t* n_draw_calls) {
  ModelOptions options;
  if (n_draw_calls) {
    options.wrap_backend = [=](std::unique_ptr<Backend> fast) -> std::unique_ptr<Backend> {
      return std::make_unique<DrawsItself>(std::move(fast), n_draw_calls);
    };
  }
  auto model = Model::open(dir, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(model.value()) : nullptr;
}

// Five sequences in one forward each step, on case 2's prompts of different lengths (the case's prompt less its last i
// tokens): 0 with its last logits, 1 with all its logits, 2 and 3 with the greedy draw alone, 4 with a draw alone at
// temperature 1.5 (a uniform of its own each step; with top-k 5 and top-p 0.9 at steps 1 and 4, top-p 0.8 over the
// whole vocabulary at step 2), 3 and 4 with log-probabilities at some steps. Prefill, then 4 decode steps feeding the
// golden continuation.
// Each sequence's logits, or draw_token of them, must be those of the same model's forward of that sequence alone (a
// token's logits never depend on the call's other tokens). The sampled draws must not all be the argmax (else the
// test would not tell the two kinds apart).
void expect_draws_of_the_logits(const std::string& dir, bool backend_draws) {
  const std::string case_path = dir + "/case-2.safetensors";  // a 37-token prompt (V4), more (V4.1)
  if (!std::filesystem::exists(case_path)) GTEST_SKIP() << "golden data not found in " << dir;
  auto gc = load_golden_case(case_path);
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  int64_t n_draw_calls = 0;
  auto model = open_model(dir, backend_draws ? &n_draw_calls : nullptr);
  auto solo_model = open_model(dir, nullptr);
  ASSERT_TRUE(model && solo_model);
  const int64_t V = model->config().vocab_size;
  const std::vector<int32_t>& prompt = gc.value().prompt;
  ASSERT_GT(prompt.size(), 4u);

  constexpr int kSequences = 5;
  const double uniforms[5] = {0.93, 0.61, 0.999, 0.27, 0.85};
  int n_sampled_off_argmax = 0;
  std::vector<SequenceState> seqs, solos;
  for (int i = 0; i < kSequences; ++i) {
    seqs.push_back(model->new_sequence());
    solos.push_back(solo_model->new_sequence());
  }
  for (int step = 0; step <= 4; ++step) {
    auto ids_of = [&](int i) {
      return step == 0 ? std::span<const int32_t>(prompt.data(), prompt.size() - size_t(i))
                       : std::span<const int32_t>(&gc.value().continuation[size_t(step - 1)], 1);
    };
    auto prompt_len_of = [&](int i) { return step == 0 ? int64_t(prompt.size()) - i : 0; };
    auto draw_of = [&](int i) {  // (sequence 4: plain, top-k with top-p, or the nucleus draw)
      if (i == 3) return TokenDraw{.logprobs = step % 2 ? 2 : -1};
      if (i != 4) return TokenDraw{};
      const int32_t logprobs = step >= 2 ? 4 : -1;
      if (step % 3 == 1) return TokenDraw{.temperature = 1.5f, .uniform = uniforms[step], .top_k = 5, .top_p = 0.9f, .logprobs = logprobs};
      if (step == 2) return TokenDraw{.temperature = 1.5f, .uniform = uniforms[step], .top_p = 0.8f, .logprobs = logprobs};
      return TokenDraw{.temperature = 1.5f, .uniform = uniforms[step], .logprobs = logprobs};
    };
    std::vector<ForwardChunk> chunks;
    for (int i = 0; i < kSequences; ++i) {
      ForwardChunk fc{&seqs[size_t(i)], ids_of(i), prompt_len_of(i)};
      fc.all_logits = i == 1;
      fc.draw_only = i >= 2;
      fc.draw = draw_of(i);
      chunks.push_back(fc);
    }
    const std::vector<ChunkOutput> out = model->forward(chunks);
    for (int i = 0; i < kSequences; ++i) {
      ForwardChunk solo{&solos[size_t(i)], ids_of(i), prompt_len_of(i)};
      solo.all_logits = true;
      const std::vector<float> all = solo_model->forward(std::span<const ForwardChunk>(&solo, 1))[0].logits;
      ASSERT_EQ(all.size(), ids_of(i).size() * size_t(V));
      const std::vector<float> last(all.end() - V, all.end());
      const ChunkOutput& o = out[size_t(i)];
      if (i == 0) {
        EXPECT_EQ(o.logits, last) << "step " << step;
      }
      if (i == 1) {
        EXPECT_EQ(o.logits, all) << "step " << step;
      }
      if (i < 2) {
        EXPECT_EQ(o.drawn, -1);
      } else {
        EXPECT_TRUE(o.logits.empty()) << "step " << step;
        EXPECT_EQ(o.drawn, draw_token(last.data(), V, draw_of(i))) << "step " << step << ", sequence " << i;
        if (draw_of(i).logprobs >= 0) {  // (with its log-probabilities)
          TokenLogprob want;
          token_logprobs(last.data(), V, o.drawn, draw_of(i).logprobs, want);
          EXPECT_EQ(o.logprob.id, o.drawn);
          EXPECT_EQ(std::memcmp(&o.logprob.logprob, &want.logprob, sizeof(float)), 0) << "step " << step << ", sequence " << i;
          EXPECT_EQ(o.logprob.top, want.top) << "step " << step << ", sequence " << i;
          EXPECT_EQ(int(o.logprob.top.size()), draw_of(i).logprobs);
        }
        if (i == 4) n_sampled_off_argmax += o.drawn != int32_t(argmax(last.data(), V));
      }
    }
  }
  EXPECT_GT(n_sampled_off_argmax, 0);
  if (backend_draws) {
    EXPECT_EQ(n_draw_calls, 5);  // one head call a forward
  }
}

// One chunk alone drawing: its argmax, and no logits, through either path.
void expect_lone_draw(const std::string& dir, bool backend_draws) {
  const std::string case_path = dir + "/case-1.safetensors";
  if (!std::filesystem::exists(case_path)) GTEST_SKIP() << "golden data not found in " << dir;
  auto gc = load_golden_case(case_path);
  ASSERT_TRUE(gc.ok()) << gc.status().message();
  int64_t n_draw_calls = 0;
  auto model = open_model(dir, backend_draws ? &n_draw_calls : nullptr);
  ASSERT_TRUE(model);
  const int64_t V = model->config().vocab_size;
  SequenceState a = model->new_sequence(), b = model->new_sequence();
  ForwardChunk with_logits{&a, gc.value().prompt, int64_t(gc.value().prompt.size())};
  ForwardChunk drawing{&b, gc.value().prompt, int64_t(gc.value().prompt.size())};
  drawing.draw_only = true;
  const auto want = model->forward(std::span<const ForwardChunk>(&with_logits, 1));
  const auto got = model->forward(std::span<const ForwardChunk>(&drawing, 1));
  ASSERT_EQ(int64_t(want[0].logits.size()), V);
  EXPECT_TRUE(got[0].logits.empty());
  EXPECT_EQ(got[0].drawn, int32_t(argmax(want[0].logits.data(), V)));
  if (backend_draws) {
    EXPECT_EQ(n_draw_calls, 1);
  }
}

const std::string kV4 = "/v4-flash/flash-tiny", kV41 = "/v41-flash/tiny-a";

TEST(DrawOnly, V4DrawsAreThoseOfTheLogitsOnTheHost) { expect_draws_of_the_logits(testing::golden_dir() + kV4, false); }
TEST(DrawOnly, V4DrawsAreThoseOfTheLogitsWhereTheBackendDraws) { expect_draws_of_the_logits(testing::golden_dir() + kV4, true); }
TEST(DrawOnly, V41DrawsAreThoseOfTheLogitsOnTheHost) { expect_draws_of_the_logits(testing::golden_dir() + kV41, false); }
TEST(DrawOnly, V41DrawsAreThoseOfTheLogitsWhereTheBackendDraws) { expect_draws_of_the_logits(testing::golden_dir() + kV41, true); }
TEST(DrawOnly, ALoneChunkDraws) {
  expect_lone_draw(testing::golden_dir() + kV4, false);
  expect_lone_draw(testing::golden_dir() + kV41, true);
}

TEST(DrawOnly, RefusedWithAllLogits) {
  const std::string dir = testing::golden_dir() + kV4;
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "golden data not found in " << dir;
  auto model = open_model(dir, nullptr);
  ASSERT_TRUE(model);
  SequenceState seq = model->new_sequence();
  const std::vector<int32_t> ids = {1, 2, 3};
  ForwardChunk fc{&seq, ids, 3};
  fc.all_logits = true;
  fc.draw_only = true;
  EXPECT_DEATH(model->forward(std::span<const ForwardChunk>(&fc, 1)), "draw_only and all_logits");
}

}  // namespace
}  // namespace deepinfer
