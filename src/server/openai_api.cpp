// OpenAI protocol mapping: POST /v1/chat/completions and POST /v1/completions, streaming (SSE `data:` chunks,
// `[DONE]`) and not, onto Engine requests. Chat requests go to the engine as their OpenAI JSON (messages, tools,
// tool_choice, response_format, thinking, reasoning_effort), which it renders with the DeepSeek chat encoding.
// Unknown top-level fields are refused (400), as OpenAI does.
#include <cmath>

#include "server/routes.h"

namespace deepinfer::server {

namespace {

// Sampling fields shared by both endpoints. `chat`: logprobs is a bool + top_logprobs; else an int (0..5).
bool parse_sampling(const Json& body, bool chat, const ServerContext& ctx, SamplingParams* s, ApiError* err) {
  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<int64_t> top_k, seed, max_tokens, max_completion_tokens, n, top_logprobs, logprobs_n;
  std::optional<bool> logprobs, ignore_eos;
  if (!read_number(body, "temperature", 0, 2, &temperature, err) || !read_number(body, "top_p", 0, 1, &top_p, err) ||
      !read_number(body, "min_p", 0, 1, &min_p, err) || !read_number(body, "presence_penalty", -2, 2, &presence, err) ||
      !read_number(body, "frequency_penalty", -2, 2, &frequency, err) ||
      !read_number(body, "repetition_penalty", 0.01, 10, &repetition, err) ||
      !read_int(body, "top_k", -1, 1 << 30, &top_k, err) || !read_int(body, "seed", INT64_MIN, INT64_MAX, &seed, err) ||
      !read_int(body, "max_tokens", 1, ctx.options.max_tokens_limit, &max_tokens, err) ||
      !read_int(body, "max_completion_tokens", 1, ctx.options.max_tokens_limit, &max_completion_tokens, err) ||
      !read_int(body, "n", 1, 1, &n, err) || !read_bool(body, "ignore_eos", &ignore_eos, err) ||
      !read_stop(body, "stop", &s->stop, err)) {
    return false;
  }
  if (chat) {
    if (!read_bool(body, "logprobs", &logprobs, err) || !read_int(body, "top_logprobs", 0, 20, &top_logprobs, err)) return false;
    s->logprobs = logprobs.value_or(false);
    s->top_logprobs = int(top_logprobs.value_or(0));
    if (s->top_logprobs > 0 && !s->logprobs) {
      *err = bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      return false;
    }
  } else {
    if (!read_int(body, "logprobs", 0, 5, &logprobs_n, err)) return false;
    s->logprobs = logprobs_n.has_value();
    s->top_logprobs = int(logprobs_n.value_or(0));
  }
  if (s->stop.size() > 16) {
    *err = bad_request("'stop' takes at most 16 strings", "stop");
    return false;
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) {
      *err = bad_request("'stop_token_ids' must be an array of integers", "stop_token_ids");
      return false;
    }
    for (const Json& id : *it) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        *err = bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
        return false;
      }
      s->stop_token_ids.push_back(int32_t(id.get<int64_t>()));
    }
  }
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null() && !(it->is_object() && it->empty())) {
    *err = bad_request("'logit_bias' is not supported", "logit_bias");
    return false;
  }
  s->temperature = float(temperature.value_or(1.0));
  s->top_p = float(top_p.value_or(1.0));
  if (s->top_p <= 0.0f) s->temperature = 0.0f, s->top_p = 1.0f;  // top_p 0: only the most likely token
  s->top_k = int(top_k.value_or(0) < 0 ? 0 : top_k.value_or(0));
  s->min_p = float(min_p.value_or(0.0));
  s->presence_penalty = float(presence.value_or(0.0));
  s->frequency_penalty = float(frequency.value_or(0.0));
  s->repetition_penalty = float(repetition.value_or(1.0));
  s->seed = seed ? uint64_t(*seed) : 0x5eed0000ull ^ uint64_t(ctx.next_response_id.load());
  s->max_tokens = int(max_completion_tokens.value_or(max_tokens.value_or(0)));
  s->ignore_eos = ignore_eos.value_or(false);
  return true;
}

bool parse_stream_options(const Json& body, bool* stream, bool* include_usage, ApiError* err) {
  std::optional<bool> s;
  if (!read_bool(body, "stream", &s, err)) return false;
  *stream = s.value_or(false);
  *include_usage = false;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !check_known_fields(*it, {"include_usage", "continuous_usage_stats"}, "stream_options.", err)) {
      if (err->message.empty()) *err = bad_request("'stream_options' must be an object", "stream_options");
      return false;
    }
    std::optional<bool> usage;
    if (!read_bool(*it, "include_usage", &usage, err)) return false;
    *include_usage = usage.value_or(false);
  }
  return true;
}

const char* openai_finish_reason(EndReason r) {
  switch (r) {
    case EndReason::kLength: return "length";
    case EndReason::kToolCalls: return "tool_calls";
    default: return "stop";
  }
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json chat_logprob_entry(Engine& engine, const TokenLogprob& lp) {
  const std::string text = engine.token_text(lp.id);
  Json top = Json::array();
  for (const auto& [id, value] : lp.top) {
    const std::string t = engine.token_text(id);
    top.push_back({{"token", t}, {"logprob", value}, {"bytes", token_bytes_json(t)}});
  }
  return Json{{"token", text}, {"logprob", lp.logprob}, {"bytes", token_bytes_json(text)}, {"top_logprobs", top}};
}

// Completions-style logprobs for a run of tokens.
void append_completion_logprobs(Engine& engine, const std::vector<TokenLogprob>& lps, Json& out, int64_t* text_offset) {
  for (const TokenLogprob& lp : lps) {
    const std::string text = engine.token_text(lp.id);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& [id, value] : lp.top) top[engine.token_text(id)] = value;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(*text_offset);
    *text_offset += int64_t(text.size());
  }
}

Json empty_completion_logprobs() {
  return Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
}

}  // namespace

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  std::optional<Json> body = parse_body(req.body, &err);
  if (!body) return write_error(res, err, ApiFlavor::kOpenAi);
  if (!check_known_fields(*body, {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                  "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                                  "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "logprobs",
                                  "top_logprobs", "tools", "tool_choice", "parallel_tool_calls", "response_format", "n",
                                  "user", "thinking", "reasoning_effort", "chat_template_kwargs", "metadata", "store",
                                  "service_tier", "logit_bias"},
                          "", &err)) {
    return write_error(res, err, ApiFlavor::kOpenAi);
  }
  std::optional<std::string> model;
  if (!read_string(*body, "model", &model, &err)) return write_error(res, err, ApiFlavor::kOpenAi);
  auto messages = body->find("messages");
  if (messages == body->end() || !messages->is_array() || messages->empty()) {
    return write_error(res, bad_request("'messages' must be a non-empty array", "messages"), ApiFlavor::kOpenAi);
  }
  Request request;
  bool stream = false, include_usage = false;
  if (!parse_sampling(*body, true, ctx, &request.sampling, &err) || !parse_stream_options(*body, &stream, &include_usage, &err)) {
    return write_error(res, err, ApiFlavor::kOpenAi);
  }
  Json chat = Json::object();
  chat["messages"] = *messages;
  for (const char* key : {"tools", "tool_choice", "response_format", "thinking", "reasoning_effort"}) {
    if (auto it = body->find(key); it != body->end() && !it->is_null()) chat[key] = *it;
  }
  if (auto kw = body->find("chat_template_kwargs"); kw != body->end() && kw->is_object() && kw->contains("thinking") &&
                                                     (*kw)["thinking"].is_boolean() && !chat.contains("thinking")) {
    chat["thinking"] = Json{{"type", (*kw)["thinking"].get<bool>() ? "enabled" : "disabled"}};
  }
  request.chat = std::move(chat);
  request.deadline = request_deadline(ctx);
  std::shared_ptr<Slot> slot = acquire_slot(ctx, &err);
  if (!slot) return write_error(res, err, ApiFlavor::kOpenAi);
  Result<RequestId> id = ctx.engine.submit(std::move(request));
  if (!id.ok()) return write_error(res, submit_error(id.status()), ApiFlavor::kOpenAi);

  const std::string response_id = "chatcmpl-" + std::to_string(ctx.next_response_id.fetch_add(1)) + "-" + std::to_string(id.value());
  const int64_t created = unix_seconds();
  const std::string model_name = ctx.model_name;
  const bool want_logprobs = body->value("logprobs", false) == true;
  if (!stream) {
    Engine& engine = ctx.engine;
    respond_when_done(res, slot, ctx, id.value(), ApiFlavor::kOpenAi, [=, &engine](const Collected& c) {
    Json message{{"role", "assistant"}, {"content", c.content.empty() && !c.tool_calls.empty() ? Json(nullptr) : Json(c.content)}};
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) {
      Json calls = Json::array();
      for (const auto& call : c.tool_calls) {
        calls.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      message["tool_calls"] = calls;
    }
    Json logprobs = nullptr;
    if (want_logprobs) {
      logprobs = Json{{"content", Json::array()}};
      for (const TokenLogprob& lp : c.logprobs) logprobs["content"].push_back(chat_logprob_entry(engine, lp));
    }
    return Json{{"id", response_id}, {"object", "chat.completion"}, {"created", created}, {"model", model_name},
                {"choices", Json::array({Json{{"index", 0}, {"message", message}, {"logprobs", logprobs},
                                              {"finish_reason", openai_finish_reason(c.end)}}})},
                {"usage", usage_json(c.usage)}, {"system_fingerprint", "deepinfer"}};
    });
    return;
  }
  auto chunk = [=](Json delta, Json finish_reason, Json logprobs) {
    Json j{{"id", response_id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model_name},
           {"system_fingerprint", "deepinfer"},
           {"choices", Json::array({Json{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                         {"finish_reason", std::move(finish_reason)}}})}};
    if (include_usage) j["usage"] = nullptr;
    return j;
  };
  auto state = std::make_shared<Usage>();
  auto sent_role = std::make_shared<bool>(false);
  Engine& engine = ctx.engine;
  stream_sse(res, slot, ctx, id.value(),
      [=, &engine](std::vector<Event>& events, httplib::DataSink& sink) {
        for (const Event& e : events) {
          *state = e.usage;
          if (!*sent_role) {
            *sent_role = true;
            if (!write_sse(sink, chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return false;
          }
          if (e.finished && ended_in_error(e.end_reason)) {
            Collected c;
            collect_event(e, c);
            return write_sse(sink, error_json(end_error(c), ApiFlavor::kOpenAi));
          }
          Json logprobs = nullptr;
          if (want_logprobs && !e.logprobs.empty()) {
            logprobs = Json{{"content", Json::array()}};
            for (const TokenLogprob& lp : e.logprobs) logprobs["content"].push_back(chat_logprob_entry(engine, lp));
          }
          bool logprobs_sent = false;
          for (const TextDelta& d : e.deltas) {
            Json delta;
            switch (d.kind) {
              case DeltaKind::kReasoning: delta = Json{{"reasoning_content", d.text}}; break;
              case DeltaKind::kContent: delta = Json{{"content", d.text}}; break;
              case DeltaKind::kToolCallStart:
                delta = Json{{"tool_calls", Json::array({Json{{"index", d.tool_call_index}, {"id", d.tool_call_id}, {"type", "function"},
                                                             {"function", {{"name", d.tool_name}, {"arguments", ""}}}}})}};
                break;
              case DeltaKind::kToolCallArguments:
                delta = Json{{"tool_calls", Json::array({Json{{"index", d.tool_call_index}, {"function", {{"arguments", d.text}}}}})}};
                break;
              default: continue;
            }
            if (!write_sse(sink, chunk(std::move(delta), nullptr, logprobs_sent ? Json(nullptr) : logprobs))) return false;
            logprobs_sent = true;
          }
          if (!logprobs_sent && !logprobs.is_null()) {
            if (!write_sse(sink, chunk(Json::object(), nullptr, logprobs))) return false;
          }
          if (e.finished) {
            if (!write_sse(sink, chunk(Json::object(), openai_finish_reason(e.end_reason), nullptr))) return false;
          }
        }
        return true;
      },
      [=](httplib::DataSink& sink) {
        if (include_usage) {
          write_sse(sink, Json{{"id", response_id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model_name},
                               {"system_fingerprint", "deepinfer"}, {"choices", Json::array()}, {"usage", usage_json(*state)}});
        }
        sink.write("data: [DONE]\n\n", 14);
      });
}

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  std::optional<Json> body = parse_body(req.body, &err);
  if (!body) return write_error(res, err, ApiFlavor::kOpenAi);
  if (!check_known_fields(*body, {"model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
                                  "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop",
                                  "stop_token_ids", "ignore_eos", "logprobs", "n", "user", "echo", "suffix", "best_of",
                                  "logit_bias", "add_special_tokens"},
                          "", &err)) {
    return write_error(res, err, ApiFlavor::kOpenAi);
  }
  Request request;
  auto prompt = body->find("prompt");
  if (prompt == body->end()) return write_error(res, bad_request("'prompt' is required", "prompt"), ApiFlavor::kOpenAi);
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    request.prompt_text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_string()) {
    request.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    for (const Json& id : *prompt) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return write_error(res, bad_request("'prompt' token ids must be non-negative integers", "prompt"), ApiFlavor::kOpenAi);
      }
      request.prompt_ids.push_back(int32_t(id.get<int64_t>()));
    }
  } else {
    return write_error(res, bad_request("'prompt' must be a string, a one-string array or an array of token ids (one prompt per request)", "prompt"),
                       ApiFlavor::kOpenAi);
  }
  if (request.prompt_text && request.prompt_text->empty()) {
    return write_error(res, bad_request("'prompt' is empty", "prompt"), ApiFlavor::kOpenAi);
  }
  std::optional<bool> echo, add_special;
  std::optional<int64_t> best_of;
  std::optional<std::string> suffix;
  if (!read_bool(*body, "echo", &echo, &err) || !read_int(*body, "best_of", 1, 1, &best_of, &err) ||
      !read_string(*body, "suffix", &suffix, &err) || !read_bool(*body, "add_special_tokens", &add_special, &err)) {
    return write_error(res, err, ApiFlavor::kOpenAi);
  }
  if (echo.value_or(false)) return write_error(res, bad_request("'echo' is not supported", "echo"), ApiFlavor::kOpenAi);
  if (suffix && !suffix->empty()) return write_error(res, bad_request("'suffix' is not supported", "suffix"), ApiFlavor::kOpenAi);
  request.add_bos = add_special.value_or(true);
  bool stream = false, include_usage = false;
  if (!parse_sampling(*body, false, ctx, &request.sampling, &err) || !parse_stream_options(*body, &stream, &include_usage, &err)) {
    return write_error(res, err, ApiFlavor::kOpenAi);
  }
  if (!body->contains("max_tokens")) request.sampling.max_tokens = 16;  // the OpenAI default for completions
  request.deadline = request_deadline(ctx);
  const bool want_logprobs = request.sampling.logprobs;
  std::shared_ptr<Slot> slot = acquire_slot(ctx, &err);
  if (!slot) return write_error(res, err, ApiFlavor::kOpenAi);
  Result<RequestId> id = ctx.engine.submit(std::move(request));
  if (!id.ok()) return write_error(res, submit_error(id.status()), ApiFlavor::kOpenAi);
  const std::string response_id = "cmpl-" + std::to_string(ctx.next_response_id.fetch_add(1)) + "-" + std::to_string(id.value());
  const int64_t created = unix_seconds();
  const std::string model_name = ctx.model_name;
  if (!stream) {
    Engine& engine = ctx.engine;
    respond_when_done(res, slot, ctx, id.value(), ApiFlavor::kOpenAi, [=, &engine](const Collected& c) {
      Json logprobs = nullptr;
      if (want_logprobs) {
        logprobs = empty_completion_logprobs();
        int64_t offset = 0;
        append_completion_logprobs(engine, c.logprobs, logprobs, &offset);
      }
      return Json{{"id", response_id}, {"object", "text_completion"}, {"created", created}, {"model", model_name},
                  {"choices", Json::array({Json{{"index", 0}, {"text", c.reasoning + c.content}, {"logprobs", logprobs},
                                                {"finish_reason", openai_finish_reason(c.end)}}})},
                  {"usage", usage_json(c.usage)}};
    });
    return;
  }
  auto state = std::make_shared<Usage>();
  auto offset = std::make_shared<int64_t>(0);
  Engine& engine = ctx.engine;
  auto chunk = [=](const std::string& text, Json finish_reason, Json logprobs) {
    Json j{{"id", response_id}, {"object", "text_completion"}, {"created", created}, {"model", model_name},
           {"choices", Json::array({Json{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish_reason)}}})}};
    if (include_usage) j["usage"] = nullptr;
    return j;
  };
  stream_sse(res, slot, ctx, id.value(),
      [=, &engine](std::vector<Event>& events, httplib::DataSink& sink) {
        for (const Event& e : events) {
          *state = e.usage;
          if (e.finished && ended_in_error(e.end_reason)) {
            Collected c;
            collect_event(e, c);
            return write_sse(sink, error_json(end_error(c), ApiFlavor::kOpenAi));
          }
          std::string text;
          for (const TextDelta& d : e.deltas) {
            if (d.kind == DeltaKind::kContent || d.kind == DeltaKind::kReasoning) text += d.text;
          }
          Json logprobs = nullptr;
          if (want_logprobs && !e.logprobs.empty()) {
            logprobs = empty_completion_logprobs();
            append_completion_logprobs(engine, e.logprobs, logprobs, offset.get());
          }
          if (!text.empty() || !logprobs.is_null()) {
            if (!write_sse(sink, chunk(text, nullptr, logprobs))) return false;
          }
          if (e.finished && !write_sse(sink, chunk("", openai_finish_reason(e.end_reason), nullptr))) return false;
        }
        return true;
      },
      [=](httplib::DataSink& sink) {
        if (include_usage) {
          write_sse(sink, Json{{"id", response_id}, {"object", "text_completion"}, {"created", created}, {"model", model_name},
                               {"choices", Json::array()}, {"usage", usage_json(*state)}});
        }
        sink.write("data: [DONE]\n\n", 14);
      });
}

}  // namespace deepinfer::server
