// The V4.1 prompt (spec §8.4; deepseek-recipe DeepseekV41Encoding). Differences from V4: system messages
// stay in place behind <｜System｜>; in thinking mode message 0 opens with <｜System｜> and the numeric effort
// line; the tool prompt and response format are appended to the first system message; DSML tags carry a
// leading space (<｜DSML｜ calls>); JSON uses Python float spellings; tool results keep the preceding user
// turn open ("\n\n" instead of a new <｜User｜>) and are sorted by the order of the calls.
#include <algorithm>

#include "format/chat_encoding_internal.h"

namespace deepinfer::chat_detail {

namespace {

int effort_score(const EncodeOptions& options) {
  if (options.reasoning_effort_score != 0) return options.reasoning_effort_score;
  switch (options.reasoning_effort) {
    case ReasoningEffort::kLow: return 50;
    case ReasoningEffort::kMax: return 100;
    case ReasoningEffort::kDefault:
    case ReasoningEffort::kHigh:
    case ReasoningEffort::kXhigh: return 75;
  }
  return 75;
}

// Sorts, inside each run of user/tool messages, the results that carry a call id by the position of that id
// among the calls of the latest assistant message with calls (an unknown id counts as position 0). The
// sorted results take the slots of the results; other messages keep theirs.
void sort_tool_results_by_call_order(std::vector<Message>& messages) {
  std::vector<std::string> call_ids;
  size_t i = 0;
  while (i < messages.size()) {
    const Message& m = messages[i];
    if (m.role == ChatRole::kAssistant && m.tool_calls && !m.tool_calls->empty()) {
      call_ids.clear();
      for (const ToolCall& call : *m.tool_calls) call_ids.push_back(call.id);
      ++i;
    } else if (m.role == ChatRole::kUser || m.role == ChatRole::kTool) {
      const size_t begin = i;
      while (i < messages.size() && (messages[i].role == ChatRole::kUser || messages[i].role == ChatRole::kTool)) ++i;
      std::vector<size_t> slots;
      for (size_t j = begin; j < i; ++j) {
        if (messages[j].role == ChatRole::kTool && messages[j].tool_call_id) slots.push_back(j);
      }
      if (slots.size() < 2 || call_ids.empty()) continue;
      auto position = [&](const Message& result) {
        const auto it = std::find(call_ids.begin(), call_ids.end(), *result.tool_call_id);
        return it == call_ids.end() ? size_t{0} : static_cast<size_t>(it - call_ids.begin());
      };
      std::vector<Message> results;
      for (size_t slot : slots) results.push_back(std::move(messages[slot]));
      std::stable_sort(results.begin(), results.end(),
                       [&](const Message& a, const Message& b) { return position(a) < position(b); });
      for (size_t k = 0; k < slots.size(); ++k) messages[slots[k]] = std::move(results[k]);
    } else {
      ++i;
    }
  }
}

// Merges adjacent user messages with a blank line, keeps the first of adjacent latest reminders, and sorts
// tool results by call order.
std::vector<Message> normalize(const std::vector<Message>& messages) {
  std::vector<Message> out;
  for (const Message& m : messages) {
    if (!out.empty() && merges_with_previous_user(out.back(), m)) {
      out.back().content += "\n\n" + m.content;
    } else if (!out.empty() && out.back().role == ChatRole::kLatestReminder && m.role == ChatRole::kLatestReminder) {
      continue;
    } else {
      out.push_back(m);
    }
  }
  sort_tool_results_by_call_order(out);
  return out;
}

std::string tool_schemas(const std::vector<Tool>& tools, bool skip_deferred) {
  std::string out;
  bool first = true;
  for (const Tool& tool : tools) {
    if (skip_deferred && tool.defer_loading) continue;
    if (!first) out += "\n";
    first = false;
    out += json_dump(tool_definition_json(tool), JsonStyle::kPython);
  }
  return out;
}

EncodedPrompt tool_prompt(const std::vector<Tool>& tools) {
  EncodedPrompt prompt = tool_call_instructions(" calls", " invoke", " parameter");
  prompt.push_plain(tool_schemas(tools, /*skip_deferred=*/true));
  prompt.push_plain(
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
  return prompt;
}

EncodedPrompt render_tool_calls(const std::vector<ToolCall>& calls) {
  EncodedPrompt prompt;
  auto tag = [&](std::string_view opening, std::string_view rest) {
    prompt.push_plain(opening);
    prompt.push_special(kDsmlToken);
    prompt.push_plain(rest);
  };
  tag("\n\n<", " calls>\n");
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) prompt.push_plain("\n");
    tag("<", " invoke name=\"" + calls[i].name + "\">\n");
    const nlohmann::ordered_json arguments = tool_call_arguments_object(calls[i]);
    bool first = true;
    for (auto it = arguments.begin(); it != arguments.end(); ++it) {
      if (!first) prompt.push_plain("\n");
      first = false;
      const bool is_string = it.value().is_string();
      tag("<", " parameter name=\"" + it.key() + "\" string=\"" + (is_string ? "true" : "false") + "\">" +
                   (is_string ? it.value().get<std::string>() : json_dump(it.value(), JsonStyle::kPython)));
      tag("</", " parameter>");
    }
    tag("\n</", " invoke>");
  }
  tag("\n</", " calls>");
  return prompt;
}

}  // namespace

EncodedPrompt encode_chat_v41(const std::vector<Message>& input, const EncodeOptions& options) {
  std::vector<Message> messages = normalize(input);
  const bool with_tools = renders_tool_prompt(options);
  const ResponseFormat& format = options.response_format;
  std::optional<nlohmann::ordered_json> format_schema;
  if (format.kind == ResponseFormatKind::kJsonObject) format_schema = nlohmann::ordered_json{{"type", "json_object"}};
  if (format.kind == ResponseFormatKind::kJsonSchema) format_schema = format.schema;

  // The tool prompt and the response format extend the first system message (inserted empty if needed).
  EncodedPrompt first_system_suffix;
  if (with_tools || format_schema) {
    if (messages.empty() || messages.front().role != ChatRole::kSystem) {
      Message empty;
      empty.role = ChatRole::kSystem;
      messages.insert(messages.begin(), empty);
    }
    if (with_tools) {
      first_system_suffix.push_plain("\n\n");
      first_system_suffix.append(tool_prompt(options.tools));
    }
    if (format_schema) {
      first_system_suffix.push_plain("\n\n" + response_format_text(*format_schema, JsonStyle::kPython));
    }
  }
  const bool drop_thinking = !with_tools;  // earlier reasoning is rendered only with the tool prompt
  const bool thinking = options.thinking_mode;

  EncodedPrompt prompt;
  prompt.push_special(kBosToken);
  bool after_task = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (i == 0 && (thinking || m.role == ChatRole::kSystem)) prompt.push_special(kSystemToken);
    if (i == 0 && thinking) {
      prompt.push_plain("Reasoning Effort: " + std::to_string(effort_score(options)) +
                        " (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
    }
    const bool previous_is_user_or_tool =
        i > 0 && (messages[i - 1].role == ChatRole::kUser || messages[i - 1].role == ChatRole::kTool);
    auto user_or_separator = [&] {
      if (previous_is_user_or_tool) {
        prompt.push_plain("\n\n");
      } else {
        prompt.push_special(kUserToken);
      }
    };
    switch (m.role) {
      case ChatRole::kSystem:
        if (i > 0) prompt.push_special(kSystemToken);
        prompt.push_plain(m.content);
        if (i == 0) prompt.append(first_system_suffix);
        if (m.tools && !m.tools->empty()) {
          prompt.push_plain("\n\n### Updated Tool Schemas\n\n" + tool_schemas(*m.tools, /*skip_deferred=*/false));
        }
        break;
      case ChatRole::kUser:
        user_or_separator();
        prompt.push_plain(m.content);
        break;
      case ChatRole::kLatestReminder:
        prompt.push_special(kLatestReminderToken);
        prompt.push_plain(m.content);
        break;
      case ChatRole::kTool:
        user_or_separator();
        prompt.push_plain("<tool_result>" + m.content + "</tool_result>");
        break;
      case ChatRole::kAssistant: {
        EncodedPrompt calls;
        if (m.tool_calls && !m.tool_calls->empty()) calls = render_tool_calls(*m.tool_calls);
        if (!after_task) {
          const bool renders_reasoning = thinking && i > 0 && (!drop_thinking || m.prefix);
          EncodedPrompt reasoning;
          if (renders_reasoning) {
            if (m.reasoning_content) push_assistant_content(reasoning, *m.reasoning_content);
            if (!(m.prefix && m.content.empty() && calls.text.empty())) reasoning.push_special(kThinkingEndToken);
          }
          const bool opens_thinking = !reasoning.text.empty() || (renders_reasoning && m.prefix);
          prompt.push_special(kAssistantToken);
          prompt.push_special(opens_thinking ? kThinkingStartToken : kThinkingEndToken);
          prompt.append(reasoning);
        }
        push_assistant_content(prompt, m.content);
        prompt.append(calls);
        if (!m.prefix) prompt.push_special(kEosToken);
        break;
      }
    }
    after_task = m.role == ChatRole::kUser && task_token_due(messages, i);
    if (after_task) push_task_tokens(prompt, m.task, thinking);
  }
  if (!is_prefix_continuation(messages) && !after_task) {
    prompt.push_special(kAssistantToken);
    prompt.push_special(thinking ? kThinkingStartToken : kThinkingEndToken);
  }
  if (options.tool_choice == ToolChoice::kRequired && with_tools) {
    prompt.push_plain("\n\n<");
    prompt.push_special(kDsmlToken);
    prompt.push_plain(" calls>\n");
  }
  return prompt;
}

}  // namespace deepinfer::chat_detail
