// OpenAI-style chat request JSON → the chat-encoding data model (chat_encoding.h). Accepts the Chat
// Completions shape DeepSeek's API takes (messages with string or text-part content, tool_calls with JSON
// argument strings, role "tool" with tool_call_id, role "latest_reminder", "thinking", "reasoning_effort",
// "tools", "tool_choice", "response_format", "stop") plus this project's extensions: "version" ("v4" |
// "v4.1"), "thinking_mode" (bool), a numeric V4.1 "reasoning_effort" (1..100), role "developer" (rendered
// as a user turn, as encoding_dsv4.py does), "task" on user messages, "tools" on system messages (V4.1) and
// "defer_loading" on tools. Errors name the JSON path. Never throws.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "format/chat_encoding.h"

namespace deepinfer {

struct ChatRequest {
  std::vector<Message> messages;
  EncodeOptions options;
  std::vector<std::string> stop;  // stop sequences for the output parser
};

struct ChatRequestJsonOptions {
  ChatModelVersion default_version = ChatModelVersion::kV41;
  bool default_thinking_mode = true;
  // Apply what DeepSeek's API conversion does before rendering: drop system messages with empty content,
  // clear reasoning_content outside thinking mode and fill a missing one with "" in thinking mode, default
  // absent tool parameters to {}, treat a tool choice without tools as "auto", reject a required or named
  // tool choice in thinking mode. Off: the request is taken exactly as written (absent stays absent).
  bool api_normalization = true;
};

Result<ChatRequest> chat_request_from_json(const nlohmann::ordered_json& request,
                                          const ChatRequestJsonOptions& options);
Result<ChatRequest> chat_request_from_json_text(std::string_view text, const ChatRequestJsonOptions& options);

}  // namespace deepinfer
