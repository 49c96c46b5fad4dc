// Streaming one text request through the in-process Engine to a terminal: reasoning and content are
// printed as they arrive (reasoning dimmed on a terminal), tool calls shown as they are parsed.
#pragma once

#include <string>

#include "deepinfer/engine.h"

namespace deepinfer::cli {

struct StreamedReply {
  std::string reasoning;
  std::string content;
  Usage usage;
  EndReason end_reason = EndReason::kStop;
  double seconds = 0;
  bool ok = false;
};

// Submits `request`, prints its deltas to stdout while they stream, and returns the whole reply.
StreamedReply stream_request(Engine& engine, Request request, bool show_reasoning);

}  // namespace deepinfer::cli
