// The HTTP front door: `deepinfer serve`'s server over an Engine (cpp-httplib). Routes: POST /v1/chat/completions,
// /v1/completions, /v1/messages, /v1/responses; GET /v1/models, /health, /metrics. Owns auth (Bearer or x-api-key, compared in
// constant time, every route but /health), limits (body size, max tokens, concurrent requests, timeouts), and the
// drain-then-stop shutdown. It maps protocols onto include/deepinfer/ only: no model or cache internals.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "deepinfer/engine.h"

namespace deepinfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                        // 0: any free port (see HttpServer::port())
  std::string api_key;                    // empty: no auth
  std::string served_model_name;          // empty: the model directory's name
  int64_t max_body_bytes = 8 << 20;
  int max_concurrent = 64;                // generation requests in flight; more get 429
  int64_t max_tokens_limit = 32768;       // the most a request may ask for
  int read_timeout_s = 60;                // idle client while sending its request
  int keep_alive_timeout_s = 5;           // idle keep-alive connection
  int64_t request_timeout_s = 0;          // per generation request (engine deadline); 0 = none
  int64_t responses_store_count = 1000;   // /v1/responses kept in memory for previous_response_id (LRU); 0 = none
};

class HttpServer {
 public:
  HttpServer(Engine& engine, ServerOptions options);
  ~HttpServer();
  [[nodiscard]] Status bind();  // binds host:port; the port is known afterwards
  int port() const;
  void run();           // serves until stop()
  void begin_drain();   // new generation requests get 503; in-flight ones go on
  int64_t in_flight() const;
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::server
