// Internal to src/server: the state every route handler shares, and the handlers of each API family.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include <httplib.h>

#include "server/api_common.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/response_store.h"

namespace deepinfer::server {

enum class ApiFlavor { kOpenAi, kAnthropic };

struct ServerContext {
  Engine& engine;
  ServerOptions options;
  std::string model_name;
  std::atomic<int64_t> in_flight{0};
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_response_id{1};
  ServerMetrics metrics;
  ResponseStore responses;  // /v1/responses kept for previous_response_id

  ServerContext(Engine& e, ServerOptions o)
      : engine(e), options(std::move(o)), responses(size_t(std::max<int64_t>(0, options.responses_store_count))) {}
};

// A held generation slot (concurrency limit); released when the last copy goes.
class Slot {
 public:
  explicit Slot(ServerContext& ctx) : ctx_(ctx) {}
  ~Slot() { ctx_.in_flight.fetch_sub(1); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  ServerContext& ctx_;
};
// Takes a slot, or fails with 429 (too many in flight) / 503 (draining).
std::shared_ptr<Slot> acquire_slot(ServerContext& ctx, ApiError* error);

void write_error(httplib::Response& res, const ApiError& error, ApiFlavor flavor);
void write_json(httplib::Response& res, int status, const Json& body);

// Engine deadline for a new request from the server's request timeout.
std::chrono::steady_clock::time_point request_deadline(const ServerContext& ctx);

// An engine-side failure after the request was accepted (deadline, shutdown, error) as an API error.
bool ended_in_error(EndReason reason);
ApiError end_error(const Collected& c);
Json error_json(const ApiError& error, ApiFlavor flavor);

// Non-streamed response: waits for the request's end while watching the client (a gone client cancels it),
// then writes render(result) (or the error, in the body: the 200 header went out first, chunked).
void respond_when_done(httplib::Response& res, std::shared_ptr<Slot> slot, ServerContext& ctx, RequestId id, ApiFlavor flavor,
                       std::function<Json(const Collected&)> render);
// Streamed response (SSE over a chunked body): on_events writes each batch (false: client gone), on_close
// writes the epilogue. Idle streams get `: keep-alive` comments, which also detect a gone client.
void stream_sse(httplib::Response& res, std::shared_ptr<Slot> slot, ServerContext& ctx, RequestId id,
                std::function<bool(std::vector<Event>&, httplib::DataSink&)> on_events,
                std::function<void(httplib::DataSink&)> on_close);
bool write_sse(httplib::DataSink& sink, const Json& data);
bool write_sse_event(httplib::DataSink& sink, const char* event, const Json& data);

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_messages(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace deepinfer::server
