// The engine's record of one request while it is queued or running: its tokens (prompt then generated), how
// many of them its cache state has processed, the state itself while resident, sampling and text output state,
// and the channel its events go to. Owned by the engine thread only (the channel is the shared part).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "deepinfer/types.h"
#include "engine/prefix_cache.h"
#include "format/json_prefix.h"
#include "format/json_schema_prefix.h"
#include "engine/sampler.h"
#include "engine/text_output.h"
#include "model/sequence_state.h"

namespace deepinfer {

// Events of one request, handed from the engine thread to whoever polls.
struct RequestChannel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Event> pending;
  std::atomic<bool> cancel{false};
};

struct Sequence {
  using Clock = std::chrono::steady_clock;
  RequestId id = 0;
  std::shared_ptr<RequestChannel> channel;
  std::vector<int32_t> tokens;  // prompt, then generated
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // tokens the state has processed
  int64_t shared_prefix_tokens = 0;  // chat: snapshot point at the end of the shared history (0: none)
  std::unique_ptr<SequenceState> state;  // resident while running
  LayoutClass layout;
  SamplingParams sampling;
  Sampler sampler{0};
  std::vector<LogitEdit> penalty_edits;  // this step's penalties, where the forward draws with them (TokenDraw::edits)
  std::vector<uint8_t> json_allowed;     // and its JSON mask (TokenDraw::allowed)
  int64_t max_new_tokens = 0;
  std::unique_ptr<TextOutput> text;      // null: no tokenizer
  Clock::time_point deadline = Clock::time_point::max();
  Clock::time_point submitted_at{};
  Clock::time_point first_token_at{};
  int64_t n_cached = 0;                  // prompt tokens reused from the prefix cache (first admission)
  bool admitted_once = false;
  PrefixCache::Match match;              // this step's lookup (waiting only)
  Event event;                           // what this step produced, pushed at the end of the step
  bool done = false;                     // the finishing event has been published
  std::unique_ptr<JsonPrefixValidator> json;  // response_format json_object: the answer so far
  std::unique_ptr<JsonSchemaPrefixValidator> json_schema;  // response_format json_schema: the answer so far
  bool json_active = false;                   // the constrained answer has begun (thinking: after </think>)

  int64_t n_generated() const { return int64_t(tokens.size()) - n_prompt; }
};

}  // namespace deepinfer
