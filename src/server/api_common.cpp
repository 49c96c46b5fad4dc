#include "server/api_common.h"

#include <chrono>
#include <cmath>

namespace deepinfer::server {

ApiError bad_request(std::string message, std::string param) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

std::optional<Json> parse_body(std::string_view body, ApiError* error) {
  try {
    Json j = Json::parse(body.begin(), body.end());
    if (!j.is_object()) {
      *error = bad_request("the request body must be a JSON object");
      return std::nullopt;
    }
    return j;
  } catch (const nlohmann::json::exception& e) {
    *error = bad_request(std::string("the request body is not valid JSON (UTF-8): ") + e.what());
    return std::nullopt;
  }
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

bool check_known_fields(const Json& object, std::initializer_list<std::string_view> allowed, const std::string& where,
                        ApiError* error) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool known = false;
    for (std::string_view a : allowed) known = known || it.key() == a;
    if (!known) {
      *error = bad_request("Unrecognized request argument supplied: " + where + it.key(), where + it.key());
      return false;
    }
  }
  return true;
}

namespace {
const Json* field(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

bool read_number(const Json& object, const char* key, double lo, double hi, std::optional<double>* out, ApiError* error) {
  const Json* v = field(object, key);
  if (!v) return true;
  if (!v->is_number()) {
    *error = bad_request(std::string("'") + key + "' must be a number", key);
    return false;
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    *error = bad_request(std::string("'") + key + "' must be between " + Json(lo).dump() + " and " + Json(hi).dump() +
                             ", got " + v->dump(),
                         key);
    return false;
  }
  *out = x;
  return true;
}

bool read_int(const Json& object, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out, ApiError* error) {
  const Json* v = field(object, key);
  if (!v) return true;
  if (!v->is_number_integer()) {
    *error = bad_request(std::string("'") + key + "' must be an integer", key);
    return false;
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) {
    *error = bad_request(std::string("'") + key + "' is out of range", key);
    return false;
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    *error = bad_request(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                             std::to_string(hi) + ", got " + std::to_string(x),
                         key);
    return false;
  }
  *out = x;
  return true;
}

bool read_bool(const Json& object, const char* key, std::optional<bool>* out, ApiError* error) {
  const Json* v = field(object, key);
  if (!v) return true;
  if (!v->is_boolean()) {
    *error = bad_request(std::string("'") + key + "' must be a boolean", key);
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool read_string(const Json& object, const char* key, std::optional<std::string>* out, ApiError* error) {
  const Json* v = field(object, key);
  if (!v) return true;
  if (!v->is_string()) {
    *error = bad_request(std::string("'") + key + "' must be a string", key);
    return false;
  }
  *out = v->get<std::string>();
  return true;
}

bool read_stop(const Json& object, const char* key, std::vector<std::string>* out, ApiError* error) {
  const Json* v = field(object, key);
  if (!v) return true;
  if (v->is_string()) {
    out->push_back(v->get<std::string>());
    return true;
  }
  if (v->is_array()) {
    for (const Json& s : *v) {
      if (!s.is_string()) {
        *error = bad_request(std::string("'") + key + "' must be a string or an array of strings", key);
        return false;
      }
      out->push_back(s.get<std::string>());
    }
    return true;
  }
  *error = bad_request(std::string("'") + key + "' must be a string or an array of strings", key);
  return false;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

ApiError submit_error(const Status& status) {
  ApiError e = bad_request(status.message());
  if (status.message().find("shutting down") != std::string::npos) {
    e.status = 503;
    e.type = "overloaded_error";
  } else if (status.message().find("too many queued") != std::string::npos) {
    e.status = 429;
    e.type = "rate_limit_error";
  }
  return e;
}

Json token_bytes_json(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

bool pump_events(Engine& engine, RequestId id, const std::function<bool(std::vector<Event>&)>& on_events,
                 const std::function<bool()>& keep_alive, std::chrono::milliseconds keep_alive_every) {
  std::vector<Event> events;
  auto last_activity = std::chrono::steady_clock::now();
  bool more = true;
  while (more) {
    events.clear();
    more = engine.poll(id, events, std::chrono::milliseconds(100));
    const auto now = std::chrono::steady_clock::now();
    if (!events.empty()) {
      last_activity = now;
      if (!on_events(events)) {
        engine.release(id);
        return false;
      }
    } else if (now - last_activity >= keep_alive_every) {
      last_activity = now;
      if (!keep_alive()) {
        engine.release(id);
        return false;
      }
    }
    if (!more && (events.empty() || !events.back().finished)) return false;  // unknown id
  }
  return true;
}

void collect_event(const Event& e, Collected& out) {
  out.tokens.insert(out.tokens.end(), e.token_ids.begin(), e.token_ids.end());
  out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  for (const TextDelta& d : e.deltas) {
    switch (d.kind) {
      case DeltaKind::kReasoning: out.reasoning += d.text; break;
      case DeltaKind::kContent: out.content += d.text; break;
      case DeltaKind::kToolCallStart: out.tool_calls.push_back({d.tool_call_id, d.tool_name, ""}); break;
      case DeltaKind::kToolCallArguments:
        if (!out.tool_calls.empty()) out.tool_calls.back().arguments += d.text;
        break;
      case DeltaKind::kToolCallEnd:
      case DeltaKind::kWarning: break;
    }
  }
  if (e.finished) {
    out.finished = true;
    out.end = e.end_reason;
    out.stop_sequence = e.stop_sequence;
    out.error = e.error;
  }
  out.usage = e.usage;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace deepinfer::server
