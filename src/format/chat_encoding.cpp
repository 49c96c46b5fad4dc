// encode_chat: validation, dispatch to the V4 / V4.1 renderer, and the pieces both renderers share.
// The prompt texts below are DeepSeek's template wording (deepseek-recipe 0.2.0), reproduced verbatim
// because the model was trained on exactly these bytes.
#include <array>
#include <string>

#include "format/chat_encoding.h"
#include "format/chat_encoding_internal.h"

namespace deepinfer {

namespace {

constexpr std::array<std::pair<ChatTask, std::string_view>, 6> kTaskNames = {{
    {ChatTask::kAction, "action"},
    {ChatTask::kQuery, "query"},
    {ChatTask::kAuthority, "authority"},
    {ChatTask::kDomain, "domain"},
    {ChatTask::kTitle, "title"},
    {ChatTask::kReadUrl, "read_url"},
}};

// Grounding tokens: the only special tokens assistant content and reasoning may carry.
constexpr std::array<std::string_view, 8> kGroundingTokens = {
    "<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>", "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>",
};

// {D} = DSML token, {S}/{E} = thinking start/end (all special); {B}/{I}/{P} = tag names (plain).
constexpr std::string_view kToolInstructions =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<{D}{B}>\" block like the following:\n"
    "\n"
    "<{D}{B}>\n"
    "<{D}{I} name=\"$TOOL_NAME\">\n"
    "<{D}{P} name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{D}{P}>\n"
    "...\n"
    "</{D}{I}>\n"
    "<{D}{I} name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</{D}{I}>\n"
    "</{D}{B}>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by {S}), you MUST output your complete reasoning inside {S}...{E} "
    "BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after {E} with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";

Status validate(const std::vector<Message>& messages, const EncodeOptions& options) {
  if (options.reasoning_effort_score != 0) {
    if (options.version != ChatModelVersion::kV41) {
      return Status::error("reasoning_effort: a numeric effort (" + std::to_string(options.reasoning_effort_score) +
                           ") exists only for V4.1; V4 takes low/high/xhigh/max");
    }
    if (options.reasoning_effort_score < 1 || options.reasoning_effort_score > 100) {
      return Status::error("reasoning_effort: " + std::to_string(options.reasoning_effort_score) +
                           " is outside 1..100");
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (m.task != ChatTask::kNone && m.role != ChatRole::kUser) {
      return Status::error(where + ".task: only user messages carry a task");
    }
    if (m.tools && m.role != ChatRole::kSystem) {
      return Status::error(where + ".tools: only system messages carry tools");
    }
    if (m.role != ChatRole::kAssistant && (m.reasoning_content || m.tool_calls || m.prefix)) {
      return Status::error(where + ": reasoning_content, tool_calls and prefix belong to assistant messages");
    }
  }
  return Status();
}

}  // namespace

std::string_view chat_task_name(ChatTask task) {
  for (const auto& [t, name] : kTaskNames) {
    if (t == task) return name;
  }
  return "";
}

std::optional<ChatTask> chat_task_from_name(std::string_view name) {
  for (const auto& [t, n] : kTaskNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

Result<EncodedPrompt> encode_chat(const std::vector<Message>& messages, const EncodeOptions& options) {
  DI_RETURN_IF_ERROR(validate(messages, options));
  if (options.version == ChatModelVersion::kV4) return chat_detail::encode_chat_v4(messages, options);
  return chat_detail::encode_chat_v41(messages, options);
}

namespace chat_detail {

void push_assistant_content(EncodedPrompt& prompt, std::string_view content) {
  size_t cursor = 0;
  size_t pos = 0;
  while ((pos = content.find("<｜", pos)) != std::string_view::npos) {
    bool matched = false;
    for (std::string_view token : kGroundingTokens) {
      if (content.substr(pos, token.size()) == token) {
        prompt.push_plain(content.substr(cursor, pos - cursor));
        prompt.push_special(token);
        pos += token.size();
        cursor = pos;
        matched = true;
        break;
      }
    }
    if (!matched) ++pos;
  }
  prompt.push_plain(content.substr(cursor));
}

EncodedPrompt tool_call_instructions(std::string_view block_name, std::string_view invoke_name,
                                     std::string_view parameter_name) {
  EncodedPrompt prompt;
  std::string_view rest = kToolInstructions;
  while (!rest.empty()) {
    const size_t open = rest.find('{');
    if (open == std::string_view::npos || open + 2 >= rest.size() || rest[open + 2] != '}') {
      const size_t n = open == std::string_view::npos ? rest.size() : open + 1;
      prompt.push_plain(rest.substr(0, n));
      rest.remove_prefix(n);
      continue;
    }
    prompt.push_plain(rest.substr(0, open));
    switch (rest[open + 1]) {
      case 'D': prompt.push_special(kDsmlToken); break;
      case 'S': prompt.push_special(kThinkingStartToken); break;
      case 'E': prompt.push_special(kThinkingEndToken); break;
      case 'B': prompt.push_plain(block_name); break;
      case 'I': prompt.push_plain(invoke_name); break;
      case 'P': prompt.push_plain(parameter_name); break;
      default: prompt.push_plain(rest.substr(open, 3)); break;
    }
    rest.remove_prefix(open + 3);
  }
  return prompt;
}

nlohmann::ordered_json tool_definition_json(const Tool& tool) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["name"] = tool.name;
  out["description"] = tool.description.value_or("");
  out["parameters"] = tool.parameters;
  return out;
}

namespace {

// serde_json reads the integer `-0` as the float -0.0 (written "-0.0"); nlohmann reads it as 0. Spell such
// tokens "-0.0" before parsing so the value round-trips as DeepSeek's encoder writes it.
std::string negative_zero_as_float(const std::string& json) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    out += c;
    if (in_string) {
      if (c == '\\' && i + 1 < json.size()) {
        out += json[++i];
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '-' && i + 1 < json.size() && json[i + 1] == '0') {
      const char next = i + 2 < json.size() ? json[i + 2] : ' ';
      if (next != '.' && next != 'e' && next != 'E' && (next < '0' || next > '9')) {
        out += "0.0";
        ++i;
      }
    }
  }
  return out;
}

}  // namespace

nlohmann::ordered_json tool_call_arguments_object(const ToolCall& call) {
  nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(negative_zero_as_float(call.arguments), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) return parsed;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["arguments"] = call.arguments;
  return out;
}

bool renders_tool_prompt(const EncodeOptions& options) {
  return options.tool_choice != ToolChoice::kNone && !options.tools.empty();
}

bool is_prefix_continuation(const std::vector<Message>& messages) {
  return !messages.empty() && messages.back().role == ChatRole::kAssistant && messages.back().prefix;
}

std::string response_format_text(const nlohmann::ordered_json& schema, JsonStyle style) {
  return "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
         json_dump(schema, style);
}

bool task_token_due(const std::vector<Message>& messages, size_t index) {
  if (messages[index].task == ChatTask::kNone) return false;
  return index + 1 == messages.size() || messages[index + 1].role == ChatRole::kAssistant;
}

void push_task_tokens(EncodedPrompt& prompt, ChatTask task, bool thinking_mode) {
  if (task == ChatTask::kAction) {
    prompt.push_special(kAssistantToken);
    prompt.push_special(thinking_mode ? kThinkingStartToken : kThinkingEndToken);
  }
  prompt.push_special("<｜" + std::string(chat_task_name(task)) + "｜>");
}

bool merges_with_previous_user(const Message& previous, const Message& message) {
  return previous.role == ChatRole::kUser && message.role == ChatRole::kUser && previous.task == ChatTask::kNone &&
         message.task == ChatTask::kNone;
}

}  // namespace chat_detail
}  // namespace deepinfer
