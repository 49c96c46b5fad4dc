// Token sampling from fp32 logits: greedy (temperature 0: argmax, ties to the lower id) or temperature,
// top-k, top-p and min-p filtering followed by a draw from a seeded xoshiro256** stream, so a request
// with a seed is reproducible whatever else runs. Also the logit penalties (presence, frequency, repetition)
// and log-probabilities, as free functions over a logits row. SamplingParams is the public one (types.h).
// Invariant: after warm-up nothing here allocates per token (the draws' buffers are each thread's own, the penalties'
// an argument). The softmax's e^x is exp_fixed (model/ops.h), so a seed draws the same tokens on every machine.
// Every draw at a temperature takes exactly one uniform from the stream, whatever the logits; a greedy one none.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "deepinfer/types.h"
#include "model/token_draw.h"

namespace deepinfer {

class Sampler {
 public:
  explicit Sampler(uint64_t seed);
  // model/token_draw.h's draw_token of the logits with forward_draw()'s draw.
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params);
  // The draw sample() makes, taking its uniform from the stream now (at a temperature one, whatever the logits;
  // greedy none), which a forward can draw itself (on a GPU on the device: ForwardChunk::draw_only).
  TokenDraw forward_draw(const SamplingParams& params, int64_t vocab);
  // The distribution sample() draws from, after its cuts: (id, probability) pairs whose probabilities sum to 1 (greedy:
  // the best token alone; tokens of no probability left out), in a fixed order. For speculative decoding's acceptance
  // test and the draw that follows a rejection. Draws nothing from the stream.
  void distribution(const float* logits, int64_t vocab, const SamplingParams& params,
                    std::vector<std::pair<int32_t, double>>& out);
  double next_uniform();  // [0, 1)

 private:
  // distribution()'s buffers, a thread's own: a batch's sequences are drawn on many threads, and a buffer per sequence
  // would be ~2 MB each at V4's vocabulary, cold in cache at every draw.
  struct Scratch {
    std::vector<DrawCandidate> candidates;  // top-k's or the nucleus's, in the order
    std::vector<double> weights;            // by candidate: top-k's p, or the nucleus's w
    TemperatureWeights plain;               // the plain temperature draw's weights
  };
  static Scratch& thread_scratch();
  // The draw of params without its uniform: greedy where the temperature is not positive, a top-k only below the
  // vocabulary.
  static TokenDraw draw_of(const SamplingParams& params, int64_t vocab);
  uint64_t state_[4];
};

// Scratch for penalty_edits: per-token counts, all zero between calls, and the edits.
struct PenaltyScratch {
  std::vector<uint32_t> counts;  // [vocab]
  std::vector<int32_t> touched;
  std::vector<LogitEdit> edits;
};

// The penalties as edits of the logits (model/token_draw.h's LogitEdit: one an id they touch, in `out`): repetition
// penalty (HF: divide positive / multiply negative logits of every token seen in prompt or output), then OpenAI
// presence and frequency penalties over the generated tokens. A forward that draws with them applies them itself
// (TokenDraw::edits: on a GPU on the device).
void penalty_edits(int64_t vocab, const SamplingParams& params, std::span<const int32_t> prompt,
                   std::span<const int32_t> generated, PenaltyScratch& scratch, std::vector<LogitEdit>& out);
// Those edits, in place on logits[vocab].
void apply_penalties(float* logits, int64_t vocab, const SamplingParams& params, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, PenaltyScratch& scratch);
bool has_penalties(const SamplingParams& params);

}  // namespace deepinfer
