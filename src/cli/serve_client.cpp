#include "cli/serve_client.h"

#include <httplib.h>

#include <chrono>
#include <regex>

namespace deepinfer::cli {

namespace {
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

httplib::Headers auth_headers(const Endpoint& e) {
  httplib::Headers h;
  if (!e.api_key.empty()) h.emplace("Authorization", "Bearer " + e.api_key);
  return h;
}

std::string clip(const std::string& s, size_t n = 200) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

// Incremental SSE reader: events are separated by a blank line; only `data:` lines matter here.
struct SseState {
  std::string buffer;
  bool done = false;            // saw data: [DONE]
  std::string error;            // first problem seen
  std::optional<Clock::time_point> first_text_at;
  bool usage_seen = false;
  StreamResult* out = nullptr;

  void on_data(const std::string& payload) {
    if (!error.empty()) return;
    if (done) {
      error = "data after [DONE]";
      return;
    }
    if (payload == "[DONE]") {
      done = true;
      return;
    }
    const Json j = Json::parse(payload, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      error = "a chunk that is not a JSON object: " + clip(payload);
      return;
    }
    if (j.contains("error")) {
      error = "error event: " + clip(j["error"].dump());
      return;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      usage_seen = true;
      out->prompt_tokens = u->value("prompt_tokens", int64_t(-1));
      out->completion_tokens = u->value("completion_tokens", int64_t(-1));
      if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) out->cached_tokens = d->value("cached_tokens", int64_t(0));
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array()) {
      error = "a chunk without 'choices': " + clip(payload);
      return;
    }
    for (const Json& choice : *choices) {
      const Json* delta = choice.contains("delta") && choice["delta"].is_object() ? &choice["delta"] : nullptr;
      if (delta == nullptr) {
        error = "a choice without 'delta': " + clip(payload);
        return;
      }
      bool text = false;
      for (const char* key : {"content", "reasoning_content"}) {
        if (auto t = delta->find(key); t != delta->end() && t->is_string() && !t->get_ref<const std::string&>().empty()) {
          text = true;
          if (std::string(key) == "content") out->content += t->get<std::string>();
        }
      }
      if (text && !first_text_at) first_text_at = Clock::now();
      if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) out->finish_reason = f->get<std::string>();
    }
  }

  void feed(const char* data, size_t n) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      size_t at = 0;
      while (at <= event.size()) {
        size_t nl = event.find('\n', at);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(at, nl - at);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) on_data(line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5));
        at = nl + 1;
      }
    }
  }
};
}  // namespace

std::optional<Endpoint> parse_endpoint_url(const std::string& url, std::string* error) {
  static const std::regex kUrl(R"(http://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})(/v1)?/?)");
  std::smatch m;
  if (!std::regex_match(url, m, kUrl)) {
    *error = "--url must look like http://host:port (plain HTTP, an explicit port), got '" + url + "'";
    return std::nullopt;
  }
  Endpoint e;
  e.host = m[1].str();
  if (e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  e.port = std::stoi(m[2].str());
  if (e.port < 1 || e.port > 65535) {
    *error = "--url port out of range: " + m[2].str();
    return std::nullopt;
  }
  return e;
}

std::optional<std::string> first_model_id(const Endpoint& e, std::string* error) {
  httplib::Client client(e.host, e.port);
  client.set_connection_timeout(10);
  client.set_read_timeout(30);
  auto res = client.Get("/v1/models", auth_headers(e));
  if (!res) {
    *error = "GET /v1/models on " + e.host + ":" + std::to_string(e.port) + " failed: " + httplib::to_string(res.error());
    return std::nullopt;
  }
  if (res->status != 200) {
    *error = "GET /v1/models answered HTTP " + std::to_string(res->status) + ": " + clip(res->body);
    return std::nullopt;
  }
  const Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].contains("id")) {
    *error = "GET /v1/models: no model in the answer: " + clip(res->body);
    return std::nullopt;
  }
  return j["data"][0]["id"].get<std::string>();
}

StreamResult stream_chat(const Endpoint& e, Json body, int64_t expect_tokens, int timeout_s) {
  StreamResult out;
  body["stream"] = true;
  body["stream_options"] = Json{{"include_usage", true}};
  httplib::Client client(e.host, e.port);
  client.set_connection_timeout(30);
  client.set_read_timeout(timeout_s);
  client.set_write_timeout(timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers = auth_headers(e);
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "text/event-stream");
  req.body = body.dump();
  SseState sse;
  sse.out = &out;
  int status = 0;
  std::string error_body;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    sse.feed(data, n);
    return true;
  };
  const Clock::time_point t0 = Clock::now();
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client.send(req, res, err);
  const Clock::time_point t1 = Clock::now();
  out.e2e_s = std::chrono::duration<double>(t1 - t0).count();
  if (!sent) {
    out.error = "HTTP request failed: " + httplib::to_string(err);
  } else if (status != 200) {
    out.error = "HTTP " + std::to_string(status) + ": " + clip(error_body.empty() ? res.body : error_body);
  } else if (!sse.error.empty()) {
    out.error = sse.error;
  } else if (!sse.buffer.empty() && sse.buffer.find_first_not_of("\r\n") != std::string::npos) {
    out.error = "the stream ended inside an event: " + clip(sse.buffer);
  } else if (!sse.done) {
    out.error = "the stream ended without data: [DONE]";
  } else if (!sse.usage_seen || out.completion_tokens < 0 || out.prompt_tokens < 0) {
    out.error = "no usage chunk (stream_options.include_usage)";
  } else if (out.finish_reason.empty()) {
    out.error = "no finish_reason";
  } else if (!sse.first_text_at) {
    out.error = "no content or reasoning text in the stream";
  } else if (expect_tokens > 0 && out.completion_tokens != expect_tokens) {
    out.error = "asked for " + std::to_string(expect_tokens) + " tokens (ignore_eos), got " + std::to_string(out.completion_tokens) +
                " (finish_reason " + out.finish_reason + ")";
  } else {
    out.ok = true;
    out.ttft_s = std::chrono::duration<double>(*sse.first_text_at - t0).count();
    out.tpot_s = out.completion_tokens > 1 ? (out.e2e_s - out.ttft_s) / double(out.completion_tokens - 1) : 0.0;
  }
  return out;
}

}  // namespace deepinfer::cli
