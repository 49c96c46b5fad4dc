// Anthropic protocol mapping: POST /v1/messages (streaming events and not) onto Engine chat requests. The
// Anthropic conversation (system, text / thinking / tool_use / tool_result blocks, tools with input_schema,
// tool_choice, thinking) is rewritten into the OpenAI chat shape the engine takes: thinking blocks become
// reasoning_content (passed back across tool turns, as DeepSeek expects), tool_use blocks become tool_calls,
// tool_result blocks become tool messages. Errors come back in Anthropic's error shape.
#include "server/routes.h"

namespace deepinfer::server {

namespace {

// Text of a content value: a string or an array of text blocks.
bool text_of(const Json& content, const std::string& where, std::string* out, ApiError* err) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) {
    *err = bad_request(where + " must be a string or an array of text blocks", where);
    return false;
  }
  for (const Json& block : content) {
    if (!block.is_object() || block.value("type", "") != "text" || !block.contains("text") || !block["text"].is_string()) {
      *err = bad_request(where + " may only hold text blocks here", where);
      return false;
    }
    *out += block["text"].get<std::string>();
  }
  return true;
}

bool convert_messages(const Json& body, Json* messages, ApiError* err) {
  *messages = Json::array();
  if (auto system = body.find("system"); system != body.end() && !system->is_null()) {
    std::string text;
    if (!text_of(*system, "system", &text, err)) return false;
    messages->push_back({{"role", "system"}, {"content", text}});
  }
  auto in = body.find("messages");
  if (in == body.end() || !in->is_array() || in->empty()) {
    *err = bad_request("messages: must be a non-empty array", "messages");
    return false;
  }
  for (size_t i = 0; i < in->size(); ++i) {
    const Json& m = (*in)[i];
    const std::string where = "messages." + std::to_string(i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content")) {
      *err = bad_request(where + ": needs a string 'role' and a 'content'", where);
      return false;
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") {
      *err = bad_request(where + ".role: must be \"user\" or \"assistant\", got \"" + role + "\"", where + ".role");
      return false;
    }
    const Json& content = m["content"];
    if (content.is_string()) {
      messages->push_back({{"role", role}, {"content", content.get<std::string>()}});
      continue;
    }
    if (!content.is_array()) {
      *err = bad_request(where + ".content: must be a string or an array of content blocks", where + ".content");
      return false;
    }
    std::string text, thinking;
    bool has_thinking = false;
    Json tool_calls = Json::array();
    for (size_t b = 0; b < content.size(); ++b) {
      const Json& block = content[b];
      const std::string bw = where + ".content." + std::to_string(b);
      if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
        *err = bad_request(bw + ": a content block needs a string 'type'", bw);
        return false;
      }
      const std::string type = block["type"].get<std::string>();
      if (type == "text") {
        if (!block.contains("text") || !block["text"].is_string()) {
          *err = bad_request(bw + ".text: must be a string", bw + ".text");
          return false;
        }
        text += block["text"].get<std::string>();
      } else if (type == "thinking" && role == "assistant") {
        if (block.contains("thinking") && block["thinking"].is_string()) thinking += block["thinking"].get<std::string>();
        has_thinking = true;
      } else if (type == "redacted_thinking" && role == "assistant") {
        has_thinking = true;
      } else if (type == "tool_use" && role == "assistant") {
        if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") || !block["name"].is_string()) {
          *err = bad_request(bw + ": tool_use needs string 'id' and 'name'", bw);
          return false;
        }
        const Json input = block.contains("input") ? block["input"] : Json::object();
        tool_calls.push_back({{"id", block["id"]}, {"type", "function"},
                              {"function", {{"name", block["name"]}, {"arguments", dump(input)}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
          *err = bad_request(bw + ".tool_use_id: must be a string", bw + ".tool_use_id");
          return false;
        }
        std::string result;
        if (block.contains("content") && !block["content"].is_null() && !text_of(block["content"], bw + ".content", &result, err)) {
          return false;
        }
        if (block.value("is_error", false) == true) result = "Error: " + result;
        messages->push_back({{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", result}});
      } else {
        *err = type == "image" ? bad_request(bw + ".type: image input is not supported yet (the V4.1 vision tower is not implemented)", bw + ".type")
                               : bad_request(bw + ".type: \"" + type + "\" blocks are not supported in " + role + " messages", bw + ".type");
        return false;
      }
    }
    if (role == "user") {
      if (!text.empty() || content.empty()) messages->push_back({{"role", "user"}, {"content", text}});
      continue;
    }
    Json out{{"role", "assistant"}, {"content", text}};
    if (has_thinking) out["reasoning_content"] = thinking;
    if (!tool_calls.empty()) out["tool_calls"] = tool_calls;
    messages->push_back(std::move(out));
  }
  return true;
}

bool convert_tools(const Json& body, Json* chat, ApiError* err) {
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) {
      *err = bad_request("tools: must be an array", "tools");
      return false;
    }
    Json out = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
        *err = bad_request("tools." + std::to_string(i) + ": needs a string 'name'", "tools");
        return false;
      }
      Json function{{"name", t["name"]}};
      if (t.contains("description") && t["description"].is_string()) function["description"] = t["description"];
      function["parameters"] = t.contains("input_schema") ? t["input_schema"] : Json::object();
      out.push_back({{"type", "function"}, {"function", function}});
    }
    (*chat)["tools"] = out;
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    const std::string type = choice->is_object() ? choice->value("type", "") : "";
    if (type == "auto") (*chat)["tool_choice"] = "auto";
    else if (type == "any") (*chat)["tool_choice"] = "required";
    else if (type == "none") (*chat)["tool_choice"] = "none";
    else if (type == "tool" && choice->contains("name") && (*choice)["name"].is_string()) {
      (*chat)["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
    } else {
      *err = bad_request("tool_choice: expected {\"type\": \"auto\" | \"any\" | \"none\" | \"tool\", \"name\"}", "tool_choice");
      return false;
    }
  }
  return true;
}

const char* stop_reason(EndReason r) {
  switch (r) {
    case EndReason::kLength: return "max_tokens";
    case EndReason::kStopSequence: return "stop_sequence";
    case EndReason::kToolCalls: return "tool_use";
    default: return "end_turn";
  }
}

Json tool_input(const std::string& arguments) {
  try {
    Json j = Json::parse(arguments);
    if (j.is_object()) return j;
    return Json{{"arguments", j}};
  } catch (const nlohmann::json::exception&) {
    return Json{{"arguments", arguments}};
  }
}

Json usage_json(const Usage& u) {
  return Json{{"input_tokens", u.prompt_tokens - u.cached_tokens}, {"output_tokens", u.completion_tokens},
              {"cache_read_input_tokens", u.cached_tokens}, {"cache_creation_input_tokens", 0}};
}

// Streaming state: which content block is open (Anthropic streams blocks one at a time).
struct BlockStream {
  enum class Kind { kNone, kThinking, kText, kToolUse };
  Kind open = Kind::kNone;
  int index = -1;
  Usage usage;
};

}  // namespace

void handle_messages(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  constexpr ApiFlavor kFlavor = ApiFlavor::kAnthropic;
  ApiError err;
  std::optional<Json> body = parse_body(req.body, &err);
  if (!body) return write_error(res, err, kFlavor);
  if (!check_known_fields(*body, {"model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature",
                                  "top_p", "top_k", "tools", "tool_choice", "thinking", "metadata", "service_tier", "cache_control",
                                  "speed", "inference_geo", "diagnostics", "user_profile_id", "workspace_id"},
                          "", &err)) {
    return write_error(res, err, kFlavor);
  }
  std::optional<std::string> model;
  std::optional<int64_t> max_tokens, top_k;
  std::optional<double> temperature, top_p;
  std::optional<bool> stream;
  Request request;
  if (!read_string(*body, "model", &model, &err) || !read_int(*body, "max_tokens", 1, ctx.options.max_tokens_limit, &max_tokens, &err) ||
      !read_int(*body, "top_k", 0, 1 << 30, &top_k, &err) || !read_number(*body, "temperature", 0, 1, &temperature, &err) ||
      !read_number(*body, "top_p", 0, 1, &top_p, &err) || !read_bool(*body, "stream", &stream, &err) ||
      !read_stop(*body, "stop_sequences", &request.sampling.stop, &err)) {
    return write_error(res, err, kFlavor);
  }
  if (!model) return write_error(res, bad_request("model: field required", "model"), kFlavor);
  if (!max_tokens) return write_error(res, bad_request("max_tokens: field required", "max_tokens"), kFlavor);
  Json chat = Json::object();
  Json messages;
  if (!convert_messages(*body, &messages, &err) || !convert_tools(*body, &chat, &err)) return write_error(res, err, kFlavor);
  chat["messages"] = std::move(messages);
  bool thinking = false;  // Anthropic default: no extended thinking
  if (auto t = body->find("thinking"); t != body->end() && !t->is_null()) {
    const std::string type = t->is_object() ? t->value("type", "") : "";
    if (type != "enabled" && type != "disabled" && type != "adaptive") {
      return write_error(res, bad_request("thinking.type: expected \"enabled\" or \"disabled\"", "thinking"), kFlavor);
    }
    thinking = type != "disabled";
  }
  chat["thinking"] = Json{{"type", thinking ? "enabled" : "disabled"}};
  request.chat = std::move(chat);
  SamplingParams& s = request.sampling;
  s.max_tokens = int(*max_tokens);
  s.temperature = float(temperature.value_or(1.0));
  s.top_p = float(top_p.value_or(1.0));
  if (s.top_p <= 0.0f) s.temperature = 0.0f, s.top_p = 1.0f;
  s.top_k = int(top_k.value_or(0));
  s.seed = 0xa17c0000ull ^ ctx.next_response_id.load();
  request.deadline = request_deadline(ctx);
  std::shared_ptr<Slot> slot = acquire_slot(ctx, &err);
  if (!slot) return write_error(res, err, kFlavor);
  Result<RequestId> id = ctx.engine.submit(std::move(request));
  if (!id.ok()) return write_error(res, submit_error(id.status()), kFlavor);
  const std::string message_id = "msg_" + std::to_string(ctx.next_response_id.fetch_add(1)) + "_" + std::to_string(id.value());
  const std::string model_name = ctx.model_name;

  if (!stream.value_or(false)) {
    respond_when_done(res, slot, ctx, id.value(), kFlavor, [=](const Collected& c) {
      Json content = Json::array();
      if (!c.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
      if (!c.content.empty() || (c.reasoning.empty() && c.tool_calls.empty())) content.push_back({{"type", "text"}, {"text", c.content}});
      for (const auto& call : c.tool_calls) {
        content.push_back({{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", tool_input(call.arguments)}});
      }
      return Json{{"id", message_id}, {"type", "message"}, {"role", "assistant"}, {"model", model_name}, {"content", content},
                  {"stop_reason", stop_reason(c.end)},
                  {"stop_sequence", c.end == EndReason::kStopSequence ? Json(c.stop_sequence) : Json(nullptr)},
                  {"usage", usage_json(c.usage)}};
    });
    return;
  }
  auto st = std::make_shared<BlockStream>();
  auto started = std::make_shared<bool>(false);
  stream_sse(res, slot, ctx, id.value(),
      [=](std::vector<Event>& events, httplib::DataSink& sink) {
        auto close_block = [&] {
          if (st->open == BlockStream::Kind::kNone) return true;
          st->open = BlockStream::Kind::kNone;
          return write_sse_event(sink, "content_block_stop", Json{{"type", "content_block_stop"}, {"index", st->index}});
        };
        auto open_block = [&](BlockStream::Kind kind, Json block) {
          if (st->open == kind && kind != BlockStream::Kind::kToolUse) return true;
          if (!close_block()) return false;
          st->open = kind;
          st->index += 1;
          return write_sse_event(sink, "content_block_start", Json{{"type", "content_block_start"}, {"index", st->index}, {"content_block", block}});
        };
        auto delta = [&](Json d) {
          return write_sse_event(sink, "content_block_delta", Json{{"type", "content_block_delta"}, {"index", st->index}, {"delta", d}});
        };
        for (const Event& e : events) {
          st->usage = e.usage;
          if (!*started) {
            *started = true;
            Json message{{"id", message_id}, {"type", "message"}, {"role", "assistant"}, {"model", model_name},
                         {"content", Json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                         {"usage", usage_json(Usage{e.usage.prompt_tokens, 0, e.usage.cached_tokens})}};
            if (!write_sse_event(sink, "message_start", Json{{"type", "message_start"}, {"message", message}})) return false;
          }
          if (e.finished && ended_in_error(e.end_reason)) {
            Collected c;
            collect_event(e, c);
            return write_sse_event(sink, "error", error_json(end_error(c), ApiFlavor::kAnthropic));
          }
          for (const TextDelta& d : e.deltas) {
            bool ok = true;
            switch (d.kind) {
              case DeltaKind::kReasoning:
                ok = open_block(BlockStream::Kind::kThinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}) &&
                     delta(Json{{"type", "thinking_delta"}, {"thinking", d.text}});
                break;
              case DeltaKind::kContent:
                ok = open_block(BlockStream::Kind::kText, Json{{"type", "text"}, {"text", ""}}) &&
                     delta(Json{{"type", "text_delta"}, {"text", d.text}});
                break;
              case DeltaKind::kToolCallStart:
                ok = open_block(BlockStream::Kind::kToolUse,
                                Json{{"type", "tool_use"}, {"id", d.tool_call_id}, {"name", d.tool_name}, {"input", Json::object()}});
                break;
              case DeltaKind::kToolCallArguments:
                ok = delta(Json{{"type", "input_json_delta"}, {"partial_json", d.text}});
                break;
              case DeltaKind::kToolCallEnd: ok = close_block(); break;
              case DeltaKind::kWarning: break;
            }
            if (!ok) return false;
          }
          if (e.finished) {
            if (st->index < 0 && !open_block(BlockStream::Kind::kText, Json{{"type", "text"}, {"text", ""}})) return false;
            if (!close_block()) return false;
            if (!write_sse_event(sink, "message_delta",
                                 Json{{"type", "message_delta"},
                                      {"delta", {{"stop_reason", stop_reason(e.end_reason)},
                                                 {"stop_sequence", e.end_reason == EndReason::kStopSequence ? Json(e.stop_sequence) : Json(nullptr)}}},
                                      {"usage", {{"output_tokens", e.usage.completion_tokens}}}})) {
              return false;
            }
          }
        }
        return true;
      },
      [](httplib::DataSink& sink) { write_sse_event(sink, "message_stop", Json{{"type", "message_stop"}}); });
}

}  // namespace deepinfer::server
