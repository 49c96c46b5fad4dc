// The in-process serving API: open an engine over a model directory, submit requests, read their event
// streams, cancel, shut down, read statistics. One engine thread owns the model and every sequence's cache
// state; all methods here are thread-safe and cheap (submit tokenizes and renders the chat template on the
// caller's thread). The engine knows no HTTP, no OpenAI or Anthropic shapes (src/server maps those).
// Invariants: every accepted request ends with exactly one finishing event; a request is never silently
// truncated (too long for the context or the cache budget → submit fails with a message).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "deepinfer/types.h"

namespace deepinfer {

class Engine {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Engine>> open(const EngineOptions& options);
  ~Engine();  // shutdown(false)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. Fails (bad request, too long, queue full, shutting down) with a message.
  [[nodiscard]] Result<RequestId> submit(Request request);
  // Validates and queues several requests together, all or none: the engine's next step sees them all, so an
  // offline batch is scheduled the same way every run. Fails with the first invalid request's message,
  // prefixed "request <index>: ", or as submit() does.
  [[nodiscard]] Result<std::vector<RequestId>> submit_all(std::vector<Request> requests);

  // Moves the request's pending events into `out` (appending), waiting up to `wait` for at least one.
  // Returns false once the request's finishing event has been delivered (or the id is unknown); the id is
  // then forgotten.
  bool poll(RequestId id, std::vector<Event>& out, std::chrono::milliseconds wait);
  // Asks the engine to stop the request; it still delivers a finishing event (kCancelled) to poll().
  void cancel(RequestId id);
  // cancel() and forget the id: nobody will poll it again (a client went away).
  void release(RequestId id);

  // Stops accepting requests. drain: finish every accepted request first; else cancel them. Idempotent;
  // returns when the engine thread has stopped.
  void shutdown(bool drain);
  bool accepting() const;

  EngineStats stats() const;
  const ModelInfo& model_info() const;
  // The text of one token as the tokenizer decodes it alone (for logprobs); "" without a tokenizer.
  std::string token_text(int32_t id) const;
  // Token count of a text (no special tokens), for callers that budget by tokens; -1 without a tokenizer.
  int64_t count_tokens(const std::string& text) const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
