// Backend::linear_draws on the CUDA backend (the head of a greedy, top-k or plain temperature draw): each token's id is
// model/token_draw.h's draw_token of the outputs linear() gives on the same backend (row_draw_kernel.cu), the kept
// tokens' rows are linear()'s bits and the other rows are left as they were. Greedy: the weights plant what the
// reduction must get right: rows that tie at a token's largest value in different threads and warps of the block (the
// lowest index wins), a NaN row (passed over), a token whose outputs are all NaN (0) and outputs that are all -inf but
// a NaN (the first -inf). At a temperature: logits planted token by token (x = e_t against column t), with the
// uniforms at 0 and just under 1, weights below e^-700 (0), ties, NaNs, a temperature that scales a logit to infinity,
// and widths that end inside a group and a span; top-k draws, whose candidates (ties among them) the device finds, and
// nucleus draws (top-p or min-p over the whole row), whose first candidates and total the device finds, the host
// cutting them where the cut lies inside and bringing the row's logits back where it lies past them. On the
// tensor-core and the FMA linear.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda/cuda_util.h"
#include "kernel/kernel_test_util.h"
#include "model/ops.h"
#include "model/token_draw.h"

namespace deepinfer::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

void set_weight(OwnedWeight& w, int64_t row, int64_t k, float bf16_value) {
  reinterpret_cast<uint16_t*>(w.data.data())[row * w.w.n_in + k] = bf16_of(bf16_value);
}

// linear_draws against linear() and the host's draw_token on the same backend, keeping the tokens where keep(t);
// draws: one a token (none: every one greedy).
void expect_draws_of_linear(Backend& gpu, const LinearWeight& w, const std::vector<float>& x, int64_t n_tokens,
                            const std::function<bool(int64_t)>& keep, const std::vector<int32_t>& want_ids = {},
                            std::vector<TokenDraw> draws = {}) {
  const int64_t V = w.n_out, K = w.n_in, out_stride = V + 3;
  if (draws.empty()) draws.resize(size_t(n_tokens));
  ASSERT_EQ(int64_t(draws.size()), n_tokens);
  std::vector<float> all(size_t(n_tokens * V));
  gpu.linear({x.data(), K, n_tokens, &w, 0, V, Epilogue::kF32, nullptr, all.data(), V});
  // The same op on other inputs, so that the backend's staging holds other outputs in the places linear_draws uses.
  std::vector<float> other_x(x.size()), other_out(all.size());
  for (size_t i = 0; i < x.size(); ++i) other_x[i] = -2.0f * x[i];
  gpu.linear({other_x.data(), K, n_tokens, &w, 0, V, Epilogue::kF32, nullptr, other_out.data(), V});
  std::vector<float> out(size_t(n_tokens * out_stride), -7.0f);
  std::vector<uint8_t> keep_out(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) keep_out[size_t(t)] = keep(t);
  std::vector<int32_t> ids(size_t(n_tokens), -1);
  std::vector<TokenLogprob> logprobs(static_cast<size_t>(n_tokens));
  ASSERT_TRUE(gpu.linear_draws({x.data(), K, n_tokens, &w, 0, V, Epilogue::kF32, nullptr, out.data(), out_stride}, keep_out,
                               draws, ids.data(), logprobs.data()));
  auto same_float = [](float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); };
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = &all[size_t(t * V)];
    EXPECT_EQ(ids[size_t(t)], draw_token(row, V, draws[size_t(t)])) << "token " << t;
    if (draws[size_t(t)].logprobs >= 0) {  // over linear()'s row, before the edits and the mask
      TokenLogprob want;
      token_logprobs(row, V, ids[size_t(t)], draws[size_t(t)].logprobs, want);
      const TokenLogprob& got = logprobs[size_t(t)];
      EXPECT_EQ(got.id, ids[size_t(t)]) << "token " << t;
      EXPECT_TRUE(same_float(got.logprob, want.logprob)) << "token " << t << ": " << got.logprob << " against " << want.logprob;
      ASSERT_EQ(got.top.size(), want.top.size()) << "token " << t;
      for (size_t j = 0; j < want.top.size(); ++j) {
        EXPECT_EQ(got.top[j].first, want.top[j].first) << "token " << t << ", top " << j;
        EXPECT_TRUE(same_float(got.top[j].second, want.top[j].second)) << "token " << t << ", top " << j;
      }
    }
    if (t < int64_t(want_ids.size())) {
      EXPECT_EQ(ids[size_t(t)], want_ids[size_t(t)]) << "token " << t;
    }
    int64_t n_wrong = 0;
    for (int64_t i = 0; i < out_stride; ++i) {
      const float got = out[size_t(t * out_stride + i)];
      const bool written = keep_out[size_t(t)] && i < V;
      const float want = written ? row[i] : -7.0f;
      n_wrong += !(std::memcmp(&got, &want, 4) == 0 || (std::isnan(got) && std::isnan(want)));
    }
    EXPECT_EQ(n_wrong, 0) << "token " << t << (keep_out[size_t(t)] ? " (kept)" : " (drawn only)");
  }
}

void expect_draws(const std::string& linear_path) {
  const ScopedCudaPaths paths(linear_path);
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(7);
  const int64_t V = 6000, K = 256, T = 9;
  OwnedWeight w = random_bf16_weight(rng, V, K);
  std::vector<float> x = random_bf16_values(rng, T * K, 1.0f);
  // Token 0's largest output at rows 777, 3000 and 5001 (threads 9, 184 and 137 of the 256-thread block: warps 0, 5
  // and 4), token 1's at rows 4000 and 10 (the lower index in the later warp): copies of one row that follows the
  // token's signs, so their sums are the same bits and far above the random rows'.
  for (int64_t k = 0; k < K; ++k) {
    const float hot0 = x[size_t(k)] < 0 ? -0.5f : 0.5f, hot1 = x[size_t(K + k)] < 0 ? -0.5f : 0.5f;
    for (int64_t row : {777, 3000, 5001}) set_weight(w, row, k, hot0);
    for (int64_t row : {4000, 10}) set_weight(w, row, k, hot1);
  }
  set_weight(w, 2000, 5, kNan);  // a NaN output in every token
  for (int64_t k = 0; k < K; ++k) x[size_t(2 * K + k)] = kNan;  // token 2: every output NaN
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t t) { return t % 3 == 1; }, {777, 10, 0});
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t t) { return t % 3 != 0; }, {777, 10, 0});  // runs of 2 kept rows
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t t) { return t < 5; }, {777, 10, 0});
  expect_draws_of_linear(*gpu, w.w, x, T, [](int64_t) { return false; }, {777, 10, 0});
  expect_draws_of_linear(*gpu, w.w, x, 1, [](int64_t) { return true; }, {777});

  // Every output -inf but row 0's NaN: x = e_0 against a column 0 of -inf.
  OwnedWeight inf_w = random_bf16_weight(rng, 300, 32);
  for (int64_t row = 0; row < 300; ++row) set_weight(inf_w, row, 0, row == 0 ? kNan : -INFINITY);
  std::vector<float> e0(32, 0.0f);
  e0[0] = 1.0f;
  expect_draws_of_linear(*gpu, inf_w.w, e0, 1, [](int64_t) { return false; }, {1});
}

// A token's planted logits (bf16 values) and its draw.
struct Planted {
  std::function<float(int64_t)> logit;  // by row
  TokenDraw draw;
  int32_t want = -1;  // the id it must draw (-1: not checked beyond the host's draw_token)
  std::vector<LogitEdit> edits = {};  // made before the draw (draw.edits is set to them)
  std::vector<uint8_t> allowed = {};  // then the mask (draw.allowed)
};

// Runs the planted tokens as one op: x_t = e_t against a weight whose column t holds token t's logits and whose other
// columns are 0, so that token t's outputs are its logits exactly (a non-finite logit must be planted alone: 0 times
// it is NaN in every other token). The weight is kept in `weights`: the backend keeps its upload by address for its
// lifetime. Returns how many tokens drew another id than their logits' argmax.
// Nucleus rows among them: how many the first candidates decide (counts[0]) and how many need the logits (counts[1]).
int expect_planted_draws(Backend& gpu, int64_t V, const std::vector<Planted>& tokens, std::deque<OwnedWeight>& weights,
                         int* nucleus_counts = nullptr) {
  constexpr int64_t K = 32;
  const int64_t T = int64_t(tokens.size());
  EXPECT_LE(T, K);
  std::mt19937 unused_rng(1);
  OwnedWeight& w = weights.emplace_back(random_bf16_weight(unused_rng, V, K));
  std::fill(w.data.begin(), w.data.end(), uint8_t(0));  // (only the weight's shape and type are kept)
  std::vector<TokenDraw> draws;
  std::vector<int32_t> want_ids;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t row = 0; row < V; ++row) {
      const float v = tokens[size_t(t)].logit(row);
      set_weight(w, row, t, std::isfinite(v) ? round_bf16_from_float(v) : v);
    }
    draws.push_back(tokens[size_t(t)].draw);
    draws.back().edits = tokens[size_t(t)].edits;
    draws.back().allowed = tokens[size_t(t)].allowed;
  }
  std::vector<float> x(size_t(T * K), 0.0f);
  for (int64_t t = 0; t < T; ++t) x[size_t(t * K + t)] = 1.0f;
  expect_draws_of_linear(gpu, w.w, x, T, [&](int64_t t) {
    return t % 4 == 1 && draws[size_t(t)].edits.empty() && draws[size_t(t)].allowed.empty();
  }, {}, draws);
  std::vector<float> logits(size_t(T * V));
  gpu.linear({x.data(), K, T, &w.w, 0, V, Epilogue::kF32, nullptr, logits.data(), V});
  int n_off_argmax = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = &logits[size_t(t * V)];
    const int32_t id = draw_token(row, V, draws[size_t(t)]);
    n_off_argmax += id != int32_t(argmax(row, V));
    TemperatureWeights plain;
    if (nucleus_counts && draws_nucleus(draws[size_t(t)], V) && plain.weigh(row, V, draws[size_t(t)].temperature)) {
      std::vector<DrawCandidate> first;
      top_k_candidates(row, V, draws[size_t(t)].temperature, std::min(kNucleusCandidates, V), first);
      ++nucleus_counts[draw_from_nucleus(first, kNucleusCandidates >= V, plain.total(), draws[size_t(t)]) < 0];
    }
    if (tokens[size_t(t)].want >= 0) {
      EXPECT_EQ(id, tokens[size_t(t)].want) << "token " << t;
    }
  }
  return n_off_argmax;
}

void expect_sampled_draws(const std::string& linear_path, int64_t V) {
  const ScopedCudaPaths paths(linear_path);
  DI_MAKE_CUDA_BACKEND(gpu);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_logit = [&](float scale) { return [&, scale](int64_t) { return scale * normal(rng); }; };
  const double just_under_1 = std::nextafter(1.0, 0.0);
  std::vector<Planted> finite = {
      {random_logit(3.0f), {1.0f, 0.5}},
      {random_logit(3.0f), {0.7f, 0.0}},           // the first id of weight > 0
      {random_logit(3.0f), {1.3f, just_under_1}},  // the walk's end, where rounding may leave no pick
      {random_logit(200.0f), {0.05f, 0.999}},      // most weights below e^-700: 0
      {random_logit(3.0f), {1e-38f, 0.4}},         // logits over the temperature overflow: the argmax
      {[](int64_t row) { return row % 97 == 3 ? 5.0f : -1.0f; }, {1.0f, 0.77}},  // ties
      {random_logit(3.0f), {}},                    // greedy
      {random_logit(2.0f), {1.0f, just_under_1}},
      {random_logit(2.0f), {1.0f, just_under_1}},
      // Top-k draws (where top_k is below the width; else plain): the candidates found on the device, the draw from
      // them on the host.
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.3, .top_k = 50}},
      {random_logit(3.0f), {.temperature = 0.7f, .uniform = 0.9, .top_k = 1}},
      {random_logit(2.0f), {.temperature = 1.2f, .uniform = 0.6, .top_k = 1024, .top_p = 0.9f}},
      {random_logit(2.0f), {.temperature = 0.8f, .uniform = 0.5, .top_k = 7, .min_p = 0.1f}},
      // The 100 best are ~62 fives and the lowest ids of the -1s: u near 1 draws among those.
      {[](int64_t row) { return row % 97 == 3 ? 5.0f : -1.0f; }, {.temperature = 1.0f, .uniform = 0.9999, .top_k = 100}},
      {random_logit(3.0f), {.temperature = 1e-38f, .uniform = 0.4, .top_k = 9}},  // the best overflows: the argmax
      // Nucleus draws: the cut among the first candidates (peaked rows, ties whose lowest ids end it, top-p 0: the
      // best alone), past them (flat rows: the logits come back), min-p alone, an overflowing temperature.
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.3, .top_p = 0.9f}},
      {random_logit(3.0f), {.temperature = 0.9f, .uniform = just_under_1, .top_p = 0.95f, .min_p = 0.01f}},
      {random_logit(0.3f), {.temperature = 1.0f, .uniform = 0.6, .top_p = 0.95f}},
      {random_logit(0.1f), {.temperature = 1.0f, .uniform = 0.5, .min_p = 0.5f}},
      {random_logit(2.0f), {.temperature = 0.8f, .uniform = 0.2, .min_p = 0.05f}},
      {[](int64_t row) { return row % 97 == 3 ? 5.0f : -1.0f; }, {.temperature = 1.0f, .uniform = 0.9999, .top_p = 0.82f}},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.7, .top_p = 0.0f}},
      {random_logit(3.0f), {.temperature = 1e-38f, .uniform = 0.4, .top_p = 0.9f}},
  };
  for (int i = 0; i < 9; ++i) finite.push_back({random_logit(2.0f), {0.5f + 0.1f * float(i), std::uniform_real_distribution<double>(0, 1)(rng)}});
  std::deque<OwnedWeight> weights;
  int nucleus_counts[2] = {0, 0};
  const int64_t logits_back_before = gpu->draws_with_logits_back();
  EXPECT_GE(expect_planted_draws(*gpu, V, finite, weights, nucleus_counts), 8);
  EXPECT_EQ(gpu->draws_with_logits_back() - logits_back_before, nucleus_counts[1]);  // (those alone came back)
  EXPECT_GE(nucleus_counts[0], 3);  // decided by the first candidates
  if (V > kNucleusCandidates) {
    EXPECT_GE(nucleus_counts[1], 2);  // the logits brought back
  }
  // Non-finite logits, each alone: no finite logit (the argmax: 0, or the first -inf past a NaN), NaNs among ties.
  expect_planted_draws(*gpu, V, {{[](int64_t) { return kNan; }, {1.0f, 0.4}, 0}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t row) { return row == 0 ? kNan : -INFINITY; }, {2.0f, 0.4}, 1}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t row) { return row % 5 == 0 ? kNan : row % 7 == 3 ? 5.0f : -1.0f; }, {1.0f, 0.3}}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t) { return kNan; }, {.temperature = 1.0f, .uniform = 0.4, .top_k = 3}, 0}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t row) { return row % 5 == 0 ? kNan : row % 7 == 3 ? 5.0f : -1.0f; },
                                  {.temperature = 1.0f, .uniform = 0.999, .top_k = 9}}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t) { return kNan; }, {.temperature = 1.0f, .uniform = 0.4, .top_p = 0.5f}, 0}}, weights);
  // Logit edits (penalties) made on the device before each kind of draw: the best of ties at 5 pushed below the next
  // (greedy: 100), a repetition penalty dividing positive and multiplying negative logits, ids outside the row passed
  // over, and a flat nucleus row whose logits come back already edited (edited once, not twice).
  std::vector<LogitEdit> many;
  for (int32_t id = 0; id < int32_t(V); id += 7) many.push_back({id, id % 2 ? 1.5f : 1.0f, id % 3 ? 0.0f : 2.5f});
  many.push_back({int32_t(V) + 5, 2.0f, 1.0f});
  many.push_back({-1, 2.0f, 1.0f});
  auto ties = [](int64_t row) { return row % 97 == 3 ? 5.0f : -1.0f; };
  auto flat = [](int64_t row) { return 0.3f * float(std::sin(double(row) * 0.731)); };  // (a nucleus of most ids)
  auto mask_of = [&](const std::function<bool(int64_t)>& allowed) {
    std::vector<uint8_t> m(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) m[size_t(i)] = allowed(i);
    return m;
  };
  const std::vector<LogitEdit> demote_3 = {{3, 1.0f, 10.0f}};
  std::vector<Planted> edited = {  // (rows 1 and 5, kept, have no edits: a drawing row's edits must not reach them)
      {ties, {}, V > 100 ? 100 : -1, demote_3},
      {flat, {.temperature = 1.0f, .uniform = 0.45, .top_p = 0.95f}},
      {ties, {.temperature = 1.0f, .uniform = 0.0}, -1, demote_3},
      {random_logit(3.0f), {.temperature = 0.8f, .uniform = 0.6}, -1, many},
      {random_logit(3.0f), {}, -1, many},
      {random_logit(3.0f), {.temperature = 0.8f, .uniform = 0.6}},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.3, .top_k = 9}, -1, many},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.7, .top_p = 0.9f}, -1, many},
      {flat, {.temperature = 1.0f, .uniform = 0.45, .top_p = 0.95f}, -1, many},  // (row 1's twin, edited)
      {flat, {.temperature = 1.0f, .uniform = 0.15, .top_p = 0.95f}, -1, many},
      {flat, {.temperature = 1.0f, .uniform = 0.85, .top_p = 0.95f}, -1, many},
      // Masks (a JSON answer's), after the edits: the tied best ids masked (greedy: the first -1 not masked), and on a
      // sampled, a top-k, a nucleus and a flat nucleus row (which comes back masked) every other id.
      {ties, {}, -1, {}, mask_of([](int64_t i) { return i % 97 != 3 && i != 0; })},
      {random_logit(3.0f), {.temperature = 0.9f, .uniform = 0.4}, -1, many, mask_of([](int64_t i) { return i % 2 == 0; })},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.8, .top_k = 5}, -1, {}, mask_of([](int64_t i) { return i % 2; })},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.5, .top_p = 0.8f}, -1, {}, mask_of([](int64_t i) { return i % 3; })},
      {flat, {.temperature = 1.0f, .uniform = 0.3, .top_p = 0.95f}, -1, many, mask_of([](int64_t i) { return i % 2; })},
      // One id allowed (a finished JSON answer: the end of text alone), and fewer than a top-k's or the nucleus's
      // candidates (the rest -inf among them).
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.9}, int32_t(V / 2), {}, mask_of([&](int64_t i) { return i == V / 2; })},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.9, .top_p = 0.9f}, int32_t(V / 2), many,
       mask_of([&](int64_t i) { return i == V / 2; })},
      {random_logit(3.0f), {.temperature = 1.0f, .uniform = 0.99, .top_k = 9}, -1, {}, mask_of([](int64_t i) { return i % 5 == 1 && i < 15; })},
      {random_logit(0.3f), {.temperature = 1.0f, .uniform = 0.99, .top_p = 0.99f}, -1, {}, mask_of([](int64_t i) { return i % 7 == 2; })},
  };
  const int64_t back_before_edited = gpu->draws_with_logits_back();
  expect_planted_draws(*gpu, V, edited, weights);
  if (V > kNucleusCandidates) {  // the five flat rows came back (four of them edited or masked on the device first)
    EXPECT_EQ(gpu->draws_with_logits_back() - back_before_edited, 5);
  }
  expect_planted_draws(*gpu, V, {{[](int64_t row) { return row % 5 == 0 ? kNan : row % 7 == 3 ? 5.0f : -1.0f; },
                                  {.temperature = 1.0f, .uniform = 0.999, .top_p = 0.9f}}}, weights);

  // Log-probabilities beside each kind of draw (over the rows before their edits and masks): greedy with none of the
  // top ones, sampled, top-k and nucleus draws with up to 20 (more than a 13-wide row has), a flat nucleus row whose
  // logits come back, a chosen id that an edit changed (its original logit is the one that counts) and a masked row,
  // among rows without.
  auto with_logprobs = [](TokenDraw d, int32_t n) {
    d.logprobs = n;
    return d;
  };
  auto best_at_10 = [](int64_t row) { return row == 10 ? 8.0f : 0.5f * float(std::sin(double(row))); };
  const std::vector<LogitEdit> halve_10 = {{10, 2.0f, 0.5f}, {11, 1.5f, 0.25f}};
  std::vector<LogitEdit> every;  // (every id edited: whichever the draw picks, its logit is its original)
  for (int32_t id = 0; id < int32_t(V); ++id) every.push_back({id, id % 2 ? 1.25f : 1.0f, 0.25f});
  std::vector<Planted> asking = {
      {random_logit(3.0f), with_logprobs({}, 0)},
      {random_logit(3.0f), {.temperature = 0.8f, .uniform = 0.6}},
      {random_logit(3.0f), with_logprobs({.temperature = 0.8f, .uniform = 0.6}, 5)},
      {random_logit(3.0f), with_logprobs({.temperature = 1.0f, .uniform = 0.3, .top_k = 9}, 20)},
      {random_logit(3.0f), with_logprobs({.temperature = 1.0f, .uniform = 0.7, .top_p = 0.9f}, 3)},
      {flat, {.temperature = 1.0f, .uniform = 0.45, .top_p = 0.95f}},
      {flat, with_logprobs({.temperature = 1.0f, .uniform = 0.45, .top_p = 0.95f}, 2), -1, many},
      {flat, with_logprobs({.temperature = 1.0f, .uniform = 0.15, .top_p = 0.95f}, 1)},  // (past the candidates too)
      {flat, with_logprobs({.temperature = 1.0f, .uniform = 0.8, .top_p = 0.95f}, 1)},
      {best_at_10, with_logprobs({}, 4), V > 10 ? 10 : -1, halve_10},
      {best_at_10, with_logprobs({.temperature = 0.5f, .uniform = 0.2}, 1), -1, halve_10},
      // Drawn from their candidates on the host, not the device's argmax: ties whose pick lies past the best, and a
      // nucleus decided among its candidates, every id edited.
      {ties, with_logprobs({.temperature = 1.0f, .uniform = 0.9999, .top_k = 100}, 2)},
      {ties, with_logprobs({.temperature = 1.0f, .uniform = 0.9999, .top_k = 100}, 3), -1, every},
      {random_logit(3.0f), with_logprobs({.temperature = 1.0f, .uniform = 0.6, .top_p = 0.9f}, 4), -1, every},
      {random_logit(3.0f), with_logprobs({.temperature = 1.0f, .uniform = 0.5, .top_p = 0.8f}, 20), -1, many,
       mask_of([](int64_t i) { return i % 3; })},
  };
  expect_planted_draws(*gpu, V, asking, weights);
  // Rows whose best is not finite, each alone: all NaN, one +inf, all -inf but a NaN.
  expect_planted_draws(*gpu, V, {{[](int64_t) { return kNan; }, with_logprobs({.temperature = 1.0f, .uniform = 0.4}, 3), 0}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t row) { return row == 4 ? INFINITY : 1.0f; }, with_logprobs({}, 2), 4}}, weights);
  expect_planted_draws(*gpu, V, {{[](int64_t row) { return row == 0 ? kNan : -INFINITY; }, with_logprobs({}, 20), 1}}, weights);
}

// Rows whose walk rounding leaves without a pick at each level (found by a search over rows of 600 ids at temperature 1):
// a few weights of 1 and e^-34 .. e^-41, the rest 0 (-1000), drawn with u just under 1. The sums the walk passes
// over are trees, its subtractions a chain, so a span's, a group's or the row's members can all be passed while the
// tree's sum was not: the last id of weight > 0 in that span (193), group (311) or row (592).
std::vector<Planted> rows_that_rounding_decides() {
  auto row = [](std::vector<std::pair<int64_t, float>> ids) {
    return [ids](int64_t i) {
      for (const auto& [id, logit] : ids) {
        if (id == i) return logit;
      }
      return -1000.0f;
    };
  };
  const double under_1 = std::nextafter(1.0, 0.0);
  return {
      {row({{6, -35}, {8, -40}, {26, -39}, {27, -38}, {31, -36}, {66, -40}, {71, -38}, {89, -36}, {90, -40}, {118, -41},
            {136, 0}, {174, -36}, {209, -40}, {257, -36}, {269, -37}, {325, -37}, {342, 0}, {376, -41}, {403, -39},
            {422, -38}, {452, -35}, {468, -35}, {473, -36}, {476, -36}, {496, -40}, {500, -34}, {503, -39}, {514, 0},
            {525, -37}, {529, -39}, {552, -34}, {553, -34}, {592, -34}}),
       {1.0f, under_1}, 592},
      {row({{46, -37}, {48, -40}, {119, -37}, {122, -39}, {140, -34}, {174, -35}, {193, 0}, {471, -41}, {528, -36}}),
       {1.0f, 1.0 - 4e-16}, 193},
      {row({{48, -34}, {304, -37}, {305, -38}, {307, 0}, {308, -35}, {309, -34}, {311, -40}}), {1.0f, under_1}, 311},
      // And one whose draw the span tree's order decides: with the butterfly's levels the other way round (lane l + lane
      // l + 16 first) its total rounds otherwise, and u = 0.5 lands on 460 instead of 501.
      {row({{57, -37}, {62, -41}, {65, -40}, {120, -36}, {371, -38}, {380, -36}, {460, 0}, {501, 0}, {567, -39}}),
       {1.0f, 0.5}, 501},
  };
}

TEST(LinearDrawsCuda, DrawsThatRoundingDecides) {
  const ScopedCudaPaths paths("fma");
  DI_MAKE_CUDA_BACKEND(gpu);
  std::deque<OwnedWeight> weights;
  expect_planted_draws(*gpu, 600, rows_that_rounding_decides(), weights);
}

// The same draws with each row spread over blocks of 2,048 ids (DEEPINFER_CUDA_ROW_DRAWS=split: every launch here has
// fewer rows than the device has SMs, 132 on the emulated device, an H100 or an H200, but a step of as many rows runs
// a block a row): the greedy rows' ties lie in different blocks (777, 3000 and 5001; 10 and 4000),
// the sampled rows are 6001 wide (three blocks, the last of 1,905 ids) and 4097 (the last of one id), and the rows that
// rounding decides are widened to 4,700 ids with weights of 0, which leave their draws as they were, in the first
// block and moved to the second.
TEST(LinearDrawsCuda, SplitDrawsAreTheHosts) {
  const ScopedEnv split("DEEPINFER_CUDA_ROW_DRAWS", "split");
  expect_draws("fma");
  expect_sampled_draws("fma", 6001);
  expect_sampled_draws("fma", 4097);
  const ScopedCudaPaths paths("fma");
  DI_MAKE_CUDA_BACKEND(gpu);
  std::deque<OwnedWeight> weights;
  expect_planted_draws(*gpu, 4700, rows_that_rounding_decides(), weights);
  // And moved one block on (2,048 ids: whole spans, so the same sums after a run of 0s): the last id of weight > 0 that
  // a walk without a pick takes now lies in the second block.
  std::vector<Planted> moved = rows_that_rounding_decides();
  for (Planted& p : moved) {
    p.logit = [f = p.logit](int64_t i) { return i < 2048 ? -1000.0f : f(i - 2048); };
    p.want += 2048;
  }
  expect_planted_draws(*gpu, 4700, moved, weights);
  // Candidates among ties that span blocks: a third of the ids at 2, the rest at -1, so that the first 1,024 are the
  // lowest 1,024 ids at 2 (683 in the first block, 341 in the second), drawn near their end; a nucleus row among them
  // with its log-probabilities, and one cut inside the first block's.
  auto thirds = [](int64_t row) { return row % 3 == 0 ? 2.0f : -1.0f; };
  TokenDraw asking = {.temperature = 1.0f, .uniform = 0.6, .top_p = 0.5f};
  asking.logprobs = 20;
  expect_planted_draws(*gpu, 6001, {{thirds, {.temperature = 1.0f, .uniform = 0.97, .top_k = 1024}},
                                    {thirds, {.temperature = 0.5f, .uniform = 0.999, .top_k = 700}},
                                    {thirds, asking}}, weights);

  // The split kernels ran (their answers being the same, only the backend's count tells), and a step with as many rows
  // as the device has SMs runs a block a row.
  auto* cuda_backend = dynamic_cast<CudaBackend*>(gpu.get());
  ASSERT_NE(cuda_backend, nullptr);
  const int64_t split_before = cuda_backend->split_row_draw_launches();
  expect_planted_draws(*gpu, 600, {{thirds, {.temperature = 1.0f, .uniform = 0.5, .top_k = 9}}}, weights);
  EXPECT_EQ(cuda_backend->split_row_draw_launches() - split_before, 2);  // (the draws and the candidates)
  int sm_count = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  std::mt19937 rng(3);
  OwnedWeight w = random_bf16_weight(rng, 300, 32);
  const std::vector<float> x = random_bf16_values(rng, int64_t(sm_count) * 32, 1.0f);
  const int64_t split_at_sm_count = cuda_backend->split_row_draw_launches();
  expect_draws_of_linear(*gpu, w.w, x, sm_count, [](int64_t) { return false; });
  EXPECT_EQ(cuda_backend->split_row_draw_launches(), split_at_sm_count);
}

TEST(LinearDrawsCuda, GreedyDrawsAreTheHostsArgmaxOfTheOutputsOnMma) { expect_draws("mma"); }
TEST(LinearDrawsCuda, GreedyDrawsAreTheHostsArgmaxOfTheOutputsOnFma) { expect_draws("fma"); }
TEST(LinearDrawsCuda, SampledDrawsAreTheHostsOnMma) { expect_sampled_draws("mma", 6001); }
TEST(LinearDrawsCuda, SampledDrawsAreTheHostsOnFma) {
  expect_sampled_draws("fma", 6001);
  expect_sampled_draws("fma", 256 * 3);  // (whole spans)
  expect_sampled_draws("fma", 13);       // (one span, a group and 5 ids)
}

}  // namespace
}  // namespace deepinfer::testing
