// Streaming parser of DeepSeek V4 / V4.1 model output: text chunks in → events out (reasoning delta, content
// delta, tool call start / arguments delta / end, warnings, finish). Well-formed output is split exactly as
// deepseek-recipe's stream processor splits it: reasoning up to `\n*</think>`, content with leading newlines
// dropped, `\n*<｜DSML｜` opening a tool-call block (either tag flavour: `tool_calls`/`invoke`/`parameter` or
// ` calls`/` invoke`/` parameter`), DSML parameters turned into OpenAI JSON arguments (string="true" values
// JSON-escaped inside quotes, string="false" values raw), stop sequences matched in content only.
// Beyond deepseek-recipe: the EOS spelling ends the output (outside parameter values); tool-call markup is
// checked tag by tag, and markup that does not parse degrades to plain text with a warning event (an open call
// is closed first, so every emitted argument string is valid JSON); a string="false" value that is not JSON
// becomes a JSON string; a call cut off by the end of the stream is closed (deepseek-recipe leaves it open).
// Invariants: the merged event sequence is the same for every chunking of the same bytes (decisions are made
// byte by byte); delta texts never end inside a UTF-8 sequence until finish(); nothing throws.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/chat_encoding.h"

namespace deepinfer {

enum class OutputEventKind {
  kReasoning,          // text: reasoning delta
  kContent,            // text: answer content delta
  kToolCallStart,      // tool_call_index, tool_call_id, tool_name
  kToolCallArguments,  // tool_call_index, text: a piece of the JSON arguments
  kToolCallEnd,        // tool_call_index
  kWarning,            // text: what was malformed and what was done with it
  kFinish,             // finish_reason, text: the matched stop sequence (kStopSequence)
};

enum class FinishReason { kStop, kLength, kToolCalls, kStopSequence, kContentFilter, kEndOfStream };

// Why the generator stopped, as told to finish(). kEos: it sampled EOS (or hit a stop token id).
enum class StreamEnd { kEos, kLength, kContentFilter, kUnknown };

// Where the output starts: right after the prompt's `<think>` (kReasoning, leading newlines dropped), in a
// prefix continuation of reasoning or content (leading newlines kept), after `</think>` (kContent, leading
// newlines dropped), or inside the tool-call block a required tool choice opened (kToolCalls).
enum class ParserStart { kReasoning, kReasoningContinuation, kContent, kContentContinuation, kToolCalls };

struct OutputEvent {
  OutputEventKind kind = OutputEventKind::kContent;
  std::string text;
  int tool_call_index = -1;
  std::string tool_call_id;
  std::string tool_name;
  FinishReason finish_reason = FinishReason::kStop;
};

struct OutputParserOptions {
  ParserStart start = ParserStart::kReasoning;
  bool parse_tool_calls = true;             // false: DSML is plain content
  std::vector<std::string> stop_sequences;  // matched in content only; empty ones are ignored
  std::string tool_call_id_prefix = "call_";  // id = prefix + two-digit call index
};

// The parser options that match an encoded request (deepseek-recipe's rules): tool calls parsed when the tool
// prompt was rendered; the start follows thinking mode, a final prefix message and tool_choice=required.
OutputParserOptions output_parser_options_for(const std::vector<Message>& messages, const EncodeOptions& options,
                                              std::vector<std::string> stop_sequences);

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // Appends the events the chunk completes. After a finish event, input is ignored.
  void feed(std::string_view chunk, std::vector<OutputEvent>& events);
  // Ends the stream: flushes held-back text, closes what is open and appends the finish event (once).
  void finish(StreamEnd end, std::vector<OutputEvent>& events);
  bool finished() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The whole message, accumulated from events (what a non-streaming response returns).
struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  std::optional<FinishReason> finish_reason;
  std::string stop_sequence;
  std::vector<std::string> warnings;
};

void accumulate_event(const OutputEvent& event, ParsedOutput& out);
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "tool_calls", ...

}  // namespace deepinfer
