// Public value types of the in-process engine API (engine.h): options, requests with per-request sampling,
// the events a request streams back, and engine statistics. Plain aggregates with in-class defaults; no
// behaviour. Protocol shapes (OpenAI, Anthropic) are mapped onto these by src/server, never the reverse.
// Invariant: every field has a documented unit and a default that is valid on its own.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer {

// How prompt tokens are laid out for attention (see README "Serving"). kPrompt: DeepSeek model.py's one-shot
// prefill layout (a prompt token's window part is min(P, window) slots, P = the prompt length), bit-identical to
// `deepinfer logits`; a cached prefix is reused only where the layouts agree (both prompts >= window, or the same
// length). kPosition: every token is laid out as a decode token at its position, so any cached prefix is reusable;
// for V4 prompts shorter than the window this rounds attention slightly differently from model.py.
enum class PrefillLayout { kPrompt, kPosition };

struct EngineOptions {
  std::string model_dir;
  bool exact = false;                        // reference kernels (slow, the golden precision contract)
  int n_threads = 0;                         // fast kernels (with cuda: the host's threads): 0 = all hardware threads
  bool cuda = false;                         // the CUDA backend on GPU 0 (a -DDEEPINFER_CUDA=ON build) instead of the CPU kernels
  // V4.1 prefill approximation (README "SWA bounded replay"): each prefill chunk longer than window +
  // DSpark block tokens runs the decoder layers only on its tail. Off = exact.
  bool swa_bounded_replay = false;
  bool lock_weights = false;                 // mlock the checkpoint: weights stay in RAM (README "--mlock")
  int64_t max_batch_tokens = 256;            // tokens per forward step (decode tokens + prefill chunks)
  int max_running = 64;                      // sequences per forward step
  int max_waiting = 1024;                    // queued requests; submit() fails beyond this
  int64_t cache_budget_bytes = 2ll << 30;    // cache state: the KV page pool (running sequences and the pages
                                             // snapshots share) plus running sequences' fixed-size rings
  int64_t kv_page_bytes = 16 << 10;          // page size of the pool (>= the largest packed row)
  int64_t prefix_cache_bytes = 512ll << 20;  // snapshots kept for prefix reuse; 0 = no prefix cache
  int64_t prefix_snapshot_interval = 256;    // prefill chunks end at multiples of this, and snapshot there
  int64_t max_context_tokens = 0;            // prompt + output; 0 = the model's max_position_embeddings
  int default_max_tokens = 4096;             // when a request leaves max_tokens unset (capped by the context)
  PrefillLayout prefill_layout = PrefillLayout::kPrompt;
  bool default_thinking = true;              // chat requests that do not say (DeepSeek API default)
  // Every next token drawn by the engine from its logits brought back (penalties, JSON masks and log-probabilities
  // applied there), instead of in the forward (on a GPU: on the device): the same tokens, for checking a backend's
  // draws against the engine's own (README "--draws-on-host").
  bool draws_on_host = false;
};

// Per-request sampling and stopping. temperature 0 = greedy (argmax, ties to the lower id).
struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;                   // 0: off
  float min_p = 0.0f;              // 0: off
  uint64_t seed = 0;               // the request's xoshiro stream (same seed, same request → same tokens)
  float presence_penalty = 0.0f;   // OpenAI semantics, over generated tokens: -2..2
  float frequency_penalty = 0.0f;  // OpenAI semantics, over generated tokens: -2..2
  float repetition_penalty = 1.0f; // CTRL/HF semantics, over prompt and generated tokens: > 0, 1 = off
  int max_tokens = 0;              // 0: EngineOptions::default_max_tokens, capped by the context
  std::vector<std::string> stop;   // stop strings (matched in content; the match is not returned)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;           // log-probability of every generated token
  int top_logprobs = 0;            // and of the N most likely tokens at each step (0..20)
};

using RequestId = uint64_t;

// One of: `prompt_ids` (token ids, no template), `prompt_text` (raw completion text: tokenized, no template)
// or `chat` (an OpenAI Chat Completions style object: messages, tools, tool_choice, thinking,
// reasoning_effort, response_format, stop; see src/format/chat_request_json.h for every field).
struct Request {
  std::vector<int32_t> prompt_ids;
  std::optional<std::string> prompt_text;
  std::optional<nlohmann::ordered_json> chat;
  SamplingParams sampling;
  bool add_bos = true;  // prompt_text: start with the BOS token
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

enum class EndReason {
  kStop,          // EOS or a stop token id
  kLength,        // max_tokens or the context length
  kStopSequence,  // a stop string matched
  kToolCalls,     // the model ended after a tool-call block
  kCancelled,     // cancel() or shutdown without drain
  kDeadline,      // the request's deadline passed
  kError,         // see Event::error
};

const char* end_reason_name(EndReason reason);  // "stop", "length", "stop_sequence", ...

// Text output split by the DeepSeek output parser.
enum class DeltaKind { kReasoning, kContent, kToolCallStart, kToolCallArguments, kToolCallEnd, kWarning };

struct TextDelta {
  DeltaKind kind = DeltaKind::kContent;
  std::string text;              // reasoning/content/arguments text, or the warning
  int tool_call_index = -1;
  std::string tool_call_id;      // kToolCallStart
  std::string tool_name;         // kToolCallStart
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top_logprobs most likely tokens, most likely first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens whose state came from the prefix cache
};

// What one engine step produced for one request; the last event of a request has `finished` set.
struct Event {
  std::vector<int32_t> token_ids;      // generated tokens, in order
  std::vector<TokenLogprob> logprobs;  // one per token when requested
  std::vector<TextDelta> deltas;       // text split by the output parser (empty without a tokenizer)
  bool finished = false;
  EndReason end_reason = EndReason::kStop;
  std::string stop_sequence;           // kStopSequence: the matched stop string
  std::string error;                   // kError
  Usage usage;                         // totals so far (final on the finishing event)
};

// Cumulative histogram with fixed upper bounds (Prometheus style: counts[i] = observations <= bounds[i]).
struct Histogram {
  static constexpr std::array<double, 12> kBoundsSeconds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  std::array<uint64_t, 12> counts{};
  uint64_t count = 0;
  double sum = 0;
  void observe(double seconds);
};

struct EngineStats {
  int64_t n_waiting = 0;
  int64_t n_running = 0;
  uint64_t n_requests_submitted = 0;
  uint64_t n_requests_finished = 0;
  uint64_t n_requests_rejected = 0;
  uint64_t n_requests_cancelled = 0;
  uint64_t n_preemptions = 0;
  uint64_t n_steps = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t prefix_cache_queries = 0;     // prompts looked up
  uint64_t prefix_cache_hits = 0;        // prompts that reused a snapshot
  uint64_t prefix_cache_hit_tokens = 0;  // prompt tokens not recomputed
  int64_t cache_bytes_used = 0;          // pool pages in use (shared ones once) + running sequences' fixed state
  int64_t cache_budget_bytes = 0;
  int64_t kv_page_bytes = 0;
  int64_t kv_pages_total = 0;            // pool capacity: cache_budget_bytes / kv_page_bytes
  int64_t kv_pages_used = 0;             // held by a running sequence or a snapshot, each counted once
  int64_t kv_pages_shared = 0;           // held by two or more (prefix sharing)
  uint64_t prefix_cache_evictions = 0;   // snapshots dropped to free pages for running sequences
  int64_t prefix_cache_bytes_used = 0;
  int64_t n_prefix_snapshots = 0;
  Histogram ttft;                        // submit → first token
  Histogram tpot;                        // mean time per output token after the first, per request
  Histogram e2e;                         // submit → finish
};

struct ModelInfo {
  std::string name;          // the model directory's base name
  int64_t max_context_tokens = 0;
  int32_t vocab_size = 0;
  bool has_tokenizer = false;
  bool is_v41 = false;
};

}  // namespace deepinfer
