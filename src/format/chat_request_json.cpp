// Loader for OpenAI-style chat request JSON (see chat_request_json.h). Mapping rules follow DeepSeek's API
// conversion (deepseek-recipe's Chat Completions conversion) where it has one.
#include "format/chat_request_json.h"

#include <cstdint>
#include <optional>

#include "format/json_text.h"

namespace deepinfer {

namespace {

using Json = nlohmann::ordered_json;

const Json* find(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<std::string>> optional_string(const Json& object, std::string_view key, const std::string& path) {
  const Json* value = find(object, key);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) return Status::error(path + "." + std::string(key) + ": expected a string");
  return std::optional<std::string>(value->get<std::string>());
}

Result<bool> optional_bool(const Json& object, std::string_view key, const std::string& path, bool fallback) {
  const Json* value = find(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return Status::error(path + "." + std::string(key) + ": expected true or false");
  return value->get<bool>();
}

// String content, or a list of text parts joined by blank lines (as the API joins content blocks).
Result<std::string> content_text(const Json& message, const std::string& path) {
  const Json* content = find(message, "content");
  if (content == nullptr) return std::string();
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) return Status::error(path + ".content: expected a string or a list of parts");
  std::string out;
  for (size_t j = 0; j < content->size(); ++j) {
    const Json& part = (*content)[j];
    const std::string part_path = path + ".content[" + std::to_string(j) + "]";
    if (!part.is_object()) return Status::error(part_path + ": expected an object");
    const Json* type = find(part, "type");
    if (type == nullptr || !type->is_string()) return Status::error(part_path + ".type: expected a string");
    if (*type == "image_url" || *type == "image" || *type == "input_image") {
      return Status::error(part_path + ".type: '" + type->get<std::string>() +
                           "': image input is not supported yet (the V4.1 vision tower is not implemented)");
    }
    if (*type != "text") {
      return Status::error(part_path + ".type: '" + type->get<std::string>() +
                           "' is not supported by the chat encoding (text parts only)");
    }
    Result<std::optional<std::string>> text = optional_string(part, "text", part_path);
    if (!text.ok()) return text.status();
    if (j > 0) out += "\n\n";
    out += text->value_or("");
  }
  return out;
}

Result<Tool> tool_from_json(const Json& json, const std::string& path, bool api_normalization) {
  if (!json.is_object()) return Status::error(path + ": expected an object");
  const Json* function = find(json, "function");
  const Json& body = function != nullptr ? *function : json;
  const std::string body_path = function != nullptr ? path + ".function" : path;
  if (!body.is_object()) return Status::error(body_path + ": expected an object");
  Tool tool;
  Result<std::optional<std::string>> name = optional_string(body, "name", body_path);
  if (!name.ok()) return name.status();
  if (!name->has_value() || (*name)->empty()) return Status::error(body_path + ".name: a non-empty string is required");
  tool.name = **name;
  Result<std::optional<std::string>> description = optional_string(body, "description", body_path);
  if (!description.ok()) return description.status();
  tool.description = *description;
  const Json* parameters = find(body, "parameters");
  if (parameters != nullptr) {
    tool.parameters = *parameters;
  } else if (api_normalization) {
    tool.parameters = Json::object();
  }
  Result<bool> defer = optional_bool(json, "defer_loading", path, false);
  if (!defer.ok()) return defer.status();
  tool.defer_loading = *defer;
  return tool;
}

Result<std::vector<Tool>> tools_from_json(const Json& json, const std::string& path, bool api_normalization) {
  if (!json.is_array()) return Status::error(path + ": expected a list of tools");
  std::vector<Tool> tools;
  for (size_t i = 0; i < json.size(); ++i) {
    Result<Tool> tool = tool_from_json(json[i], path + "[" + std::to_string(i) + "]", api_normalization);
    if (!tool.ok()) return tool.status();
    tools.push_back(std::move(*tool));
  }
  return tools;
}

Result<ToolCall> tool_call_from_json(const Json& json, const std::string& path) {
  if (!json.is_object()) return Status::error(path + ": expected an object");
  ToolCall call;
  Result<std::optional<std::string>> id = optional_string(json, "id", path);
  if (!id.ok()) return id.status();
  call.id = id->value_or("");
  const Json* function = find(json, "function");
  if (function == nullptr || !function->is_object()) return Status::error(path + ".function: expected an object");
  Result<std::optional<std::string>> name = optional_string(*function, "name", path + ".function");
  if (!name.ok()) return name.status();
  if (!name->has_value()) return Status::error(path + ".function.name: required");
  call.name = **name;
  const Json* arguments = find(*function, "arguments");
  if (arguments == nullptr) {
    call.arguments = "{}";
  } else if (arguments->is_string()) {
    call.arguments = arguments->get<std::string>();
  } else {
    call.arguments = json_dump(*arguments, JsonStyle::kSpaced);  // an object given inline
  }
  return call;
}

Result<Message> message_from_json(const Json& json, const std::string& path, bool api_normalization) {
  if (!json.is_object()) return Status::error(path + ": expected an object");
  Result<std::optional<std::string>> role = optional_string(json, "role", path);
  if (!role.ok()) return role.status();
  if (!role->has_value()) return Status::error(path + ".role: required");
  const std::string& role_name = **role;
  Message m;
  if (role_name == "system") {
    m.role = ChatRole::kSystem;
  } else if (role_name == "user" || role_name == "developer") {
    m.role = ChatRole::kUser;
  } else if (role_name == "assistant") {
    m.role = ChatRole::kAssistant;
  } else if (role_name == "tool") {
    m.role = ChatRole::kTool;
  } else if (role_name == "latest_reminder") {
    m.role = ChatRole::kLatestReminder;
  } else {
    return Status::error(path + ".role: unknown role '" + role_name + "'");
  }
  Result<std::string> content = content_text(json, path);
  if (!content.ok()) return content.status();
  m.content = std::move(*content);

  if (m.role == ChatRole::kAssistant) {
    Result<std::optional<std::string>> reasoning = optional_string(json, "reasoning_content", path);
    if (!reasoning.ok()) return reasoning.status();
    m.reasoning_content = *reasoning;
    if (const Json* calls = find(json, "tool_calls")) {
      if (!calls->is_array()) return Status::error(path + ".tool_calls: expected a list");
      m.tool_calls.emplace();
      for (size_t j = 0; j < calls->size(); ++j) {
        Result<ToolCall> call = tool_call_from_json((*calls)[j], path + ".tool_calls[" + std::to_string(j) + "]");
        if (!call.ok()) return call.status();
        m.tool_calls->push_back(std::move(*call));
      }
    }
    Result<bool> prefix = optional_bool(json, "prefix", path, false);
    if (!prefix.ok()) return prefix.status();
    m.prefix = *prefix;
  }
  if (m.role == ChatRole::kTool) {
    Result<std::optional<std::string>> id = optional_string(json, "tool_call_id", path);
    if (!id.ok()) return id.status();
    m.tool_call_id = *id;
  }
  if (const Json* task = find(json, "task")) {
    if (!task->is_string()) return Status::error(path + ".task: expected a string");
    const std::optional<ChatTask> parsed = chat_task_from_name(task->get<std::string>());
    if (!parsed) {
      return Status::error(path + ".task: unknown task '" + task->get<std::string>() +
                           "' (action, query, authority, domain, title, read_url)");
    }
    m.task = *parsed;
  }
  if (const Json* tools = find(json, "tools")) {
    Result<std::vector<Tool>> parsed = tools_from_json(*tools, path + ".tools", api_normalization);
    if (!parsed.ok()) return parsed.status();
    m.tools = std::move(*parsed);
  }
  return m;
}

struct Effort {
  std::optional<bool> implies_thinking;  // "none" → false, any other value → true
  ReasoningEffort level = ReasoningEffort::kDefault;
  int score = 0;
};

Result<Effort> effort_from_json(const Json* json) {
  Effort effort;
  if (json == nullptr) return effort;
  if (json->is_number_integer() || json->is_number_unsigned()) {
    const int64_t score = json->is_number_unsigned() && json->get<uint64_t>() > 1000 ? 1000 : json->get<int64_t>();
    if (score < 1 || score > 100) {
      return Status::error("reasoning_effort: " + std::to_string(score) + " is outside 1..100");
    }
    effort.score = static_cast<int>(score);
    effort.implies_thinking = true;
    return effort;
  }
  if (!json->is_string()) return Status::error("reasoning_effort: expected a string or an integer 1..100");
  const std::string name = json->get<std::string>();
  effort.implies_thinking = name != "none";
  if (name == "none") {
    effort.level = ReasoningEffort::kDefault;
  } else if (name == "minimal" || name == "low") {
    effort.level = ReasoningEffort::kLow;
  } else if (name == "medium" || name == "high") {
    effort.level = ReasoningEffort::kHigh;
  } else if (name == "xhigh") {
    effort.level = ReasoningEffort::kXhigh;
  } else if (name == "ultra" || name == "max") {
    effort.level = ReasoningEffort::kMax;
  } else {
    return Status::error("reasoning_effort: unknown value '" + name + "'");
  }
  return effort;
}

Result<bool> thinking_mode_from_json(const Json& request, const Effort& effort, bool fallback) {
  if (const Json* thinking = find(request, "thinking")) {
    const Json* type = thinking->is_object() ? find(*thinking, "type") : nullptr;
    if (type == nullptr || !type->is_string()) return Status::error("thinking.type: expected a string");
    if (*type == "enabled" || *type == "adaptive") return true;
    if (*type == "disabled") return false;
    return Status::error("thinking.type: unknown value '" + type->get<std::string>() + "'");
  }
  if (const Json* mode = find(request, "thinking_mode")) {
    if (mode->is_boolean()) return mode->get<bool>();
    if (*mode == "thinking") return true;
    if (*mode == "chat") return false;
    return Status::error("thinking_mode: expected true/false or \"thinking\"/\"chat\"");
  }
  return effort.implies_thinking.value_or(fallback);
}

Result<ResponseFormat> response_format_from_json(const Json& json) {
  ResponseFormat format;
  if (!json.is_object()) return Status::error("response_format: expected an object");
  const Json* type = find(json, "type");
  if (type == nullptr || !type->is_string()) return Status::error("response_format.type: expected a string");
  if (*type == "text") return format;
  if (*type == "json_object") {
    format.kind = ResponseFormatKind::kJsonObject;
  } else if (*type == "json_schema") {
    const Json* wrapper = find(json, "json_schema");
    const Json* schema = wrapper != nullptr && wrapper->is_object() ? find(*wrapper, "schema") : nullptr;
    if (schema == nullptr) return Status::error("response_format.json_schema.schema: required");
    format.kind = ResponseFormatKind::kJsonSchema;
    format.schema = *schema;
  } else if (*type == "regex") {
    const Json* regex = find(json, "regex");
    if (regex == nullptr || !regex->is_string()) return Status::error("response_format.regex: expected a string");
    format.kind = ResponseFormatKind::kRegex;
    format.regex = regex->get<std::string>();
  } else {
    return Status::error("response_format.type: unknown value '" + type->get<std::string>() + "'");
  }
  return format;
}

// Tool choice as DeepSeek's API resolves it: without tools every choice but "none" is "auto"; a named choice
// keeps only that tool and requires a call; thinking mode takes neither "required" nor a named tool (API rule).
Status tool_choice_from_json(const Json* json, bool api_rules, EncodeOptions& options) {
  if (json == nullptr) return Status();
  if (api_rules && options.tools.empty() && *json != "none") return Status();
  if (json->is_string()) {
    if (*json == "auto") {
      options.tool_choice = ToolChoice::kAuto;
    } else if (*json == "none") {
      options.tool_choice = ToolChoice::kNone;
    } else if (*json == "required") {
      options.tool_choice = ToolChoice::kRequired;
    } else {
      return Status::error("tool_choice: unknown value '" + json->get<std::string>() + "'");
    }
    return Status();
  }
  const Json* function = json->is_object() ? find(*json, "function") : nullptr;
  const Json* name = function != nullptr && function->is_object() ? find(*function, "name") : nullptr;
  if (name == nullptr || !name->is_string()) return Status::error("tool_choice.function.name: expected a string");
  std::vector<Tool> named;
  for (const Tool& tool : options.tools) {
    if (tool.name == name->get_ref<const std::string&>()) named.push_back(tool);
  }
  if (named.empty()) {
    return Status::error("tool_choice.function.name: no tool named '" + name->get<std::string>() + "'");
  }
  options.tools = std::move(named);
  options.tool_choice = ToolChoice::kRequired;
  return Status();
}

Status check_tool_choice_mode(const EncodeOptions& options) {
  if (options.thinking_mode && options.tool_choice == ToolChoice::kRequired && !options.tools.empty()) {
    return Status::error("tool_choice: thinking mode does not support a required or named tool choice");
  }
  return Status();
}

}  // namespace

Result<ChatRequest> chat_request_from_json(const Json& request, const ChatRequestJsonOptions& options) {
  if (!request.is_object()) return Status::error("request: expected a JSON object");
  ChatRequest out;
  out.options.version = options.default_version;
  if (const Json* version = find(request, "version")) {
    if (*version == "v4" || *version == "V4") {
      out.options.version = ChatModelVersion::kV4;
    } else if (*version == "v4.1" || *version == "V4.1" || *version == "v41") {
      out.options.version = ChatModelVersion::kV41;
    } else {
      return Status::error("version: expected \"v4\" or \"v4.1\"");
    }
  }
  Result<Effort> effort = effort_from_json(find(request, "reasoning_effort"));
  if (!effort.ok()) return effort.status();
  Result<bool> thinking = thinking_mode_from_json(request, *effort, options.default_thinking_mode);
  if (!thinking.ok()) return thinking.status();
  out.options.thinking_mode = *thinking;
  out.options.reasoning_effort = effort->level;
  out.options.reasoning_effort_score = effort->score;

  if (const Json* tools = find(request, "tools")) {
    Result<std::vector<Tool>> parsed = tools_from_json(*tools, "tools", options.api_normalization);
    if (!parsed.ok()) return parsed.status();
    out.options.tools = std::move(*parsed);
  }
  DI_RETURN_IF_ERROR(tool_choice_from_json(find(request, "tool_choice"), options.api_normalization, out.options));
  if (options.api_normalization) DI_RETURN_IF_ERROR(check_tool_choice_mode(out.options));
  if (const Json* format = find(request, "response_format")) {
    Result<ResponseFormat> parsed = response_format_from_json(*format);
    if (!parsed.ok()) return parsed.status();
    out.options.response_format = std::move(*parsed);
  }
  if (const Json* stop = find(request, "stop")) {
    if (stop->is_string()) {
      out.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) return Status::error("stop[" + std::to_string(i) + "]: expected a string");
        out.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return Status::error("stop: expected a string or a list of strings");
    }
  }

  const Json* messages = find(request, "messages");
  if (messages == nullptr || !messages->is_array()) return Status::error("messages: expected a list");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string path = "messages[" + std::to_string(i) + "]";
    Result<Message> m = message_from_json((*messages)[i], path, options.api_normalization);
    if (!m.ok()) return m.status();
    if (options.api_normalization) {
      if (m->role == ChatRole::kSystem && m->content.empty() && !m->tools) continue;
      if (m->role == ChatRole::kAssistant) {
        if (!out.options.thinking_mode) {
          m->reasoning_content.reset();
        } else if (!m->reasoning_content) {
          m->reasoning_content = "";
        }
      }
    }
    out.messages.push_back(std::move(*m));
  }
  return out;
}

Result<ChatRequest> chat_request_from_json_text(std::string_view text, const ChatRequestJsonOptions& options) {
  const Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::error("request: not valid JSON");
  return chat_request_from_json(parsed, options);
}

}  // namespace deepinfer
