// Single-sequence generation over the Model: plain decoding (one token per forward) and V4.1 DSpark
// speculative decoding (draft block_size tokens, verify them in one forward, roll back the rejected
// ones). Greedy speculative output is token-for-token the plain greedy output; sampled speculative
// output follows the target distribution exactly (speculative sampling with a deterministic draft: accept draft d
// with probability p(d), otherwise draw from p without d, p the sampler's distribution after its cuts).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace deepinfer {

struct GenerationOptions {
  int64_t max_tokens = 32;
  SamplingParams sampling;
  bool stop_at_eos = true;
  bool speculative = false;  // DSpark (V4.1 checkpoints only)
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  int64_t n_forwards = 0;      // main-model forwards after the prefill
  int64_t n_drafted = 0;       // draft tokens offered for verification
  int64_t n_accepted = 0;      // draft tokens accepted
  double prefill_seconds = 0;
  double decode_seconds = 0;
  // Mean tokens emitted per main-model decode forward (1 without speculation).
  double tokens_per_forward() const { return n_forwards ? double(tokens.size()) / double(n_forwards) : 0.0; }
};

GenerationResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerationOptions& options);

// Speculative sampling's step for one drafted token, the target's logits given: the draft is accepted with its
// probability under the sampler's distribution (Sampler::distribution, after the cuts), greedy: where it is the best
// token; otherwise the token is drawn from that distribution without the draft. So the token follows the distribution
// Sampler::sample draws from. Returns the token emitted; `accepted` says whether it is the draft.
int32_t verify_draft(Sampler& sampler, const float* logits, int64_t vocab, const SamplingParams& params, int32_t draft,
                     bool& accepted);

}  // namespace deepinfer
