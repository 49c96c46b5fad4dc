// Teacher-forced evaluation exactly as the golden READMEs define it: prefill the prompt (in chunks of
// any size, same result), then feed the continuation one token per forward; optionally the MTP layer
// with its own execution model. Used by `deepinfer logits` and the golden tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace deepinfer {

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> continuation;
  std::vector<float> logits;       // [1 + C, vocab] (empty when the file has none)
  std::vector<float> mtp_logits;   // [C, vocab]
  std::vector<std::vector<float>> hidden;  // hidden.L [4, dim] per main layer, when present
  // V4.1 DSpark references (every golden v41 case).
  std::vector<int32_t> dspark_anchor;      // [C]
  std::vector<int32_t> dspark_tokens;      // [C, block + 1]
  std::vector<float> dspark_logits;        // [C, block, vocab]
  std::vector<float> dspark_confidence;    // [C, block]
  // V4.1: the header's `index_k` label ("reference-quirk" or "owner": which index-key behaviour produced the
  // references); empty when the file has none.
  std::string index_k;
};
// Reads a case-N.safetensors file (prompt, continuation, and the reference tensors when present).
Result<GoldenCase> load_golden_case(const std::string& path);

struct TeacherForcedOptions {
  int64_t prefill_chunk = 0;  // 0: the whole prompt in one forward
  bool mtp = false;
  bool dspark = false;        // V4.1: run the DSpark draft after every decode step (golden case semantics)
  // Tests of a fast path: anchors and Markov chains forced to a reference's ([C] and [C, block + 1]), so
  // every draft row is conditioned like the reference row it is compared with.
  const std::vector<int32_t>* forced_dspark_anchor = nullptr;
  const std::vector<int32_t>* forced_dspark_tokens = nullptr;
};
struct TeacherForcedResult {
  std::vector<float> logits;      // [1 + C, vocab]
  std::vector<float> mtp_logits;  // [C, vocab] when options.mtp
  std::vector<float> layer_streams;  // [n_layers, 4, dim] at the last prompt position after the prefill
  std::vector<int32_t> dspark_anchor, dspark_tokens;  // as GoldenCase
  std::vector<float> dspark_logits, dspark_confidence;
};
TeacherForcedResult run_teacher_forced(Model& model, const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& continuation, const TeacherForcedOptions& options);

}  // namespace deepinfer
