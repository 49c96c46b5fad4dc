// HttpServer (http_server.h): cpp-httplib setup, auth, limits, the non-API routes (/health, /v1/models,
// /metrics), error rendering per API flavor, and the response drivers shared by the protocol files.
#include "server/http_server.h"

#include <thread>

#include "server/routes.h"

namespace deepinfer::server {

struct HttpServer::Impl {
  explicit Impl(Engine& engine, ServerOptions options) : ctx(engine, std::move(options)) {}
  ServerContext ctx;
  httplib::Server http;
  int port = 0;
};

namespace {

ApiFlavor flavor_of(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 ? ApiFlavor::kAnthropic : ApiFlavor::kOpenAi;
}

std::string anthropic_error_type(const ApiError& e) {
  switch (e.status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    case 504: return "timeout_error";
    default: return e.status >= 500 ? "api_error" : "invalid_request_error";
  }
}

// The route label for metrics (bounded: unknown paths are "other").
std::string route_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses", "/v1/models", "/health", "/metrics"}) {
    if (path == known) return known;
  }
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models" : "other";
}

// Whether httplib will read a body for the request (it does so only after routing).
bool has_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") || req.get_header_value<uint64_t>("Content-Length") > 0;
}

// True when no key is set or the request presents it (compared in constant time); else writes the 401.
bool authorized(const ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (ctx.options.api_key.empty() || req.path == "/health") return true;
  std::string presented;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0)) {
    presented = auth.substr(7);
  } else if (req.has_header("x-api-key")) {
    presented = req.get_header_value("x-api-key");
  }
  if (!presented.empty() && constant_time_equal(presented, ctx.options.api_key)) return true;
  write_error(res, ApiError{401, "invalid_request_error",
                            presented.empty() ? "missing API key (Authorization: Bearer KEY or x-api-key: KEY)" : "invalid API key", ""},
              flavor_of(req.path));
  return false;
}

}  // namespace

Json error_json(const ApiError& e, ApiFlavor flavor) {
  if (flavor == ApiFlavor::kAnthropic) {
    return Json{{"type", "error"}, {"error", {{"type", anthropic_error_type(e)}, {"message", e.message}}}};
  }
  return Json{{"error", {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
                         {"code", e.status == 401 ? Json("invalid_api_key") : Json(nullptr)}}}};
}

void write_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void write_error(httplib::Response& res, const ApiError& error, ApiFlavor flavor) {
  write_json(res, error.status, error_json(error, flavor));
}

std::shared_ptr<Slot> acquire_slot(ServerContext& ctx, ApiError* error) {
  if (ctx.draining.load()) {
    *error = ApiError{503, "overloaded_error", "the server is shutting down", ""};
    return nullptr;
  }
  if (ctx.in_flight.fetch_add(1) >= ctx.options.max_concurrent) {
    ctx.in_flight.fetch_sub(1);
    *error = ApiError{429, "rate_limit_error",
                      "too many concurrent requests (limit " + std::to_string(ctx.options.max_concurrent) + "); retry later", ""};
    return nullptr;
  }
  return std::make_shared<Slot>(ctx);
}

std::chrono::steady_clock::time_point request_deadline(const ServerContext& ctx) {
  if (ctx.options.request_timeout_s <= 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::seconds(ctx.options.request_timeout_s);
}

bool ended_in_error(EndReason r) { return r == EndReason::kDeadline || r == EndReason::kCancelled || r == EndReason::kError; }

ApiError end_error(const Collected& c) {
  if (c.end == EndReason::kDeadline) return ApiError{504, "timeout_error", "the request's deadline passed before it finished", ""};
  if (c.end == EndReason::kCancelled) return ApiError{503, "overloaded_error", "the request was cancelled (the server is shutting down)", ""};
  return ApiError{500, "api_error", c.error.empty() ? "the engine failed to finish the request" : c.error, ""};
}

void respond_when_done(httplib::Response& res, std::shared_ptr<Slot> slot, ServerContext& ctx, RequestId id, ApiFlavor flavor,
                       std::function<Json(const Collected&)> render) {
  res.set_chunked_content_provider(
      "application/json",
      [&ctx, slot, id, flavor, render](size_t, httplib::DataSink& sink) {
        Collected c;
        const bool done = pump_events(
            ctx.engine, id,
            [&](std::vector<Event>& events) {
              for (const Event& e : events) collect_event(e, c);
              return sink.is_writable();  // checked while tokens flow too: the keep-alive below runs only in idle gaps
            },
            [&] { return sink.is_writable(); }, std::chrono::milliseconds(200));
        if (!done) return false;  // client gone: released
        const std::string body = dump(ended_in_error(c.end) ? error_json(end_error(c), flavor) : render(c));
        if (!sink.write(body.data(), body.size())) return false;
        sink.done();
        return true;
      },
      [&ctx, id](bool) { ctx.engine.release(id); });
}

void stream_sse(httplib::Response& res, std::shared_ptr<Slot> slot, ServerContext& ctx, RequestId id,
                std::function<bool(std::vector<Event>&, httplib::DataSink&)> on_events,
                std::function<void(httplib::DataSink&)> on_close) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, slot, id, on_events, on_close](size_t, httplib::DataSink& sink) {
        const bool done = pump_events(
            ctx.engine, id, [&](std::vector<Event>& events) { return sink.is_writable() && on_events(events, sink); },
            [&] { return sink.is_writable() && sink.write(": keep-alive\n\n", 14); });
        if (!done) return false;  // client gone: released
        on_close(sink);
        sink.done();
        return true;
      },
      [&ctx, id](bool) { ctx.engine.release(id); });  // a no-op when the request already finished
}

bool write_sse(httplib::DataSink& sink, const Json& data) {
  const std::string line = "data: " + dump(data) + "\n\n";
  return sink.write(line.data(), line.size());
}

bool write_sse_event(httplib::DataSink& sink, const char* event, const Json& data) {
  const std::string line = std::string("event: ") + event + "\ndata: " + dump(data) + "\n\n";
  return sink.write(line.data(), line.size());
}

HttpServer::HttpServer(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  ServerContext& ctx = impl_->ctx;
  ctx.model_name = ctx.options.served_model_name.empty() ? engine.model_info().name : ctx.options.served_model_name;
  httplib::Server& http = impl_->http;
  // One thread per connection in flight: streams hold theirs for their whole length.
  const size_t n_threads = size_t(std::max(8, ctx.options.max_concurrent + 16));
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http.set_payload_max_length(size_t(ctx.options.max_body_bytes));
  http.set_read_timeout(ctx.options.read_timeout_s, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_timeout(ctx.options.keep_alive_timeout_s);

  // Auth for every route but /health. A POST with a body is checked by its route, after httplib has read the body:
  // a reply from here leaves the body unread on a keep-alive connection, where it would be parsed as the next request.
  http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "POST" && has_body(req)) return httplib::Server::HandlerResponse::Unhandled;
    return authorized(ctx, req, res) ? httplib::Server::HandlerResponse::Unhandled : httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib produces itself (404, 413, 400 on a broken request) get a body in the API's own shape.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.status < 400) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e{res.status, "invalid_request_error", "", ""};
    if (res.status == 404) e.message = "no route for " + req.method + " " + req.path;
    else if (res.status == 413) e.message = "the request body is larger than the limit";
    else if (res.status == 405) e.message = "method not allowed";
    else e.message = "bad request";
    if (res.status == 404) e.type = "not_found_error";
    write_error(res, e, flavor_of(req.path));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
    write_error(res, ApiError{500, "api_error", "internal error while handling the request", ""}, flavor_of(req.path));
  });
  http.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.count_response(route_label(req.path), res.status);
  });

  http.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    const bool ok = !ctx.draining.load() && ctx.engine.accepting();
    write_json(res, ok ? 200 : 503, Json{{"status", ok ? "ok" : "draining"}});
  });
  auto model_json = [&ctx] {
    const ModelInfo& info = ctx.engine.model_info();
    return Json{{"id", ctx.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "deepinfer"},
                {"max_model_len", info.max_context_tokens}, {"type", "model"}, {"display_name", ctx.model_name}};
  };
  http.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    write_json(res, 200, Json{{"object", "list"}, {"data", Json::array({model_json()})}});
  });
  http.Get(R"(/v1/models/(.+))", [&ctx, model_json](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != ctx.model_name) {
      return write_error(res, ApiError{404, "not_found_error", "no model named '" + std::string(req.matches[1]) + "'", "model"},
                         ApiFlavor::kOpenAi);
    }
    write_json(res, 200, model_json());
  });
  http.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(ctx.engine.stats(), ctx.metrics, ctx.in_flight.load()), "text/plain; version=0.0.4");
  });
  auto post = [&ctx, &http](const char* path, void (*handle)(ServerContext&, const httplib::Request&, httplib::Response&)) {
    http.Post(path, [&ctx, handle](const httplib::Request& req, httplib::Response& res) {
      if (authorized(ctx, req, res)) handle(ctx, req, res);
    });
  };
  post("/v1/chat/completions", handle_chat_completions);
  post("/v1/completions", handle_completions);
  post("/v1/messages", handle_messages);
  post("/v1/responses", handle_responses);
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  const std::string& host = impl_->ctx.options.host;
  if (impl_->ctx.options.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(host);
    if (impl_->port <= 0) return Status::error("cannot bind " + host + " on any port");
  } else {
    if (!impl_->http.bind_to_port(host, impl_->ctx.options.port)) {
      return Status::error("cannot bind " + host + ":" + std::to_string(impl_->ctx.options.port) + " (in use, or not an address of this machine)");
    }
    impl_->port = impl_->ctx.options.port;
  }
  return Status();
}

int HttpServer::port() const { return impl_->port; }
void HttpServer::run() { impl_->http.listen_after_bind(); }
void HttpServer::begin_drain() { impl_->ctx.draining.store(true); }
int64_t HttpServer::in_flight() const { return impl_->ctx.in_flight.load(); }
void HttpServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace deepinfer::server
