// What the forward pass reads from the weights and multiplies, computed from the tensor inventory (so it
// holds for any config): per decoded token (batch 1) every dense tensor once, the shared expert, the routed
// experts it activates (n_activated of n_routed), one embedding row (and one Engram row per n-gram head) and
// the head; for a batch, the expected number of distinct experts under uniform routing; attention MACs per
// position from the V4 slot counts (window, top-k or ratio-128 rows, indexer keys). MTP is excluded.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace deepinfer {

struct WeightTraffic {
  int64_t checkpoint_bytes = 0;        // all tensors as stored (MTP included)
  int64_t decode_bytes_per_token = 0;  // batch-1 decode, main model
  int64_t decode_macs_per_token = 0;   // multiply-adds of the weight GEMVs for one token (head included)
  int64_t head_macs = 0;               // the head GEMV alone (prefill computes it for the last token only)
  int64_t dense_bytes = 0;             // bytes every step reads whatever the batch: all but routed experts,
                                       // embedding / tid2eid / Engram rows
  int64_t expert_bytes = 0;            // one routed expert's bytes summed over the main layers
  int64_t row_bytes_per_token = 0;     // embedding (+ tid2eid, Engram) rows of one token
};

WeightTraffic weight_traffic(const ModelConfig& config);

// Bytes one decode step of `batch` sequences reads: dense part once, the expected number of distinct
// experts per layer under uniform routing, E * (1 - (1 - k/E)^batch), and the rows of every token.
double decode_step_bytes(const WeightTraffic& w, const ModelConfig& config, int batch);

// Attention multiply-adds (q.k and p.v over the visible slots, indexer q.k) of one token at position pos.
// V4 slot counts; V4.1 configs count the window part only.
int64_t attention_macs_at(const ModelConfig& config, int64_t pos);

}  // namespace deepinfer
