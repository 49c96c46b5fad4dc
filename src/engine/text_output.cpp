#include "engine/text_output.h"

namespace deepinfer {

namespace {
TextDelta make_delta(DeltaKind kind, std::string text, int tool_call_index = -1) {
  TextDelta d;
  d.kind = kind;
  d.text = std::move(text);
  d.tool_call_index = tool_call_index;
  return d;
}
}  // namespace

TextOutput::TextOutput(const Tokenizer& tokenizer, OutputParserOptions options)
    : decoder_(tokenizer, false), parser_(std::move(options)) {}

void TextOutput::drain(std::vector<TextDelta>& deltas) {
  for (OutputEvent& e : events_) {
    switch (e.kind) {
      case OutputEventKind::kReasoning:
      case OutputEventKind::kContent: {
        const DeltaKind kind = e.kind == OutputEventKind::kReasoning ? DeltaKind::kReasoning : DeltaKind::kContent;
        if (e.text.empty()) break;
        if (!deltas.empty() && deltas.back().kind == kind) {
          deltas.back().text += e.text;  // one delta per kind run
        } else {
          deltas.push_back(make_delta(kind, std::move(e.text)));
        }
        break;
      }
      case OutputEventKind::kToolCallStart:
        deltas.push_back(make_delta(DeltaKind::kToolCallStart, "", e.tool_call_index));
        deltas.back().tool_call_id = std::move(e.tool_call_id);
        deltas.back().tool_name = std::move(e.tool_name);
        break;
      case OutputEventKind::kToolCallArguments:
        if (!deltas.empty() && deltas.back().kind == DeltaKind::kToolCallArguments &&
            deltas.back().tool_call_index == e.tool_call_index) {
          deltas.back().text += e.text;
        } else {
          deltas.push_back(make_delta(DeltaKind::kToolCallArguments, std::move(e.text), e.tool_call_index));
        }
        break;
      case OutputEventKind::kToolCallEnd:
        deltas.push_back(make_delta(DeltaKind::kToolCallEnd, "", e.tool_call_index));
        break;
      case OutputEventKind::kWarning:
        deltas.push_back(make_delta(DeltaKind::kWarning, std::move(e.text)));
        break;
      case OutputEventKind::kFinish:
        stopped_ = true;
        switch (e.finish_reason) {
          case deepinfer::FinishReason::kStop: reason_ = EndReason::kStop; break;
          case deepinfer::FinishReason::kLength: reason_ = EndReason::kLength; break;
          case deepinfer::FinishReason::kToolCalls: reason_ = EndReason::kToolCalls; break;
          case deepinfer::FinishReason::kStopSequence:
            reason_ = EndReason::kStopSequence;
            stop_sequence_ = e.text;
            break;
          default: reason_ = EndReason::kStop; break;
        }
        break;
    }
  }
  events_.clear();
}

bool TextOutput::push(int32_t id, std::vector<TextDelta>& deltas) {
  if (stopped_) return true;
  const std::string_view text = decoder_.push(id);
  if (!text.empty()) parser_.feed(text, events_);
  drain(deltas);
  return stopped_;
}

EndReason TextOutput::finish(StreamEnd end, std::vector<TextDelta>& deltas) {
  if (!stopped_) {
    const std::string_view rest = decoder_.flush();
    if (!rest.empty()) parser_.feed(rest, events_);
    parser_.finish(end, events_);
    drain(deltas);
  }
  return reason_;
}

}  // namespace deepinfer
