// Token sampling from fp32 logits: greedy (temperature 0: argmax, ties to the lower id) or temperature,
// top-k, top-p and min-p filtering followed by a draw from a seeded xoshiro256** stream, so a request
// with a seed is reproducible whatever else runs. Also the logit penalties (presence, frequency, repetition)
// and log-probabilities, as free functions over a logits row. SamplingParams is the public one (types.h).
// Invariant: after warm-up nothing here allocates per token (scratch buffers are members / arguments).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/types.h"

namespace deepinfer {

class Sampler {
 public:
  explicit Sampler(uint64_t seed);
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params);
  double next_uniform();  // [0, 1)

 private:
  int32_t sample_head(const SamplingParams& params);
  int32_t draw(size_t n, float min_p, float top_p);
  uint64_t state_[4];
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> probs_;
};

// Scratch for apply_penalties: per-token counts, all zero between calls.
struct PenaltyScratch {
  std::vector<uint32_t> counts;  // [vocab]
  std::vector<int32_t> touched;
};

// In place on logits[vocab]: repetition penalty (HF: divide positive / multiply negative logits of every token
// seen in prompt or output), then OpenAI presence and frequency penalties over the generated tokens.
void apply_penalties(float* logits, int64_t vocab, const SamplingParams& params, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, PenaltyScratch& scratch);
bool has_penalties(const SamplingParams& params);

// log_softmax(logits)[chosen] and the top_n most likely tokens (most likely first, ties to the lower id).
void token_logprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n, TokenLogprob& out);

}  // namespace deepinfer
