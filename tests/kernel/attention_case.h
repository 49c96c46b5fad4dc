// The sparse-attention test cases the CPU kernel tests (attention_test.cpp) and the CUDA tests
// (tests/cuda/attention_cuda_test.cpp) share: a window part and a compressed part of slots, some left empty,
// and the random inputs of a case.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernel/kernel_test_util.h"

namespace deepinfer::testing {

struct AttentionCase {
  std::string name;
  int64_t n_heads = 64, head_dim = 512;
  int64_t n_window = 128, n_window_filled = 128;  // window part: the first n_window_filled slots hold rows
  int64_t n_compressed = 512, n_compressed_filled = 512;
  int64_t empty_block = -1;                        // a compressed 64-block left entirely empty
  bool fp32_rows = false;
  float score_scale = 1.0f;                        // spreads the scores (sharper softmax)
  double softmax_scale = 0;                        // 0: f32(head_dim^-0.5) (V4)
};

// A case's inputs: rows (bf16 values, or fp32 ones), q, sinks, and the slot list padded to a multiple of 64.
struct AttentionInputs {
  std::vector<float> kv, q, sink;
  std::vector<const float*> slots;
  double softmax_scale = 0;
};

inline AttentionInputs make_attention_inputs(const AttentionCase& c, std::mt19937& rng) {
  AttentionInputs in;
  const int64_t H = c.n_heads, D = c.head_dim;
  const int64_t n_rows = c.n_window_filled + c.n_compressed_filled;
  in.kv = random_bf16_values(rng, n_rows * D, 1.0f);
  if (c.fp32_rows) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto& v : in.kv) v = u(rng);
  }
  in.q = random_bf16_values(rng, H * D, c.score_scale);
  in.sink.resize(static_cast<size_t>(H));
  for (auto& s : in.sink) s = std::normal_distribution<float>(0.0f, 0.8f)(rng);
  for (int64_t i = 0; i < c.n_window; ++i) in.slots.push_back(i < c.n_window_filled ? &in.kv[size_t(i * D)] : nullptr);
  for (int64_t i = 0; i < c.n_compressed; ++i) {
    const bool filled = i < c.n_compressed_filled && i / 64 != c.empty_block;
    in.slots.push_back(filled ? &in.kv[size_t((c.n_window_filled + i) * D)] : nullptr);
  }
  while (in.slots.size() % 64) in.slots.push_back(nullptr);
  in.softmax_scale = c.softmax_scale ? c.softmax_scale : double(float(1.0 / std::sqrt(double(D))));
  return in;
}

}  // namespace deepinfer::testing
