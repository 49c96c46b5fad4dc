// Shared pieces of the HTTP protocol mappings (OpenAI, Anthropic): JSON parsing at the boundary (the one place
// nlohmann exceptions are caught), strict field readers that name the offending field, the error value each
// API turns into its own error shape, constant-time key comparison, and the event pump that drives one engine
// request to its end while watching the client. Includes only include/deepinfer/ and third-party headers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"

namespace deepinfer::server {

using Json = nlohmann::ordered_json;

// An HTTP-level failure: status plus a message; each API renders it in its own error shape.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";  // OpenAI "type"; mapped to Anthropic's names where they differ
  std::string message;
  std::string param;  // the offending field, when there is one
};

ApiError bad_request(std::string message, std::string param = "");

// Parses a request body: an object, valid UTF-8 JSON. Never throws.
std::optional<Json> parse_body(std::string_view body, ApiError* error);
// Serialises for the wire; invalid UTF-8 (never expected) is replaced rather than thrown.
std::string dump(const Json& j);

// Fails on any key of `object` that is not in `allowed`.
bool check_known_fields(const Json& object, std::initializer_list<std::string_view> allowed, const std::string& where,
                        ApiError* error);

// Typed optional-field readers: absent or null → nullopt; wrong type or out of range → false with `error` set.
bool read_number(const Json& object, const char* key, double lo, double hi, std::optional<double>* out, ApiError* error);
bool read_int(const Json& object, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out, ApiError* error);
bool read_bool(const Json& object, const char* key, std::optional<bool>* out, ApiError* error);
bool read_string(const Json& object, const char* key, std::optional<std::string>* out, ApiError* error);
// "stop": a string or an array of strings.
bool read_stop(const Json& object, const char* key, std::vector<std::string>* out, ApiError* error);

// Constant-time equality (time depends only on the lengths, not on where the strings differ).
bool constant_time_equal(std::string_view a, std::string_view b);

// An engine submit failure as an HTTP error (overload and shutdown are 503/429, the rest 400).
ApiError submit_error(const Status& status);

// Token text for logprobs, and its UTF-8 bytes as the OpenAI API lists them.
Json token_bytes_json(const std::string& text);

// Drives request `id` to its end: calls `on_events` with each batch of events (it returns false when the client
// is gone), and `keep_alive` every `keep_alive_every` without events (false: the client is gone). On a gone
// client the request is released (cancelled). Returns true when the finishing event was handed over.
bool pump_events(Engine& engine, RequestId id, const std::function<bool(std::vector<Event>&)>& on_events,
                 const std::function<bool()>& keep_alive,
                 std::chrono::milliseconds keep_alive_every = std::chrono::milliseconds(1000));

// Accumulated result of a whole request (non-streaming responses).
struct Collected {
  std::string reasoning;
  std::string content;
  struct ToolCall {
    std::string id, name, arguments;
  };
  std::vector<ToolCall> tool_calls;
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> tokens;
  EndReason end = EndReason::kError;
  std::string stop_sequence;
  std::string error;
  Usage usage;
  bool finished = false;
};
void collect_event(const Event& e, Collected& out);

// Seconds since the epoch, for "created" fields.
int64_t unix_seconds();

}  // namespace deepinfer::server
