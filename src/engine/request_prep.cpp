#include "engine/request_prep.h"

#include <cmath>
#include <string>

#include "format/chat_request_json.h"
#include "format/json_prefix.h"
#include "format/json_schema_prefix.h"

namespace deepinfer {

namespace {

Status check_sampling(const SamplingParams& s, const PrepareContext& ctx) {
  auto bad = [](const std::string& what) { return Status::error(what); };
  if (!std::isfinite(s.temperature) || s.temperature < 0.0f || s.temperature > 100.0f) {
    return bad("temperature must be in [0, 100], got " + std::to_string(s.temperature));
  }
  if (!std::isfinite(s.top_p) || s.top_p <= 0.0f || s.top_p > 1.0f) return bad("top_p must be in (0, 1], got " + std::to_string(s.top_p));
  if (s.top_k < 0) return bad("top_k must be >= 0 (0 = off), got " + std::to_string(s.top_k));
  if (!std::isfinite(s.min_p) || s.min_p < 0.0f || s.min_p > 1.0f) return bad("min_p must be in [0, 1], got " + std::to_string(s.min_p));
  if (!std::isfinite(s.presence_penalty) || std::fabs(s.presence_penalty) > 2.0f) {
    return bad("presence_penalty must be in [-2, 2], got " + std::to_string(s.presence_penalty));
  }
  if (!std::isfinite(s.frequency_penalty) || std::fabs(s.frequency_penalty) > 2.0f) {
    return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(s.frequency_penalty));
  }
  if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0.0f || s.repetition_penalty > 10.0f) {
    return bad("repetition_penalty must be in (0, 10], got " + std::to_string(s.repetition_penalty));
  }
  if (s.max_tokens < 0) return bad("max_tokens must be >= 1, got " + std::to_string(s.max_tokens));
  if (s.top_logprobs < 0 || s.top_logprobs > 20) return bad("top_logprobs must be in [0, 20], got " + std::to_string(s.top_logprobs));
  if (s.stop.size() > 16) return bad("stop: at most 16 stop strings");
  for (const std::string& stop : s.stop) {
    if (stop.empty()) return bad("stop: an empty stop string");
    if (stop.size() > 1024) return bad("stop: a stop string longer than 1024 bytes");
  }
  for (int32_t id : s.stop_token_ids) {
    if (id < 0 || id >= ctx.vocab_size) return bad("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");
  }
  if (!s.stop.empty() && ctx.tokenizer == nullptr) return bad("stop strings need a tokenizer (the model directory has none)");
  return Status();
}

}  // namespace

Result<std::vector<int32_t>> tokenize_encoded_prompt(const EncodedPrompt& prompt, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  size_t at = 0;
  for (const ByteRange& r : prompt.special_ranges) {
    if (r.begin > at) tokenizer.encode_into(std::string_view(prompt.text).substr(at, r.begin - at), AddedTokenMatching::kNone, &ids);
    const std::string_view special = std::string_view(prompt.text).substr(r.begin, r.end - r.begin);
    const std::optional<int32_t> id = tokenizer.token_to_id(special);
    if (!id) return Status::error("chat template token '" + std::string(special) + "' is not in the tokenizer");
    ids.push_back(*id);
    at = r.end;
  }
  if (at < prompt.text.size()) tokenizer.encode_into(std::string_view(prompt.text).substr(at), AddedTokenMatching::kNone, &ids);
  return ids;
}

Result<PreparedRequest> prepare_request(Request request, const PrepareContext& ctx) {
  PreparedRequest out;
  out.sampling = std::move(request.sampling);
  out.deadline = request.deadline;
  const int n_inputs = int(!request.prompt_ids.empty()) + int(request.prompt_text.has_value()) + int(request.chat.has_value());
  if (n_inputs != 1) return Status::error("a request needs exactly one of prompt_ids, prompt_text and chat");
  OutputParserOptions parser;
  parser.start = ParserStart::kContentContinuation;
  parser.parse_tool_calls = false;
  if (request.chat) {
    if (ctx.tokenizer == nullptr) return Status::error("chat requests need a tokenizer (the model directory has none)");
    ChatRequestJsonOptions json_options;
    json_options.default_version = ctx.chat_version;
    json_options.default_thinking_mode = ctx.default_thinking;
    Result<ChatRequest> chat = chat_request_from_json(*request.chat, json_options);
    if (!chat.ok()) return chat.status();
    Result<EncodedPrompt> encoded = encode_chat(chat->messages, chat->options);
    if (!encoded.ok()) return encoded.status();
    Result<std::vector<int32_t>> ids = tokenize_encoded_prompt(*encoded, *ctx.tokenizer);
    if (!ids.ok()) return ids.status();
    out.prompt = std::move(ids.value());
    if (const std::optional<int32_t> user = ctx.tokenizer->token_to_id(kUserToken)) {
      for (size_t i = out.prompt.size(); i-- > 1;) {
        if (out.prompt[i] == *user) {
          out.shared_prefix_tokens = int64_t(i) + 1;
          break;
        }
      }
    }
    for (std::string& stop : chat->stop) out.sampling.stop.push_back(std::move(stop));
    parser = output_parser_options_for(chat->messages, chat->options, {});
    const ResponseFormat& format = chat->options.response_format;
    if (format.kind == ResponseFormatKind::kJsonObject || format.kind == ResponseFormatKind::kJsonSchema) {
      const bool schema = format.kind == ResponseFormatKind::kJsonSchema;
      const std::string what = schema ? "response_format json_schema" : "response_format json_object";
      if (schema) {
        Result<CompiledJsonSchema> compiled = compile_json_schema(format.schema);
        if (!compiled.ok()) return Status::error("response_format.json_schema.schema: " + compiled.status().message());
        out.json_schema = std::make_shared<const CompiledJsonSchema>(std::move(compiled.value()));
      } else {
        out.json_object = true;
      }
      if (parser.start == ParserStart::kToolCalls) {
        return Status::error(what + " cannot be combined with tool_choice 'required' (the answer must be the JSON document)");
      }
      out.json_after_think = parser.start == ParserStart::kReasoning || parser.start == ParserStart::kReasoningContinuation;
      const Message* last = chat->messages.empty() ? nullptr : &chat->messages.back();
      if (last != nullptr && last->role == ChatRole::kAssistant && last->prefix && !out.json_after_think) {
        out.json_prefix = chat->messages.back().content;
        const bool ok = schema ? JsonSchemaPrefixValidator(out.json_schema).feed(out.json_prefix) : is_json_object_prefix(out.json_prefix);
        if (!ok) return Status::error(what + ": the assistant prefix's content is not the start of a valid document");
      }
    }
  } else if (request.prompt_text) {
    if (ctx.tokenizer == nullptr) return Status::error("text prompts need a tokenizer (the model directory has none)");
    if (request.add_bos) out.prompt.push_back(ctx.bos_token_id);
    ctx.tokenizer->encode_into(*request.prompt_text, AddedTokenMatching::kAll, &out.prompt);
  } else {
    out.prompt = std::move(request.prompt_ids);
    for (int32_t id : out.prompt) {
      if (id < 0 || id >= ctx.vocab_size) {
        return Status::error("prompt token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                             std::to_string(ctx.vocab_size - 1) + ")");
      }
    }
  }
  DI_RETURN_IF_ERROR(check_sampling(out.sampling, ctx));
  if (ctx.tokenizer != nullptr) {
    parser.stop_sequences = out.sampling.stop;
    out.parser = std::move(parser);
  }
  const int64_t n_prompt = int64_t(out.prompt.size());
  if (n_prompt == 0) return Status::error("the prompt is empty");
  if (n_prompt >= ctx.max_context_tokens) {
    return Status::error("the prompt is " + std::to_string(n_prompt) + " tokens; this model's context length is " +
                         std::to_string(ctx.max_context_tokens) + " tokens (prompt + output)");
  }
  if (out.sampling.max_tokens == 0) {
    out.max_new_tokens = std::min<int64_t>(ctx.default_max_tokens, ctx.max_context_tokens - n_prompt);
  } else {
    out.max_new_tokens = out.sampling.max_tokens;
    if (n_prompt + out.max_new_tokens > ctx.max_context_tokens) {
      return Status::error("max_tokens " + std::to_string(out.max_new_tokens) + " + the prompt's " + std::to_string(n_prompt) +
                           " tokens exceed this model's context length of " + std::to_string(ctx.max_context_tokens) + " tokens");
    }
  }
  // The scheduler's charge for the whole request (fixed state in whole pages, plus the rows' pages) must fit
  // the budget's pages, or it could never run even alone.
  const int64_t pages = ctx.footprint.charge_pages(n_prompt + out.max_new_tokens);
  const int64_t page_bytes = ctx.footprint.page_bytes;
  if (pages > ctx.cache_budget_bytes / page_bytes) {
    return Status::error("the request needs " + std::to_string(pages * page_bytes) + " bytes of cache state (prompt + max_tokens, " +
                         std::to_string(pages) + " pages of " + std::to_string(page_bytes) + " bytes), over the engine's cache budget of " +
                         std::to_string(ctx.cache_budget_bytes) + " bytes");
  }
  return out;
}

}  // namespace deepinfer
