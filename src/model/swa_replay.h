// V4.1 SWA bounded replay (spec §7.10), an opt-in prefill approximation: every layer before the decoder KV
// source, and that layer's KV-producing path (compressed rows + index keys), run on every prompt token; the
// rest of the decoder runs only on each long chunk's tail (window + DSpark block tokens). Owns the plan
// (derived from the config, never written back); the batch compaction is declared in model_internal.h and
// the forward (dsv41.cpp) decides when to call it. Exactness: every global-path store is bit-identical to a full prefill; the decoder
// layers' window rings hold only the tail and mark earlier positions missing (LayerState::window_valid_from).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/config.h"

namespace deepinfer {

struct SwaReplayPlan {
  int decoder_kv_layer = -1;  // the last KV source: from here on layers own only window rings (spec §5.2)
  int64_t tail_tokens = 0;    // window_size + dspark_block_size: the rows a replayed chunk keeps
};

// The plan of a V4.1 config. Errors (naming the reason) where replay has no meaning or would be wrong:
// a V4 checkpoint (no encoder/decoder split), no KV source, or an Engram layer at or after the decoder KV
// source (its n-grams would need the skipped tokens).
Result<SwaReplayPlan> plan_swa_replay(const ModelConfig& config);

// Whether a chunk of `n_tokens` is replayed: only chunks longer than the tail that want the last token's
// logits (decode and verify chunks are far shorter than the tail; all-logits chunks need every row).
bool replays_chunk(const SwaReplayPlan& plan, int64_t n_tokens, bool all_logits);

}  // namespace deepinfer
