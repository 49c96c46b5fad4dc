// Pieces shared by the V4 and V4.1 renderers (chat_encoding_v4.cpp, chat_encoding_v41.cpp). Internal to
// src/format: nothing outside the chat encoding includes this. Inputs are already validated by encode_chat.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/chat_encoding.h"
#include "format/json_text.h"

namespace deepinfer::chat_detail {

// Appends assistant content or reasoning: the grounding tokens (<｜ref｜>, <｜/box｜>, ...) in it are explicit
// special tokens, everything else (including other special-token spellings) is plain text.
void push_assistant_content(EncodedPrompt& prompt, std::string_view content);

// The "## Tools" instructions up to and including "### Available Tool Schemas\n\n", with the version's
// DSML tag names (V4: "tool_calls", "invoke", "parameter"; V4.1: " calls", " invoke", " parameter").
EncodedPrompt tool_call_instructions(std::string_view block_name, std::string_view invoke_name,
                                     std::string_view parameter_name);

// {"name": ..., "description": description or "", "parameters": ...}: the object the tool prompt lists.
nlohmann::ordered_json tool_definition_json(const Tool& tool);

// The arguments object whose entries become DSML parameters; arguments that are not a JSON object become
// {"arguments": <the original text>}.
nlohmann::ordered_json tool_call_arguments_object(const ToolCall& call);

// True when the tool prompt is rendered: tools defined and tool_choice is not kNone. Earlier reasoning is
// kept exactly when it is.
bool renders_tool_prompt(const EncodeOptions& options);

// True when the last message is an assistant message with prefix set (the prompt continues it).
bool is_prefix_continuation(const std::vector<Message>& messages);

// The "## Response Format" text for a JSON schema, in the version's JSON style.
std::string response_format_text(const nlohmann::ordered_json& schema, JsonStyle style);

// Task tokens: due when message `index` carries a task and is last or directly followed by an assistant
// message (encoding_dsv4.py's rule). The following assistant message then has no header and no thinking.
bool task_token_due(const std::vector<Message>& messages, size_t index);
void push_task_tokens(EncodedPrompt& prompt, ChatTask task, bool thinking_mode);

// Two user messages merge into one (both versions) unless either carries a task.
bool merges_with_previous_user(const Message& previous, const Message& message);

EncodedPrompt encode_chat_v4(const std::vector<Message>& messages, const EncodeOptions& options);
EncodedPrompt encode_chat_v41(const std::vector<Message>& messages, const EncodeOptions& options);

}  // namespace deepinfer::chat_detail
