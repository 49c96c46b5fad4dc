// Single-sequence generation over the Model: plain decoding (one token per forward) and V4.1 DSpark
// speculative decoding (draft block_size tokens, verify them in one forward, roll back the rejected
// ones). Greedy speculative output is token-for-token the plain greedy output; sampled speculative
// output follows the target distribution exactly (speculative sampling with a deterministic draft:
// accept draft d with probability p(d), otherwise draw from p without d).
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

}  // namespace deepinfer
