// Chat encoding for DeepSeek V4 and V4.1: a conversation (messages + options) → the exact prompt string
// DeepSeek's own encoder (deepseek-recipe 0.2.0, DeepseekV4Encoding / DeepseekV41Encoding) renders, plus the
// byte ranges that are explicit special tokens (text outside them is encoded without the added vocabulary,
// so a special-token spelling typed by a user stays plain text). Spec §4.5 (V4) and §8.4 (V4.1).
// Owns the data model and the renderers; it does not tokenize, read files, or parse model output
// (output_parser.h). Invariant: rendering is a pure function of (messages, options).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace deepinfer {

enum class ChatModelVersion { kV4, kV41 };

enum class ChatRole { kSystem, kUser, kAssistant, kTool, kLatestReminder };

// Quick-instruction task tokens (encoding_dsv4.py; deepseek-recipe has none). A user message with a task
// ends with the task token instead of the assistant header (`action` adds the header first).
enum class ChatTask { kNone, kAction, kQuery, kAuthority, kDomain, kTitle, kReadUrl };

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text; a non-object becomes one string parameter named "arguments"
};

struct Tool {
  std::string name;
  std::optional<std::string> description;
  nlohmann::ordered_json parameters;  // JSON Schema, rendered as written (null when absent)
  bool defer_loading = false;         // left out of the tool prompt
};

struct Message {
  ChatRole role = ChatRole::kUser;
  std::string content;
  std::optional<std::string> reasoning_content;    // assistant; absent ≠ empty in V4 (`<think>` only if set)
  std::optional<std::vector<ToolCall>> tool_calls;  // assistant; V4 renders an empty list as an empty block
  std::optional<std::string> tool_call_id;         // tool result: which call it answers (sort key)
  std::optional<std::vector<Tool>> tools;          // system, V4.1 only: "### Updated Tool Schemas"
  bool prefix = false;                             // assistant: continue this message instead of a new turn
  ChatTask task = ChatTask::kNone;                 // user only
};

enum class ToolChoice { kAuto, kNone, kRequired };

// deepseek-recipe's effort levels. kDefault renders as kHigh. V4: kLow writes no effort prompt, kHigh/kXhigh
// the "Absolute maximum" prompt, kMax the "Beyond maximum" prompt. V4.1: low 50, high/xhigh 75, max 100.
enum class ReasoningEffort { kDefault, kLow, kHigh, kXhigh, kMax };

enum class ResponseFormatKind { kText, kJsonObject, kJsonSchema, kRegex };

struct ResponseFormat {
  ResponseFormatKind kind = ResponseFormatKind::kText;
  nlohmann::ordered_json schema;  // kJsonSchema
  std::string regex;              // kRegex (never rendered)
};

struct EncodeOptions {
  ChatModelVersion version = ChatModelVersion::kV41;
  bool thinking_mode = true;
  std::vector<Tool> tools;  // the tool prompt is rendered when tools is non-empty and tool_choice != kNone
  ToolChoice tool_choice = ToolChoice::kAuto;
  ReasoningEffort reasoning_effort = ReasoningEffort::kDefault;
  int reasoning_effort_score = 0;  // V4.1 only: 1..100 overrides reasoning_effort; 0 = unset
  ResponseFormat response_format;
};

struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const ByteRange&) const = default;
};

// Prompt text plus the ascending, disjoint byte ranges of explicit special tokens.
struct EncodedPrompt {
  std::string text;
  std::vector<ByteRange> special_ranges;

  void push_plain(std::string_view plain) { text += plain; }
  void push_special(std::string_view token) {
    special_ranges.push_back({text.size(), text.size() + token.size()});
    text += token;
  }
  void append(const EncodedPrompt& other) {
    const size_t offset = text.size();
    text += other.text;
    for (const ByteRange& r : other.special_ranges) special_ranges.push_back({r.begin + offset, r.end + offset});
  }
};

// Special-token spellings shared by V4 and V4.1 (deepseek-recipe defaults; spec §4.5, §8.4).
inline constexpr std::string_view kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkingStartToken = "<think>";
inline constexpr std::string_view kThinkingEndToken = "</think>";
inline constexpr std::string_view kSystemToken = "<｜System｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kDsmlToken = "｜DSML｜";

// Renders the conversation. Fails (naming the field) on inconsistent input: a task on a non-user message,
// an effort score outside 1..100 or given for V4, tools on a non-system message.
Result<EncodedPrompt> encode_chat(const std::vector<Message>& messages, const EncodeOptions& options);

std::string_view chat_task_name(ChatTask task);             // "action", ...; "" for kNone
std::optional<ChatTask> chat_task_from_name(std::string_view name);

}  // namespace deepinfer
