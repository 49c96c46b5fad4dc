// Deterministic random-weight checkpoints in the real V4 / V4.1 on-disk format (the embedded default model and
// test fixtures). Owns only generation and writing; it must not depend on the forward pass. Invariants:
// the bytes written depend only on (config.json text, seed, n_shards), never on the platform or the
// standard library (own PRNG and normal sampler from basic IEEE operations); every tensor of
// expected_tensors(config) is written with its exact dtype and shape; value statistics mimic the golden
// flash-tiny / pro-tiny / tiny-a checkpoints. A V4.1 model with Engram layers also gets the golden-format
// `engram_token_map.safetensors` (random token map, numpy's multipliers), since it has no tokenizer.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace deepinfer {

// Writes <out_dir>/config.json (config_json_text verbatim), model-0000N-of-0000M.safetensors (M = n_shards)
// and model.safetensors.index.json (weight_map + metadata.total_size). With n_shards >= 2 and an MTP layer,
// the MTP tensors get the last shard to themselves, like the golden checkpoints. Creates out_dir if needed.
Status write_random_checkpoint(const std::string& config_json_text, uint64_t seed, const std::string& out_dir,
                               int n_shards);

}  // namespace deepinfer
