// A token's draw from its logits row where nothing but the row and a uniform decides it: greedy, top-k (with top-p and
// min-p cutting its candidates), the nucleus draw (top-p or min-p over the whole row) or the plain temperature draw (no
// cut). The engine's sampler draws every kind through it, and a forward draws them itself (ForwardChunk::draw_only), on
// a GPU backend on the device, so that a sampled step brings back one id a token instead of the vocabulary's logits
// (V4: 517 KB a token). Every backend gives the same id: the plain draw is a fixed sequence of IEEE operations, written
// out below, which the CUDA kernel (row_draw_kernel.cu) runs too; a top-k or nucleus draw's candidates are an order,
// which the device finds (with the plain draw's total for a nucleus draw), and the host draws from them.
//
// The plain temperature draw of logits x[0, n) at temperature T > 0 with uniform u in [0, 1), exactly:
//   s[i] = f32(x[i] / T), a NaN as -inf;   m = the largest s[i] (model/ops.h's max_value).
//   Where m is not finite (a temperature that scales a logit to infinity, or no finite logit): argmax(x) (ops.h).
//   w[i] = exp_fixed(double(s[i]) - m) where double(s[i]) - m >= -700, else 0 (so no libm exp, whose last bit
//          differs between machines; such a weight is below e^-700 of the best one's 1).
//   Groups of 8 ids (ids past n weigh 0): g = ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)).
//   Spans of 32 groups (256 ids; groups past the last weigh 0): the pairwise tree, level by level (width 1, 2, 4, 8,
//          16: v[k] = v[k] + v[k + width] for k a multiple of 2 width), as a warp's XOR butterfly adds its lanes.
//   total = ((0 + span 0) + span 1) + ... in span order.
//   r = u * total. The first span whose sum r - sum < 0, r -= sum for each passed over; then the first of its groups
//   with r - g < 0, r -= g for each passed; then the first of the group's ids with (r -= w[i]) < 0. Where a level
//   passes over every member (rounding), the answer is the last id of weight > 0 within that level's whole: the row,
//   the span, or the group.
// The walk is hierarchical rather than id by id so that a device finds it in ~600 dependent steps, not n.
//
// The nucleus draw (top-p or min-p without top-k), of the same row, T and u: s, m (not finite: the argmax), w and
// total as above. The order: every (s[i], i), larger s first, ties to the lower id; w_j is candidate j's w. Min-p
// keeps the candidates before the first with w_j < min_p (the best one, w = 1, at least); within those, top-p keeps
// the shortest prefix whose running sum c_j = ((0 + w_0) + w_1) + ... + w_j reaches top_p * total (all min-p kept
// where none does; top_p >= 1 cuts nothing). The pick is pick_weighted of the kept w with their running sum as the
// mass. This is a full sort's cut (the sums in the order, as HF's and vLLM's cumulative sums), and a prefix of the
// order decides it wherever the cut falls inside the prefix: a device sends back the first kNucleusCandidates and the
// total, and only a row whose cut lies past them needs its logits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "deepinfer/types.h"

namespace deepinfer {

// An edit of one logit before the draw (the engine's penalties: Sampler's penalty_edits): x[id] becomes
// (x > 0 ? x / divide : x * divide) - subtract, in float (divide 1 and subtract 0 change no bit).
struct LogitEdit {
  int32_t id = 0;
  float divide = 1.0f;
  float subtract = 0.0f;
};
// The edits, in place, each on its own id (ids outside [0, n) are passed over).
void apply_edits(float* logits, int64_t n, std::span<const LogitEdit> edits);
// -inf in place of every logit whose allowed byte is 0 (allowed: n bytes).
void apply_mask(float* logits, int64_t n, std::span<const uint8_t> allowed);

// Every draw first edits the row (`edits`, ids distinct), then masks it (`allowed`: where given, an id whose byte is 0
// has its logit set to -inf, never drawn); then with temperature <= 0 (or NaN): the argmax (ops.h: the first largest,
// NaNs passed over); else with top_k (0 < top_k < the row's width) the top-k draw below, else with
// top_p < 1 or min_p > 0 the nucleus draw above, else the plain temperature draw above, each with `uniform`.
//
// The top-k draw (the engine's sampler's, whose candidates a GPU backend finds on the device): the candidates are the
// top_k best (s[i], i), larger s first, ties to the lower id (s as above); where the best s is not finite, the
// argmax of x. Else p_j = exp_fixed(double(s_j) - s_0) over the candidates in order, divided by their sum (added in
// order); min-p keeps the longest prefix whose last p_j >= min_p p_0, then top-p the shortest prefix whose running sum
// reaches top_p (all where none does); the pick is the first candidate whose running p passes u times the kept p's sum
// (pick_weighted).
struct TokenDraw {
  float temperature = 0.0f;
  double uniform = 0.0;
  int32_t top_k = 0;  // 0 (or the row's width or more): none; top_p and min_p then cut the whole row
  float top_p = 1.0f, min_p = 0.0f;
  std::span<const LogitEdit> edits = {};  // (a view: its owner outlives the draw)
  std::span<const uint8_t> allowed = {};  // empty, or one byte an id of the row (a view too: a JSON answer's mask)
  // >= 0: the draw also gives the drawn id's log-probability and the `logprobs` most likely ids' (token_logprobs
  // below, over the row before its edits and mask); -1: none.
  int32_t logprobs = -1;
};

// Whether the draw is the top-k one, of a row of width n.
inline bool draws_top_k(const TokenDraw& draw, int64_t n) {
  return draw.temperature > 0.0f && draw.top_k > 0 && draw.top_k < n;
}

// Whether the draw is the nucleus one, of a row of width n.
inline bool draws_nucleus(const TokenDraw& draw, int64_t n) {
  return draw.temperature > 0.0f && !draws_top_k(draw, n) && (draw.top_p < 1.0f || draw.min_p > 0.0f);
}
// How many of the order's first candidates a device finds for a nucleus draw (the whole row where it is narrower).
inline constexpr int64_t kNucleusCandidates = 1024;

inline constexpr int64_t kDrawGroupIds = 8;
inline constexpr int64_t kDrawSpanGroups = 32;
inline constexpr int64_t kDrawSpanIds = kDrawGroupIds * kDrawSpanGroups;

// The plain temperature draw's weights of one row, and the sums its walk passes over. A thread keeps one from draw to
// draw (its vectors ~1.2 MB at V4's vocabulary).
class TemperatureWeights {
 public:
  // s, m and w above, the group and span sums and the total: false where m is not finite (then nothing else is set).
  bool weigh(const float* logits, int64_t n, float temperature);
  // The id drawn with `uniform` (after a weigh() that returned true).
  int64_t pick(double uniform) const;
  const double* weights() const { return weights_.data(); }  // w, by id: [0, n)
  double total() const { return total_; }

 private:
  int64_t last_weighted(int64_t begin, int64_t end) const;  // the last id of weight > 0 in [begin, end), else begin

  std::vector<float> scaled_;
  int64_t n_ = 0;
  std::vector<double> weights_, group_sums_, span_sums_;  // (weights_ past n_: 0, to the last group's end)
  double total_ = 0.0;
};

// The draw (TokenDraw) of logits[0, n), with the calling thread's scratch (the edits and the mask on a copy of the
// row).
int32_t draw_token(const float* logits, int64_t n, const TokenDraw& draw);

// s: a logit over the temperature, a NaN as -inf (never drawn), so that every comparison orders the candidates.
inline float scaled_logit(float logit, float temperature) {
  const float v = logit / temperature;
  return v == v ? v : -std::numeric_limits<float>::infinity();
}

// A candidate of the top-k or nucleus draw: (s, id), and their order: larger s first, ties to the lower id.
using DrawCandidate = std::pair<float, int32_t>;
inline bool draw_order(const DrawCandidate& a, const DrawCandidate& b) {
  return a.first != b.first ? a.first > b.first : a.second < b.second;
}
// The top-k draw's candidates of logits[0, n) at a temperature, in their order.
void top_k_candidates(const float* logits, int64_t n, float temperature, int64_t k, std::vector<DrawCandidate>& out);
// Every id of logits[0, n) as a candidate, in the order (a stable radix sort: ~1 ms over V4's vocabulary where a
// comparison sort took ~13); with a limit, only those whose key (the s's bits made monotone, -0 as +0, then inverted:
// a smaller key is a larger s) is at most it: a prefix of the order.
void order_candidates(const float* logits, int64_t n, float temperature, std::vector<DrawCandidate>& out,
                      uint32_t limit = UINT32_MAX);
// The plain draw's w of a candidate of scaled logit s in a row whose largest is m.
double draw_weight(float s, double m);
// The nucleus cut of `prefix`, the order's first candidates (whole_row: every one of the row's), with the plain
// draw's total of the row: how many it keeps (> 0), their w in `weights` and their running sum in `mass`; 0 where
// the cut lies past the prefix, or the best s is not finite. Each w is draw_weight of its s, or weight_by_id[id] where
// that is given (TemperatureWeights::weights(): the same bits).
size_t nucleus_cut(std::span<const DrawCandidate> prefix, bool whole_row, double total, float top_p, float min_p,
                   const double* weight_by_id, std::vector<double>& weights, double& mass);
// The nucleus cut of logits[0, n) with draw's temperature, top-p and min-p: the order's first kNucleusCandidates, or
// the whole order where its cut lies past them, in `candidates`, and nucleus_cut's answer; 0 where m is not finite.
size_t nucleus_of_row(const float* logits, int64_t n, const TokenDraw& draw, std::vector<DrawCandidate>& candidates,
                      std::vector<double>& weights, double& mass);
// The nucleus draw from such a prefix: the id, or -1 where its cut lies past the prefix (the row's logits decide).
int32_t draw_from_nucleus(std::span<const DrawCandidate> prefix, bool whole_row, double total, const TokenDraw& draw);
// Their p (probs, one a candidate) and how many min-p and top-p keep; 0 where the best s is not finite.
size_t top_k_cut(std::span<const DrawCandidate> candidates, float top_p, float min_p, std::vector<double>& probs);
// The top-k draw from its candidates (argmax_id: the argmax of the row's logits, drawn where the best s is not finite).
int32_t draw_from_top_k(std::span<const DrawCandidate> candidates, const TokenDraw& draw, int32_t argmax_id);
// The first i whose running sum of weights[0, i] passes uniform times mass (their sum); where rounding leaves none,
// the last with any weight. Eight weights at a time while the uniform lies past their sum (((w0 + w1) + (w2 + w3)) +
// ((w4 + w5) + (w6 + w7))), then one at a time.
size_t pick_weighted(const double* weights, size_t n, double mass, double uniform);

// A draw's log-probabilities (TokenDraw::logprobs), over the model's logits x[0, n) before the draw's edits and mask,
// as the plain draw at temperature 1 weighs them: s = x (a NaN as -inf; -0 as +0), m and the total are that draw's,
// and an id's log-probability is f32(double(s) - (m + log(total))); where m is +inf, 0 for an s of +inf and -inf for
// the others, and where there is no finite logit (m = -inf), -inf for every id. The top ones are the order's first
// min(top_n, n) candidates at temperature 1 (larger s first, ties to the lower id). A device finds them among the
// order's first logprob_candidates (the first's s is m) beside the plain draw's total, and the drawn id's logit:
// logprobs_from_best.
void token_logprobs(const float* logits, int64_t n, int32_t chosen, int top_n, TokenLogprob& out);
// How many of the order's first candidates (at temperature 1) the log-probabilities of a row of width n read.
inline int64_t logprob_candidates(int top_n, int64_t n) { return std::min<int64_t>(std::max(top_n, 1), n); }
// token_logprobs from `best` (the order's first logprob_candidates(top_n, n) at temperature 1), the plain draw's total
// at temperature 1 (not read where the first's s is not finite), and the chosen id's logit.
void logprobs_from_best(std::span<const DrawCandidate> best, double total, int32_t chosen, float chosen_logit, int top_n,
                        TokenLogprob& out);

}  // namespace deepinfer
