// Token sampling from fp32 logits: greedy (temperature 0: argmax, ties to the lower id) or temperature,
// top-k, top-p and min-p filtering followed by a draw from a seeded xoshiro256** stream, so a request
// with a seed is reproducible whatever else runs.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  int top_k = 0;             // 0: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(uint64_t seed);
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params);
  double next_uniform();  // [0, 1)

 private:
  uint64_t state_[4];
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace deepinfer
