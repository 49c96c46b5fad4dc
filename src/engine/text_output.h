// Generated tokens → text deltas of one request: the tokenizer's StreamDecoder (whole UTF-8 only) feeding the
// DeepSeek output parser (reasoning / content / DSML tool calls / stop strings). Owned by one sequence on the
// engine thread. Must not know about HTTP shapes; it only maps parser events onto public TextDelta values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/types.h"
#include "format/output_parser.h"
#include "format/tokenizer.h"

namespace deepinfer {

class TextOutput {
 public:
  TextOutput(const Tokenizer& tokenizer, OutputParserOptions options);

  // Feeds one generated token (not EOS / a stop token). Returns true when a stop string ended the output.
  bool push(int32_t id, std::vector<TextDelta>& deltas);
  // Ends the output (why: EOS/stop token, or length). Returns the finish reason the text implies.
  EndReason finish(StreamEnd end, std::vector<TextDelta>& deltas);
  const std::string& stop_sequence() const { return stop_sequence_; }
  bool stopped() const { return stopped_; }

 private:
  void drain(std::vector<TextDelta>& deltas);

  StreamDecoder decoder_;
  OutputParser parser_;
  std::vector<OutputEvent> events_;
  bool stopped_ = false;
  EndReason reason_ = EndReason::kStop;
  std::string stop_sequence_;
};

}  // namespace deepinfer
