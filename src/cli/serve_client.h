// The client side of `deepinfer bench serve`: one streamed /v1/chat/completions request over real HTTP (cpp-httplib),
// its SSE stream parsed chunk by chunk and timed (TTFT = the first content or reasoning text, end-to-end latency,
// TPOT = (E2E - TTFT) / (completion tokens - 1)), and checked: a response that is not HTTP 200, carries an error
// event, has a chunk that is not JSON, ends without `[DONE]` or usage, or gives a token count other than the one
// asked for (ignore_eos), is a failure with its reason, never a figure. No engine or server internals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::cli {

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string api_key;  // sent as Authorization: Bearer when set
};

// "http://host:port" (an optional trailing "/" or "/v1"); nullopt with *error set otherwise.
std::optional<Endpoint> parse_endpoint_url(const std::string& url, std::string* error);

struct StreamResult {
  bool ok = false;
  std::string error;                // why not ok
  double ttft_s = 0, e2e_s = 0, tpot_s = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string content;              // the answer's content text (multi-turn history)
  std::string finish_reason;
};

// Sends `body` (stream is forced on, with usage) and reads the stream to its end. `expect_tokens` > 0: the
// completion must have exactly that many tokens.
StreamResult stream_chat(const Endpoint& endpoint, nlohmann::json body, int64_t expect_tokens, int timeout_s);

// GET /v1/models: the first model id, or nullopt with *error set (unreachable, bad key, bad answer).
std::optional<std::string> first_model_id(const Endpoint& endpoint, std::string* error);

}  // namespace deepinfer::cli
