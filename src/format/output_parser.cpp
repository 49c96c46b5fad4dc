// Streaming output parser (see output_parser.h). Two layers, both fed one byte at a time:
//  - text stages (reasoning, content, after the tool-call block): a MarkerSet (stream_match.h) matched in
//    priority order, the first marker to complete wins, and bytes that may still start a marker are held
//    back (the matching rules of deepseek-recipe's stream parser: `\n*</think>`, `\n*<｜DSML｜`, stop
//    sequences, a leading newline);
//  - the tool-call block: a tag-by-tag grammar with commit points (call start, string parameter start, each
//    parameter and call end). Bytes since the last commit point are kept; when the markup stops parsing they
//    are replayed as content (or as the stage the block interrupted, if nothing of it was committed).
#include "format/output_parser.h"

#include <algorithm>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "format/chat_encoding_internal.h"
#include "format/json_text.h"
#include "format/stream_match.h"

namespace deepinfer {

namespace {

using stream_match::MarkerKind;
using stream_match::MarkerSet;
using stream_match::TagMatcher;
using stream_match::TagSpelling;

constexpr std::string_view kDsmlOpenMarker = "<｜DSML｜";
constexpr std::string_view kDsmlCloseMarker = "</｜DSML｜";

bool is_space(unsigned char b) { return b == ' ' || b == '\n' || b == '\r' || b == '\t'; }

// Length of the longest prefix of `text` that does not end inside a UTF-8 sequence that may still complete.
size_t complete_utf8_prefix(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(text[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    size_t need = 0;
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) need = 3;
    else if (b >= 0xF0 && b <= 0xF4) need = 4;
    return need > back ? n - back : n;
  }
  return n;
}

// ---- tags inside the tool-call block --------------------------------------------------------------------

enum TagId : int {
  kBlockOpen, kBlockClose, kInvokeOpen, kInvokeClose, kParamOpenString, kParamOpenRaw, kParamClose, kTagEos,
};

// Both tag flavours: V4 `<｜DSML｜invoke` and V4.1 `<｜DSML｜ invoke`.
constexpr std::string_view kTagSpacings[] = {"", " "};

std::vector<TagSpelling> block_open_tags() {  // after `<｜DSML｜`
  std::vector<TagSpelling> alts;
  for (std::string_view sp : kTagSpacings) {
    alts.push_back(stream_match::literal_tag(std::string(sp) + "tool_calls>", kBlockOpen));
    alts.push_back(stream_match::literal_tag(std::string(sp) + "calls>", kBlockOpen));
  }
  return alts;
}

std::vector<TagSpelling> between_calls_tags() {  // from '<'
  std::vector<TagSpelling> alts;
  for (std::string_view sp : kTagSpacings) {
    alts.push_back(stream_match::captured_tag(std::string(kDsmlOpenMarker) + std::string(sp) + "invoke name=\"", "\">",
                                kInvokeOpen));
    const std::string close = std::string(kDsmlCloseMarker) + std::string(sp);
    alts.push_back(stream_match::literal_tag(close + "tool_calls>", kBlockClose));
    alts.push_back(stream_match::literal_tag(close + "calls>", kBlockClose));
  }
  alts.push_back(stream_match::literal_tag(std::string(kEosToken), kTagEos));
  return alts;
}

std::vector<TagSpelling> in_invoke_tags() {  // from '<'
  std::vector<TagSpelling> alts;
  for (std::string_view sp : kTagSpacings) {
    const std::string open = std::string(kDsmlOpenMarker) + std::string(sp) + "parameter name=\"";
    alts.push_back(stream_match::captured_tag(open, "\" string=\"true\">", kParamOpenString));
    alts.push_back(stream_match::captured_tag(open, "\" string=\"false\">", kParamOpenRaw));
    alts.push_back(stream_match::literal_tag(std::string(kDsmlCloseMarker) + std::string(sp) + "invoke>",
                                             kInvokeClose));
  }
  alts.push_back(stream_match::literal_tag(std::string(kEosToken), kTagEos));
  return alts;
}

std::vector<TagSpelling> param_close_tags() {  // after `</｜DSML｜`
  std::vector<TagSpelling> alts;
  for (std::string_view sp : kTagSpacings) {
    alts.push_back(stream_match::literal_tag(std::string(sp) + "parameter>", kParamClose));
  }
  return alts;
}

// ---- event emission: coalesces deltas of one kind, holds back an incomplete UTF-8 tail ---------------------

class Emitter {
 public:
  void bind(std::vector<OutputEvent>* events) { events_ = events; }

  void text(OutputEventKind kind, int index, std::string_view bytes) {
    if (bytes.empty()) return;
    if (!pending_.empty() && (kind != kind_ || index != index_)) flush(/*all=*/true);
    kind_ = kind;
    index_ = index;
    pending_ += bytes;
  }
  void event(OutputEvent event) {
    flush(/*all=*/true);
    events_->push_back(std::move(event));
  }
  void flush(bool all) {
    if (pending_.empty()) return;
    const size_t n = all ? pending_.size() : complete_utf8_prefix(pending_);
    if (n == 0) return;
    OutputEvent e;
    e.kind = kind_;
    e.tool_call_index = index_;
    e.text = pending_.substr(0, n);
    events_->push_back(std::move(e));
    pending_.erase(0, n);
  }

 private:
  std::vector<OutputEvent>* events_ = nullptr;
  OutputEventKind kind_ = OutputEventKind::kContent;
  int index_ = -1;
  std::string pending_;
};

// Marker ids of the text stages; stop sequences use their index (>= 0).
constexpr int kMarkerDsmlOpen = -1;
constexpr int kMarkerLeadingNewline = -2;
constexpr int kMarkerThinkingEnd = -3;
constexpr int kMarkerEos = -4;
constexpr int kMarkerValueEnd = -5;

}  // namespace

struct OutputParser::Impl {
  enum class Mode { kText, kBlock, kAfterBlock, kDone };
  enum class Block { kOpenTag, kBetweenCalls, kBetweenCallsTag, kInInvoke, kInInvokeTag, kValue, kValueClose };

  OutputParserOptions options;
  Emitter out;
  Mode mode = Mode::kText;

  // Input not yet consumed (a failed block pushes its bytes back in front).
  std::string queue;
  size_t queue_pos = 0;

  // Text stages (also the parameter value and after-block stages use markers/buffered).
  bool reasoning_stage = false;
  MarkerSet markers;
  std::string buffered;

  // Tool-call block.
  Block block = Block::kOpenTag;
  TagMatcher tag;
  std::string uncommitted;  // raw bytes since the last commit point
  size_t opening_len = 0;   // bytes of `\n*<｜DSML｜` at the front of `uncommitted` (nothing committed yet)
  bool origin_reasoning = false;
  bool block_has_call = false;
  bool call_open = false;
  bool in_string_value = false;
  bool value_is_string = false;
  int n_calls = 0;
  int n_params = 0;
  std::vector<std::string> keys;
  std::string raw_key;
  std::string raw_value;

  bool warned_after_block = false;
  bool had_tool_calls = false;

  explicit Impl(OutputParserOptions o) : options(std::move(o)) {
    std::erase_if(options.stop_sequences, [](const std::string& s) { return s.empty(); });
    switch (options.start) {
      case ParserStart::kReasoning: enter_text(true, true); break;
      case ParserStart::kReasoningContinuation: enter_text(true, false); break;
      case ParserStart::kContent: enter_text(false, true); break;
      case ParserStart::kContentContinuation: enter_text(false, false); break;
      case ParserStart::kToolCalls:
        enter_block(/*origin_reasoning=*/false, "");
        block = Block::kBetweenCalls;
        break;
    }
  }

  // ---- stage changes

  void enter_text(bool reasoning, bool strip_leading_newlines) {
    mode = Mode::kText;
    reasoning_stage = reasoning;
    markers.clear();
    buffered.clear();
    if (!reasoning) {
      for (size_t i = 0; i < options.stop_sequences.size(); ++i) {
        markers.add(MarkerKind::kLiteral, options.stop_sequences[i], static_cast<int>(i));
      }
    }
    if (options.parse_tool_calls) markers.add(MarkerKind::kAfterNewlines, kDsmlOpenMarker, kMarkerDsmlOpen);
    if (strip_leading_newlines) markers.add(MarkerKind::kLeadingNewline, "", kMarkerLeadingNewline);
    markers.add(reasoning ? MarkerKind::kAfterNewlines : MarkerKind::kLiteral, kThinkingEndToken, kMarkerThinkingEnd);
    markers.add(MarkerKind::kLiteral, kEosToken, kMarkerEos);
  }

  void enter_block(bool from_reasoning, std::string opening) {
    mode = Mode::kBlock;
    block = Block::kOpenTag;
    tag.reset(block_open_tags());
    uncommitted = std::move(opening);
    opening_len = uncommitted.size();
    origin_reasoning = from_reasoning;
    block_has_call = false;
    buffered.clear();
  }

  void enter_after_block() {
    mode = Mode::kAfterBlock;
    markers.clear();
    buffered.clear();
    markers.add(MarkerKind::kLiteral, kEosToken, kMarkerEos);
  }

  void enter_value(bool is_string) {
    block = Block::kValue;
    value_is_string = is_string;
    in_string_value = is_string;
    markers.clear();
    buffered.clear();
    markers.add(MarkerKind::kLiteral, kDsmlCloseMarker, kMarkerValueEnd);  // EOS spelled in a value is value text
  }

  // ---- emission helpers

  void emit_stage_text(std::string_view text) {
    out.text(reasoning_stage ? OutputEventKind::kReasoning : OutputEventKind::kContent, -1, text);
  }
  void emit_arguments(std::string_view text) { out.text(OutputEventKind::kToolCallArguments, n_calls - 1, text); }
  void warn(std::string message) {
    OutputEvent e;
    e.kind = OutputEventKind::kWarning;
    e.text = std::move(message);
    out.event(std::move(e));
  }
  void emit_ignored(std::string_view text) {
    if (warned_after_block) return;
    if (std::any_of(text.begin(), text.end(), [](char c) { return !is_space(static_cast<unsigned char>(c)); })) {
      warned_after_block = true;
      warn("text after the tool-call block was ignored");
    }
  }
  void emit_value_text(std::string_view text) {
    if (value_is_string) {
      std::string escaped;
      json_escape_append(escaped, text);
      emit_arguments(escaped);
    } else {
      raw_value += text;
    }
  }

  void finish_now(FinishReason reason, std::string stop_sequence = "") {
    OutputEvent e;
    e.kind = OutputEventKind::kFinish;
    e.finish_reason = reason;
    e.text = std::move(stop_sequence);
    out.event(std::move(e));
    mode = Mode::kDone;
  }
  FinishReason reason_for(StreamEnd end) const {
    switch (end) {
      case StreamEnd::kEos: return had_tool_calls ? FinishReason::kToolCalls : FinishReason::kStop;
      case StreamEnd::kLength: return FinishReason::kLength;
      case StreamEnd::kContentFilter: return FinishReason::kContentFilter;
      case StreamEnd::kUnknown: return FinishReason::kEndOfStream;
    }
    return FinishReason::kEndOfStream;
  }

  // ---- tool calls

  void start_call(const std::string& name) {
    OutputEvent e;
    e.kind = OutputEventKind::kToolCallStart;
    e.tool_call_index = n_calls;
    e.tool_call_id = options.tool_call_id_prefix + (n_calls < 10 ? "0" : "") + std::to_string(n_calls);
    e.tool_name = name;
    out.event(std::move(e));
    ++n_calls;
    call_open = true;
    block_has_call = true;
    had_tool_calls = true;
    n_params = 0;
    keys.clear();
  }

  void end_call() {
    if (in_string_value) emit_arguments("\"");
    in_string_value = false;
    emit_arguments(n_params == 0 ? "{}" : "}");
    OutputEvent e;
    e.kind = OutputEventKind::kToolCallEnd;
    e.tool_call_index = n_calls - 1;
    out.event(std::move(e));
    call_open = false;
  }

  void open_parameter(const std::string& key, std::string_view value_prefix) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      warn("tool call " + std::to_string(n_calls - 1) + ": parameter '" + key + "' given twice");
    }
    keys.push_back(key);
    std::string text = n_params == 0 ? "{\"" : ", \"";
    json_escape_append(text, key);
    text += "\": ";
    text += value_prefix;
    emit_arguments(text);
    ++n_params;
  }

  void close_raw_parameter() {
    if (nlohmann::json::accept(raw_value)) {
      open_parameter(raw_key, raw_value);
    } else {
      warn("tool call " + std::to_string(n_calls - 1) + ": parameter '" + raw_key +
           "' is marked string=\"false\" but is not JSON; passed as a string");
      std::string quoted = "\"";
      json_escape_append(quoted, raw_value);
      quoted += "\"";
      open_parameter(raw_key, quoted);
    }
    raw_value.clear();
  }

  // Markup that does not parse: replay the uncommitted bytes as text.
  void fail_block(const std::string& reason) {
    std::string replay;
    if (!block_has_call) {
      warn("malformed tool-call markup (" + reason + "); kept as text");
      const std::string opening = uncommitted.substr(0, opening_len);
      replay = uncommitted.substr(opening_len);
      enter_text(origin_reasoning, /*strip_leading_newlines=*/false);
      emit_stage_text(opening);
    } else {
      warn("malformed tool-call markup (" + reason + "); the rest is kept as content");
      if (call_open) end_call();
      enter_text(/*reasoning=*/false, /*strip_leading_newlines=*/false);
      replay = uncommitted;
    }
    uncommitted.clear();
    queue = replay + queue.substr(queue_pos);
    queue_pos = 0;
  }

  // The stream ends (EOS or finish) inside a block that has committed calls.
  void end_in_block(StreamEnd end) {
    if (call_open) {
      if (block == Block::kValue && !value_is_string) raw_value.clear();
      warn("tool call " + std::to_string(n_calls - 1) + " was cut off; its arguments were closed");
      end_call();
    } else {
      warn("the tool-call block was not closed");
    }
    uncommitted.clear();
    finish_now(reason_for(end));
  }

  void on_tag(TagId id) {
    switch (id) {
      case kBlockOpen: block = Block::kBetweenCalls; break;
      case kInvokeOpen:
        start_call(tag.captured());
        uncommitted.clear();
        block = Block::kInInvoke;
        break;
      case kBlockClose:
        uncommitted.clear();
        enter_after_block();
        break;
      case kInvokeClose:
        end_call();
        uncommitted.clear();
        block = Block::kBetweenCalls;
        break;
      case kParamOpenString:
        open_parameter(tag.captured(), "\"");
        uncommitted.clear();
        enter_value(/*is_string=*/true);
        break;
      case kParamOpenRaw:
        raw_key = tag.captured();
        raw_value.clear();
        enter_value(/*is_string=*/false);
        break;
      case kParamClose:
        if (value_is_string) {
          emit_arguments("\"");
          in_string_value = false;
        } else {
          close_raw_parameter();
        }
        uncommitted.clear();
        block = Block::kInInvoke;
        break;
      case kTagEos:
        if (!block_has_call) {
          fail_block("end of sentence before the first call");
        } else {
          end_in_block(StreamEnd::kEos);
        }
        break;
    }
  }

  // ---- per-byte processing

  void text_byte(unsigned char b) {
    buffered += static_cast<char>(b);
    const std::optional<MarkerSet::Hit> hit = markers.feed(b);
    if (!hit) return;
    const std::string matched = buffered.substr(buffered.size() - hit->len);
    buffered.resize(buffered.size() - hit->len);
    if (mode == Mode::kAfterBlock) {
      emit_ignored(buffered);
    } else {
      emit_stage_text(buffered);
    }
    buffered.clear();
    if (hit->id >= 0) {
      finish_now(FinishReason::kStopSequence, matched);
      return;
    }
    switch (hit->id) {
      case kMarkerDsmlOpen: enter_block(reasoning_stage, matched); break;
      case kMarkerLeadingNewline: enter_text(reasoning_stage, /*strip_leading_newlines=*/true); break;
      case kMarkerThinkingEnd:
        if (!reasoning_stage) warn("</think> outside reasoning was dropped");
        enter_text(/*reasoning=*/false, /*strip_leading_newlines=*/reasoning_stage);
        break;
      case kMarkerEos: finish_now(reason_for(StreamEnd::kEos)); break;
      default: break;
    }
  }

  void tag_byte(unsigned char b, const char* what) {
    switch (tag.feed(b)) {
      case TagMatcher::Step::kPending: break;
      case TagMatcher::Step::kMatched: on_tag(static_cast<TagId>(tag.matched_id())); break;
      case TagMatcher::Step::kFailed: fail_block(std::string("bad ") + what); break;
    }
  }

  void value_byte(unsigned char b) {
    if (!value_is_string) uncommitted += static_cast<char>(b);
    buffered += static_cast<char>(b);
    const std::optional<MarkerSet::Hit> hit = markers.feed(b);
    if (!hit) return;
    const std::string matched = buffered.substr(buffered.size() - hit->len);
    emit_value_text(std::string_view(buffered).substr(0, buffered.size() - hit->len));
    buffered.clear();
    if (value_is_string) uncommitted = matched;
    block = Block::kValueClose;
    tag.reset(param_close_tags());
  }

  void block_byte(unsigned char b) {
    if (block == Block::kValue) {
      value_byte(b);
      return;
    }
    uncommitted += static_cast<char>(b);
    switch (block) {
      case Block::kOpenTag: tag_byte(b, "tool-call block tag"); break;
      case Block::kBetweenCalls:
      case Block::kInInvoke:
        if (is_space(b)) break;
        if (b != '<') {
          fail_block("text between tool-call tags");
          break;
        }
        tag.reset(block == Block::kBetweenCalls ? between_calls_tags() : in_invoke_tags());
        block = block == Block::kBetweenCalls ? Block::kBetweenCallsTag : Block::kInInvokeTag;
        tag_byte(b, "tag");
        break;
      case Block::kBetweenCallsTag: tag_byte(b, "tag between calls"); break;
      case Block::kInInvokeTag: tag_byte(b, "tag inside a call"); break;
      case Block::kValueClose: tag_byte(b, "parameter end tag"); break;
      case Block::kValue: break;
    }
  }

  void run_queue() {
    while (queue_pos < queue.size() && mode != Mode::kDone) {
      const auto b = static_cast<unsigned char>(queue[queue_pos++]);
      if (mode == Mode::kBlock) {
        block_byte(b);
      } else {
        text_byte(b);
      }
    }
    queue.clear();
    queue_pos = 0;
  }

  // Emits what can no longer become part of a marker.
  void flush_resolved() {
    if (mode == Mode::kDone) return;
    const bool scanning =
        mode == Mode::kText || mode == Mode::kAfterBlock || (mode == Mode::kBlock && block == Block::kValue);
    if (scanning) {
      const size_t n = buffered.size() - std::min(buffered.size(), markers.longest_partial());
      const std::string_view resolved = std::string_view(buffered).substr(0, n);
      if (mode == Mode::kText) emit_stage_text(resolved);
      if (mode == Mode::kAfterBlock) emit_ignored(resolved);
      if (mode == Mode::kBlock) emit_value_text(resolved);
      buffered.erase(0, n);
    }
    out.flush(/*all=*/false);
  }

  void feed(std::string_view chunk) {
    if (mode == Mode::kDone) return;
    queue.append(chunk);
    run_queue();
    flush_resolved();
  }

  void finish(StreamEnd end) {
    while (mode != Mode::kDone) {
      run_queue();
      if (mode == Mode::kDone) break;
      if (mode == Mode::kBlock && !block_has_call) {
        fail_block("the output ended inside it");  // replays the bytes as text, then loop
        continue;
      }
      if (mode == Mode::kText) {
        emit_stage_text(buffered);
      } else if (mode == Mode::kAfterBlock) {
        emit_ignored(buffered);
      } else if (block == Block::kValue && value_is_string) {
        emit_value_text(buffered);  // held-back bytes were value text after all
      }
      buffered.clear();
      if (mode == Mode::kBlock) {
        end_in_block(end);
      } else {
        finish_now(reason_for(end));
      }
    }
    out.flush(/*all=*/true);
  }
};

OutputParser::OutputParser(OutputParserOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

void OutputParser::feed(std::string_view chunk, std::vector<OutputEvent>& events) {
  impl_->out.bind(&events);
  impl_->feed(chunk);
}

void OutputParser::finish(StreamEnd end, std::vector<OutputEvent>& events) {
  impl_->out.bind(&events);
  impl_->finish(end);
}

bool OutputParser::finished() const { return impl_->mode == Impl::Mode::kDone; }

OutputParserOptions output_parser_options_for(const std::vector<Message>& messages, const EncodeOptions& options,
                                              std::vector<std::string> stop_sequences) {
  OutputParserOptions out;
  out.parse_tool_calls = chat_detail::renders_tool_prompt(options);
  out.stop_sequences = std::move(stop_sequences);
  const Message* last = messages.empty() ? nullptr : &messages.back();
  if (options.tool_choice == ToolChoice::kRequired && out.parse_tool_calls) {
    out.start = ParserStart::kToolCalls;
  } else if (last != nullptr && last->role == ChatRole::kUser && last->task != ChatTask::kNone) {
    out.start = ParserStart::kContent;  // a task answer is plain text
  } else if (!options.thinking_mode) {
    out.start = ParserStart::kContent;
  } else if (last != nullptr && last->role == ChatRole::kAssistant && last->prefix && !last->content.empty()) {
    out.start = ParserStart::kContentContinuation;
  } else if (last != nullptr && last->role == ChatRole::kAssistant && last->prefix && last->reasoning_content &&
             !last->reasoning_content->empty()) {
    out.start = ParserStart::kReasoningContinuation;
  } else {
    out.start = ParserStart::kReasoning;
  }
  return out;
}

void accumulate_event(const OutputEvent& event, ParsedOutput& out) {
  switch (event.kind) {
    case OutputEventKind::kReasoning: out.reasoning += event.text; break;
    case OutputEventKind::kContent: out.content += event.text; break;
    case OutputEventKind::kToolCallStart:
      out.tool_calls.push_back({event.tool_call_id, event.tool_name, ""});
      break;
    case OutputEventKind::kToolCallArguments:
      if (event.tool_call_index >= 0 && static_cast<size_t>(event.tool_call_index) < out.tool_calls.size()) {
        out.tool_calls[static_cast<size_t>(event.tool_call_index)].arguments += event.text;
      }
      break;
    case OutputEventKind::kToolCallEnd: break;
    case OutputEventKind::kWarning: out.warnings.push_back(event.text); break;
    case OutputEventKind::kFinish:
      out.finish_reason = event.finish_reason;
      out.stop_sequence = event.text;
      break;
  }
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kStopSequence: return "stop_sequence";
    case FinishReason::kContentFilter: return "content_filter";
    case FinishReason::kEndOfStream: return "end_of_stream";
  }
  return "stop";
}

}  // namespace deepinfer
