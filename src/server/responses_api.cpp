// OpenAI Responses API mapping: POST /v1/responses (stream and not) onto Engine chat requests. Input items
// (messages, function_call, function_call_output, reasoning) are rewritten into the chat shape the engine takes;
// reasoning items passed back become the next assistant turn's reasoning_content. Output: reasoning, message and
// function_call items; streaming follows the Responses event sequence (response.created ... response.completed).
// previous_response_id: a response is kept (server/response_store.h, unless store is false) as its whole
// conversation in input items; a request naming it continues from those items, then its own input. As OpenAI
// does, the previous request's instructions are not carried over.
#include "server/routes.h"

namespace deepinfer::server {

namespace {

bool text_of_parts(const Json& content, const std::string& where, std::string* out, ApiError* err) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) {
    *err = bad_request(where + ": must be a string or an array of text parts", where);
    return false;
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if ((type != "input_text" && type != "output_text" && type != "text" && type != "reasoning_text" && type != "summary_text") ||
        !part.contains("text") || !part["text"].is_string()) {
      *err = bad_request(where + "." + std::to_string(i) + ": only text parts are supported (got \"" + type + "\")", where);
      return false;
    }
    *out += part["text"].get<std::string>();
  }
  return true;
}

bool convert_input(const Json& body, Json* messages, ApiError* err) {
  *messages = Json::array();
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) {
      *err = bad_request("'instructions' must be a string", "instructions");
      return false;
    }
    messages->push_back({{"role", "system"}, {"content", it->get<std::string>()}});
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) {
    *err = bad_request("'input' is required", "input");
    return false;
  }
  if (input->is_string()) {
    messages->push_back({{"role", "user"}, {"content", input->get<std::string>()}});
    return true;
  }
  if (!input->is_array() || input->empty()) {
    *err = bad_request("'input' must be a string or a non-empty array of items", "input");
    return false;
  }
  std::optional<std::string> pending_reasoning;
  auto assistant = [&]() -> Json& {  // the assistant turn being built (reasoning + tool calls + text)
    if (messages->empty() || messages->back().value("role", "") != "assistant" || messages->back().contains("closed")) {
      Json m{{"role", "assistant"}, {"content", ""}};
      if (pending_reasoning) m["reasoning_content"] = *pending_reasoning;
      pending_reasoning.reset();
      messages->push_back(std::move(m));
    }
    return messages->back();
  };
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string where = "input." + std::to_string(i);
    if (!item.is_object()) {
      *err = bad_request(where + ": must be an object", where);
      return false;
    }
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      const std::string role = item.value("role", "");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        *err = bad_request(where + ".role: must be user, assistant, system or developer", where + ".role");
        return false;
      }
      std::string text;
      if (!item.contains("content") || !text_of_parts(item["content"], where + ".content", &text, err)) {
        if (err->message.empty()) *err = bad_request(where + ".content: required", where + ".content");
        return false;
      }
      if (role == "assistant") {
        Json& m = assistant();
        m["content"] = m["content"].get<std::string>() + text;
      } else {
        messages->push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
      }
    } else if (type == "reasoning") {
      std::string text;
      if (item.contains("content") && !item["content"].is_null() && !text_of_parts(item["content"], where + ".content", &text, err)) return false;
      if (text.empty() && item.contains("summary") && !item["summary"].is_null() && !text_of_parts(item["summary"], where + ".summary", &text, err)) {
        return false;
      }
      pending_reasoning = pending_reasoning.value_or("") + text;
    } else if (type == "function_call") {
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("name") || !item["name"].is_string() ||
          !item.contains("arguments") || !item["arguments"].is_string()) {
        *err = bad_request(where + ": a function_call needs string call_id, name and arguments", where);
        return false;
      }
      Json& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
      m["tool_calls"].push_back({{"id", item["call_id"]}, {"type", "function"},
                                 {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("output")) {
        *err = bad_request(where + ": a function_call_output needs a string call_id and an output", where);
        return false;
      }
      std::string output;
      if (!text_of_parts(item["output"], where + ".output", &output, err)) return false;
      messages->push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
    } else {
      *err = bad_request(where + ".type: \"" + type + "\" items are not supported", where + ".type");
      return false;
    }
  }
  return true;
}

bool convert_options(const Json& body, Json* chat, ApiError* err) {
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) {
      *err = bad_request("'tools' must be an array", "tools");
      return false;
    }
    Json out = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("name") || !t["name"].is_string()) {
        *err = bad_request("tools." + std::to_string(i) + ": only function tools with a name are supported", "tools");
        return false;
      }
      Json function{{"name", t["name"]}};
      if (t.contains("description") && t["description"].is_string()) function["description"] = t["description"];
      function["parameters"] = t.contains("parameters") && !t["parameters"].is_null() ? t["parameters"] : Json::object();
      out.push_back({{"type", "function"}, {"function", function}});
    }
    (*chat)["tools"] = out;
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      (*chat)["tool_choice"] = *choice;
    } else if (choice->is_object() && choice->value("type", "") == "function" && choice->contains("name")) {
      (*chat)["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
    } else {
      *err = bad_request("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\"}", "tool_choice");
      return false;
    }
  }
  if (auto reasoning = body.find("reasoning"); reasoning != body.end() && !reasoning->is_null()) {
    if (!reasoning->is_object()) {
      *err = bad_request("'reasoning' must be an object", "reasoning");
      return false;
    }
    if (auto effort = reasoning->find("effort"); effort != reasoning->end() && !effort->is_null()) (*chat)["reasoning_effort"] = *effort;
  }
  if (auto text = body.find("text"); text != body.end() && text->is_object() && text->contains("format")) {
    const Json& format = (*text)["format"];
    const std::string type = format.is_object() ? format.value("type", "") : "";
    if (type == "json_object") (*chat)["response_format"] = Json{{"type", "json_object"}};
    else if (type == "json_schema") {
      if (!format.contains("schema")) {
        *err = bad_request("text.format.schema: required for type json_schema", "text.format.schema");
        return false;
      }
      (*chat)["response_format"] = Json{{"type", "json_schema"}, {"json_schema", {{"schema", format["schema"]}}}};
    }
  }
  return true;
}

Json usage_json(const Usage& u, int64_t reasoning_tokens) {
  return Json{{"input_tokens", u.prompt_tokens}, {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens}, {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

struct ResponseShell {
  std::string id, model;
  int64_t created = 0;
  Json tools = Json::array();
  Json tool_choice = "auto";
  Json request_reasoning = nullptr;
  Json text = {{"format", {{"type", "text"}}}};
  Json previous_response_id = nullptr;
  bool store = true;

  Json make(const char* status, const Json& output, const Json& usage, const Json& incomplete) const {
    return Json{{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"model", model},
                {"output", output}, {"parallel_tool_calls", true}, {"tool_choice", tool_choice}, {"tools", tools},
                {"reasoning", request_reasoning}, {"incomplete_details", incomplete}, {"error", nullptr},
                {"usage", usage}, {"text", text}, {"previous_response_id", previous_response_id}, {"store", store}};
  }
};

// The request's input as items (a string is one user message).
Json input_items(const Json& input) {
  if (input.is_string()) return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", input}}});
  return input;
}

// Keeps a finished response's conversation (the items it ran on, then its output) for previous_response_id.
void store_response(ServerContext& ctx, const ResponseShell& shell, const std::shared_ptr<const Json>& conversation, const Json& output) {
  if (!shell.store) return;
  auto items = std::make_shared<Json>(*conversation);
  for (const Json& item : output) items->push_back(item);
  ctx.responses.put(shell.id, std::move(items));
}

Json reasoning_item(const std::string& id, const std::string& text) {
  return Json{{"type", "reasoning"}, {"id", id}, {"summary", Json::array()},
              {"content", Json::array({Json{{"type", "reasoning_text"}, {"text", text}}})}};
}

Json message_item(const std::string& id, const std::string& text, const char* status) {
  return Json{{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"},
              {"content", Json::array({Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}}})}};
}

Json function_item(const std::string& id, const std::string& call_id, const std::string& name, const std::string& arguments,
                   const char* status) {
  return Json{{"type", "function_call"}, {"id", id}, {"call_id", call_id}, {"name", name}, {"arguments", arguments}, {"status", status}};
}

// Streaming: one output item open at a time.
struct ItemStream {
  enum class Kind { kNone, kReasoning, kMessage, kFunction };
  Kind open = Kind::kNone;
  int index = -1;
  std::string item_id, text, call_id, name;
  Json output = Json::array();
  int64_t sequence = 0;
  int64_t reasoning_tokens = 0;
  Usage usage;
};

}  // namespace

void handle_responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  constexpr ApiFlavor kFlavor = ApiFlavor::kOpenAi;
  ApiError err;
  std::optional<Json> body = parse_body(req.body, &err);
  if (!body) return write_error(res, err, kFlavor);
  if (!check_known_fields(*body, {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
                                  "tools", "tool_choice", "parallel_tool_calls", "reasoning", "text", "metadata", "store",
                                  "user", "include", "truncation", "service_tier", "previous_response_id", "top_logprobs",
                                  "stream_options", "prompt_cache_key", "safety_identifier"},
                          "", &err)) {
    return write_error(res, err, kFlavor);
  }
  std::optional<std::string> model, previous_id;
  std::optional<int64_t> max_output_tokens;
  std::optional<double> temperature, top_p;
  std::optional<bool> stream, store;
  if (!read_string(*body, "model", &model, &err) ||
      !read_int(*body, "max_output_tokens", 1, ctx.options.max_tokens_limit, &max_output_tokens, &err) ||
      !read_number(*body, "temperature", 0, 2, &temperature, &err) || !read_number(*body, "top_p", 0, 1, &top_p, &err) ||
      !read_bool(*body, "stream", &stream, &err) || !read_bool(*body, "store", &store, &err) ||
      !read_string(*body, "previous_response_id", &previous_id, &err)) {
    return write_error(res, err, kFlavor);
  }
  std::shared_ptr<const Json> previous;
  if (previous_id) {
    previous = ctx.responses.get(*previous_id);
    if (!previous) {
      return write_error(res, bad_request("previous_response_id: no stored response '" + *previous_id + "' (this server keeps the last " +
                                              std::to_string(ctx.responses.capacity()) +
                                              " responses in memory, not those sent with store=false or made before a restart)",
                                          "previous_response_id"), kFlavor);
    }
  }
  Json chat = Json::object();
  Json messages;
  if (!convert_input(*body, &messages, &err) || !convert_options(*body, &chat, &err)) return write_error(res, err, kFlavor);
  // The conversation this response runs on: the previous response's items, then this input.
  auto conversation = std::make_shared<Json>(previous ? *previous : Json::array());
  for (const Json& item : input_items((*body)["input"])) conversation->push_back(item);
  if (previous) {
    Json continued = Json::object();
    if (body->contains("instructions")) continued["instructions"] = (*body)["instructions"];
    continued["input"] = *conversation;
    if (!convert_input(continued, &messages, &err)) return write_error(res, err, kFlavor);
  }
  chat["messages"] = std::move(messages);
  Request request;
  request.chat = chat;
  SamplingParams& s = request.sampling;
  s.max_tokens = int(max_output_tokens.value_or(0));
  s.temperature = float(temperature.value_or(1.0));
  s.top_p = float(top_p.value_or(1.0));
  if (s.top_p <= 0.0f) s.temperature = 0.0f, s.top_p = 1.0f;
  s.seed = 0x7e590000ull ^ ctx.next_response_id.load();
  request.deadline = request_deadline(ctx);
  std::shared_ptr<Slot> slot = acquire_slot(ctx, &err);
  if (!slot) return write_error(res, err, kFlavor);
  Result<RequestId> id = ctx.engine.submit(std::move(request));
  if (!id.ok()) return write_error(res, submit_error(id.status()), kFlavor);

  auto shell = std::make_shared<ResponseShell>();
  const std::string suffix = std::to_string(ctx.next_response_id.fetch_add(1)) + "_" + std::to_string(id.value());
  shell->id = "resp_" + suffix;
  shell->model = ctx.model_name;
  shell->created = unix_seconds();
  if (chat.contains("tools")) {
    for (const Json& t : chat["tools"]) {
      shell->tools.push_back({{"type", "function"}, {"name", t["function"]["name"]}, {"parameters", t["function"]["parameters"]}, {"strict", false}});
    }
  }
  if (chat.contains("tool_choice")) shell->tool_choice = chat["tool_choice"];
  if (body->contains("reasoning")) shell->request_reasoning = (*body)["reasoning"];
  if (auto text = body->find("text"); text != body->end() && text->is_object() && text->contains("format")) shell->text = *text;
  if (previous_id) shell->previous_response_id = *previous_id;
  shell->store = store.value_or(true);
  std::shared_ptr<const Json> conversation_items = std::move(conversation);

  if (!stream.value_or(false)) {
    respond_when_done(res, slot, ctx, id.value(), kFlavor, [=, &ctx](const Collected& c) {
      Json output = Json::array();
      if (!c.reasoning.empty()) output.push_back(reasoning_item("rs_" + suffix, c.reasoning));
      const char* item_status = c.end == EndReason::kLength ? "incomplete" : "completed";
      if (!c.content.empty() || c.tool_calls.empty()) output.push_back(message_item("msg_" + suffix, c.content, item_status));
      for (size_t i = 0; i < c.tool_calls.size(); ++i) {
        const auto& call = c.tool_calls[i];
        output.push_back(function_item("fc_" + suffix + "_" + std::to_string(i), call.id, call.name, call.arguments, "completed"));
      }
      const bool incomplete = c.end == EndReason::kLength;
      store_response(ctx, *shell, conversation_items, output);
      return shell->make(incomplete ? "incomplete" : "completed", output, usage_json(c.usage, 0),
                         incomplete ? Json{{"reason", "max_output_tokens"}} : Json(nullptr));
    });
    return;
  }
  auto st = std::make_shared<ItemStream>();
  auto started = std::make_shared<bool>(false);
  stream_sse(res, slot, ctx, id.value(),
      [=, &ctx](std::vector<Event>& events, httplib::DataSink& sink) {
        auto emit = [&](const char* type, Json data) {
          data["type"] = type;
          data["sequence_number"] = st->sequence++;
          return write_sse_event(sink, type, data);
        };
        auto close_item = [&](const char* status) {
          Json item;
          switch (st->open) {
            case ItemStream::Kind::kNone: return true;
            case ItemStream::Kind::kReasoning:
              item = reasoning_item(st->item_id, st->text);
              if (!emit("response.reasoning_text.done", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"content_index", 0}, {"text", st->text}})) return false;
              break;
            case ItemStream::Kind::kMessage:
              item = message_item(st->item_id, st->text, status);
              if (!emit("response.output_text.done", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"content_index", 0},
                                                          {"text", st->text}, {"logprobs", Json::array()}}) ||
                  !emit("response.content_part.done", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"content_index", 0},
                                                           {"part", item["content"][0]}})) {
                return false;
              }
              break;
            case ItemStream::Kind::kFunction:
              item = function_item(st->item_id, st->call_id, st->name, st->text, "completed");
              if (!emit("response.function_call_arguments.done", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"arguments", st->text}})) return false;
              break;
          }
          st->open = ItemStream::Kind::kNone;
          st->output.push_back(item);
          return emit("response.output_item.done", Json{{"output_index", st->index}, {"item", item}});
        };
        auto open_item = [&](ItemStream::Kind kind, const std::string& prefix, Json item) {
          if (!close_item("completed")) return false;
          st->open = kind;
          st->index += 1;
          st->item_id = prefix + suffix + "_" + std::to_string(st->index);
          st->text.clear();
          item["id"] = st->item_id;
          if (!emit("response.output_item.added", Json{{"output_index", st->index}, {"item", item}})) return false;
          if (kind == ItemStream::Kind::kMessage) {
            return emit("response.content_part.added", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"content_index", 0},
                                                            {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
          }
          return true;
        };
        for (const Event& e : events) {
          st->usage = e.usage;
          if (!*started) {
            *started = true;
            const Json r = shell->make("in_progress", Json::array(), nullptr, nullptr);
            if (!emit("response.created", Json{{"response", r}}) || !emit("response.in_progress", Json{{"response", r}})) return false;
          }
          if (e.finished && ended_in_error(e.end_reason)) {
            Collected c;
            collect_event(e, c);
            const ApiError failure = end_error(c);
            return emit("error", Json{{"code", failure.type}, {"message", failure.message}, {"param", nullptr}});
          }
          for (const TextDelta& d : e.deltas) {
            bool ok = true;
            switch (d.kind) {
              case DeltaKind::kReasoning:
                if (st->open != ItemStream::Kind::kReasoning) {
                  ok = open_item(ItemStream::Kind::kReasoning, "rs_", Json{{"type", "reasoning"}, {"summary", Json::array()}});
                }
                st->text += d.text;
                ok = ok && emit("response.reasoning_text.delta", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"content_index", 0}, {"delta", d.text}});
                break;
              case DeltaKind::kContent:
                if (st->open != ItemStream::Kind::kMessage) {
                  ok = open_item(ItemStream::Kind::kMessage, "msg_",
                                 Json{{"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", Json::array()}});
                }
                st->text += d.text;
                ok = ok && emit("response.output_text.delta", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"content_index", 0},
                                                                   {"delta", d.text}, {"logprobs", Json::array()}});
                break;
              case DeltaKind::kToolCallStart:
                ok = open_item(ItemStream::Kind::kFunction, "fc_",
                               Json{{"type", "function_call"}, {"call_id", d.tool_call_id}, {"name", d.tool_name}, {"arguments", ""}, {"status", "in_progress"}});
                st->call_id = d.tool_call_id;
                st->name = d.tool_name;
                break;
              case DeltaKind::kToolCallArguments:
                st->text += d.text;
                ok = emit("response.function_call_arguments.delta", Json{{"item_id", st->item_id}, {"output_index", st->index}, {"delta", d.text}});
                break;
              case DeltaKind::kToolCallEnd: ok = close_item("completed"); break;
              case DeltaKind::kWarning: break;
            }
            if (!ok) return false;
          }
          if (e.finished) {
            const bool incomplete = e.end_reason == EndReason::kLength;
            if (st->index < 0 && !open_item(ItemStream::Kind::kMessage, "msg_",
                                            Json{{"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", Json::array()}})) {
              return false;
            }
            if (!close_item(incomplete ? "incomplete" : "completed")) return false;
            store_response(ctx, *shell, conversation_items, st->output);
            const Json r = shell->make(incomplete ? "incomplete" : "completed", st->output, usage_json(st->usage, 0),
                                       incomplete ? Json{{"reason", "max_output_tokens"}} : Json(nullptr));
            if (!emit(incomplete ? "response.incomplete" : "response.completed", Json{{"response", r}})) return false;
          }
        }
        return true;
      },
      [](httplib::DataSink&) {});
}

}  // namespace deepinfer::server
