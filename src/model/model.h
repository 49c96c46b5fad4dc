// The DeepSeek-V4 model (V4-Flash, V4-Pro, the V4-Flash-0731 backbone): config-driven forward pass over
// a mapped checkpoint, with the MTP layer. One object per loaded model; forward() may batch chunks of
// several sequences (prefill chunks of any size and decode tokens); each sequence's state lives in its
// SequenceState. The numerics follow spec §3 and the golden precision contract; which kernels run the
// heavy ops (exact reference or fast) is the backend's business.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/ops.h"
#include "model/sequence_state.h"
#include "model/weights.h"

namespace deepinfer {

struct ModelOptions {
  bool exact = false;       // reference kernels (double accumulation) instead of the fast ones
  int n_threads = 0;        // fast kernels: 0 = all hardware threads
  bool show_progress = false;
};

// A run of consecutive tokens of one sequence, starting at its next position.
struct ForwardChunk {
  SequenceState* state = nullptr;
  std::span<const int32_t> ids;
  // > 0: these are prompt tokens of a prompt of this many tokens in all (the one-shot prefill layout of
  // the golden contract: window part min(P, window) slots, compressed part sized from P); 0: decode.
  int64_t prompt_len = 0;
  bool all_logits = false;  // logits for every token, else for the last one only
  bool keep_hidden = false; // return the final 4-copy stream of every token (the MTP input)
  // Debugging / golden checks: receives [n_layers, hc_mult, dim], the stream of the chunk's last token
  // after every main layer.
  std::vector<float>* layer_streams_of_last = nullptr;
};

// The MTP layer's input: the main model's final streams at consecutive positions and the next tokens.
struct MtpChunk {
  SequenceState* state = nullptr;
  std::span<const float> hidden;    // [n, hc_mult, dim]
  std::span<const int32_t> next_ids;  // [n]
  int64_t prompt_len = 0;           // as ForwardChunk
  bool all_logits = false;
};

struct ChunkOutput {
  std::vector<float> logits;   // [n_rows, vocab]: every token or just the last
  std::vector<float> hidden;   // [n, hc_mult, dim] when keep_hidden
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> open(const std::string& model_dir, const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }
  Backend& backend() { return *backend_; }
  SequenceState new_sequence() const;

  // Runs every chunk through the main model. Chunks must belong to distinct sequences.
  std::vector<ChunkOutput> forward(std::span<const ForwardChunk> chunks);
  // Runs the MTP layer (mtp.0) on its own window state of each sequence.
  std::vector<ChunkOutput> forward_mtp(std::span<const MtpChunk> chunks);

  struct Batch;  // flattened tokens of one forward (defined in dsv4_internal.h)

 private:
  Model() = default;
  void run_block(const BlockWeights& w, const RopeTable& rope, Batch& batch, bool is_mtp, int layer_index,
                 std::vector<float>& h);
  void run_head(const HeadWeights& w, const float* h, int64_t n_tokens, float* logits);
  void attention(const BlockWeights& w, const RopeTable& rope, Batch& batch, bool is_mtp, int layer_index,
                 const std::vector<float>& u, std::vector<float>& out);
  void moe(const BlockWeights& w, const Batch& batch, const std::vector<float>& u, std::vector<float>& out);
  void compressor_update(const CompressorWeights& w, const RopeTable& rope, int ratio, int64_t d, bool is_index,
                         const Batch& batch, bool is_mtp, int layer_index, const std::vector<float>& u);

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  std::vector<RopeTable> layer_rope_;  // per main layer, then per MTP layer
};

}  // namespace deepinfer
