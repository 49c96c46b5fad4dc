// The V4 prompt (spec §4.5; deepseek-recipe DeepseekV4Encoding). Layout: BOS, the effort prompt (thinking
// mode), every non-empty system message hoisted to the front and joined by blank lines (then the tool prompt
// and the response format as further system text), then the turns without a system token; tool results are
// user turns of <tool_result> blocks; DSML tags without a leading space.
#include <algorithm>

#include "format/chat_encoding_internal.h"

namespace deepinfer::chat_detail {

namespace {

constexpr std::string_view kEffortHigh =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

constexpr std::string_view kEffortMax =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

constexpr std::string_view kJsonObjectPrompt =
    "You are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY.";

// Sort key inside a tool-result range: tool results first, ordered by call id (absent id first), then the
// other messages in their original order.
bool tool_result_less(const Message& a, const Message& b) {
  const bool a_other = a.role != ChatRole::kTool;
  const bool b_other = b.role != ChatRole::kTool;
  if (a_other != b_other) return !a_other;
  if (a_other) return false;
  if (a.tool_call_id.has_value() != b.tool_call_id.has_value()) return !a.tool_call_id.has_value();
  return a.tool_call_id.has_value() && *a.tool_call_id < *b.tool_call_id;
}

// Hoists non-empty system messages, merges adjacent user messages (a blank line between non-empty
// contents), sorts each assistant's tool calls by id and the results that follow it by call id.
std::vector<Message> normalize(const std::vector<Message>& messages) {
  std::vector<Message> systems;
  std::vector<Message> others;
  for (const Message& m : messages) {
    if (m.role == ChatRole::kSystem) {
      if (!m.content.empty()) {
        Message system = m;
        system.tools.reset();  // V4 ignores per-message tools
        systems.push_back(std::move(system));
      }
    } else if (!others.empty() && merges_with_previous_user(others.back(), m)) {
      Message& previous = others.back();
      if (!m.content.empty()) {
        if (!previous.content.empty()) previous.content += "\n\n";
        previous.content += m.content;
      }
    } else {
      others.push_back(m);
    }
  }
  std::vector<std::pair<size_t, size_t>> result_ranges;  // [begin, end) after each assistant with calls
  for (size_t i = 0; i < others.size(); ++i) {
    Message& m = others[i];
    if (m.role != ChatRole::kAssistant || !m.tool_calls) continue;
    std::stable_sort(m.tool_calls->begin(), m.tool_calls->end(),
                     [](const ToolCall& a, const ToolCall& b) { return a.id < b.id; });
    if (!m.tool_calls->empty()) result_ranges.emplace_back(i + 1, i + 1 + m.tool_calls->size());
  }
  for (const auto& [begin, end] : result_ranges) {
    if (end > others.size()) continue;  // an incomplete set of results keeps its order
    std::stable_sort(others.begin() + static_cast<std::ptrdiff_t>(begin),
                     others.begin() + static_cast<std::ptrdiff_t>(end), tool_result_less);
  }
  systems.insert(systems.end(), std::make_move_iterator(others.begin()), std::make_move_iterator(others.end()));
  return systems;
}

EncodedPrompt tool_prompt(const std::vector<Tool>& tools) {
  EncodedPrompt prompt = tool_call_instructions("tool_calls", "invoke", "parameter");
  for (const Tool& tool : tools) {
    if (tool.defer_loading) continue;
    prompt.push_plain(json_dump(tool_definition_json(tool), JsonStyle::kSpaced));
    prompt.push_plain("\n");
  }
  prompt.push_plain(
      "\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
  return prompt;
}

void push_tool_calls(EncodedPrompt& prompt, const std::vector<ToolCall>& calls) {
  auto open = [&](std::string_view tag) {
    prompt.push_plain("<");
    prompt.push_special(kDsmlToken);
    prompt.push_plain(tag);
  };
  auto close = [&](std::string_view tag) {
    prompt.push_plain("</");
    prompt.push_special(kDsmlToken);
    prompt.push_plain(tag);
  };
  prompt.push_plain("\n\n");
  open("tool_calls>\n");
  for (const ToolCall& call : calls) {
    open("invoke name=\"" + call.name + "\">\n");
    const nlohmann::ordered_json arguments = tool_call_arguments_object(call);
    for (auto it = arguments.begin(); it != arguments.end(); ++it) {
      const bool is_string = it.value().is_string();
      open("parameter name=\"" + it.key() + "\" string=\"" + (is_string ? "true" : "false") + "\">" +
           (is_string ? it.value().get<std::string>() : json_dump(it.value(), JsonStyle::kSpaced)));
      close("parameter>\n");
    }
    close("invoke>\n");
  }
  close("tool_calls>");
}

}  // namespace

EncodedPrompt encode_chat_v4(const std::vector<Message>& input, const EncodeOptions& options) {
  std::vector<Message> messages = normalize(input);
  const bool with_tools = renders_tool_prompt(options);
  const ResponseFormat& format = options.response_format;
  std::optional<std::string> format_text;
  if (format.kind == ResponseFormatKind::kJsonObject) format_text = std::string(kJsonObjectPrompt);
  if (format.kind == ResponseFormatKind::kJsonSchema) {
    format_text = response_format_text(format.schema, JsonStyle::kSpaced);
  }

  // The tool prompt and the response format become system text after the leading system messages; a
  // conversation without one first gets an empty system message (so the text starts with a blank line).
  std::vector<std::pair<size_t, EncodedPrompt>> extra_systems;  // inserted before message index
  if (with_tools || format_text) {
    size_t index = 0;
    while (index < messages.size() && messages[index].role == ChatRole::kSystem) ++index;
    if (index == 0) {
      Message empty;
      empty.role = ChatRole::kSystem;
      messages.insert(messages.begin(), empty);
      index = 1;
    }
    if (with_tools) extra_systems.emplace_back(index, tool_prompt(options.tools));
    if (format_text) {
      EncodedPrompt text;
      text.push_plain(*format_text);
      extra_systems.emplace_back(index, std::move(text));
    }
  }
  const bool drop_thinking = !with_tools;  // earlier reasoning is rendered only with the tool prompt
  const bool thinking = options.thinking_mode;

  EncodedPrompt prompt;
  prompt.push_special(kBosToken);
  if (thinking) {
    switch (options.reasoning_effort) {
      case ReasoningEffort::kLow: break;
      case ReasoningEffort::kDefault:
      case ReasoningEffort::kHigh:
      case ReasoningEffort::kXhigh: prompt.push_plain(kEffortHigh); break;
      case ReasoningEffort::kMax: prompt.push_plain(kEffortMax); break;
    }
  }

  bool has_system = false;
  bool previous_is_user = false;
  bool previous_is_tool = false;
  bool after_task = false;
  const size_t n = messages.size();
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [index, text] : extra_systems) {
      if (index != i) continue;
      if (has_system) prompt.push_plain("\n\n");
      prompt.append(text);
      has_system = true;
    }
    const Message& m = messages[i];
    switch (m.role) {
      case ChatRole::kSystem:
        if (has_system) prompt.push_plain("\n\n");
        prompt.push_plain(m.content);
        has_system = true;
        break;
      case ChatRole::kUser:
        if (previous_is_user || previous_is_tool) {
          prompt.push_plain("\n\n");
        } else {
          prompt.push_special(kUserToken);
        }
        prompt.push_plain(m.content);
        break;
      case ChatRole::kAssistant:
        if (!after_task) {
          prompt.push_special(kAssistantToken);
          if (m.reasoning_content && (m.prefix || !drop_thinking)) {
            prompt.push_special(kThinkingStartToken);
            push_assistant_content(prompt, *m.reasoning_content);
          }
          if (!thinking || !m.prefix || !m.content.empty()) prompt.push_special(kThinkingEndToken);
        }
        push_assistant_content(prompt, m.content);
        if (m.tool_calls) push_tool_calls(prompt, *m.tool_calls);
        if (i + 1 < n || !m.prefix) prompt.push_special(kEosToken);
        break;
      case ChatRole::kTool:
        if (previous_is_tool) {
          prompt.push_plain("\n\n");
        } else {
          prompt.push_special(kUserToken);
        }
        prompt.push_plain("<tool_result>" + m.content + "</tool_result>");
        break;
      case ChatRole::kLatestReminder:
        prompt.push_special(kLatestReminderToken);
        prompt.push_plain(m.content);
        break;
    }
    after_task = m.role == ChatRole::kUser && task_token_due(messages, i);
    if (after_task) push_task_tokens(prompt, m.task, thinking);
    previous_is_user = m.role == ChatRole::kUser;
    previous_is_tool = m.role == ChatRole::kTool;
  }
  // Extra system text after the last message (a conversation of system messages only).
  for (const auto& [index, text] : extra_systems) {
    if (index != n) continue;
    if (has_system) prompt.push_plain("\n\n");
    prompt.append(text);
    has_system = true;
  }
  if (!is_prefix_continuation(messages) && !after_task) {
    prompt.push_special(kAssistantToken);
    prompt.push_special(thinking ? kThinkingStartToken : kThinkingEndToken);
  }
  if (options.tool_choice == ToolChoice::kRequired && with_tools) {
    prompt.push_plain("\n\n<");
    prompt.push_special(kDsmlToken);
    prompt.push_plain("tool_calls>\n");
  }
  return prompt;
}

}  // namespace deepinfer::chat_detail
