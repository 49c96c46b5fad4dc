#include "cli/text_stream.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace deepinfer::cli {

StreamedReply stream_request(Engine& engine, Request request, bool show_reasoning) {
  StreamedReply reply;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto id = engine.submit(std::move(request));
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.status().message().c_str());
    return reply;
  }
  std::vector<Event> events;
  bool in_reasoning = false;
  while (engine.poll(id.value(), events, std::chrono::milliseconds(100)) || !events.empty()) {
    for (const Event& e : events) {
      for (const TextDelta& d : e.deltas) {
        switch (d.kind) {
          case DeltaKind::kReasoning:
            reply.reasoning += d.text;
            if (!show_reasoning) break;
            if (!in_reasoning) std::fputs(tty ? "\033[2m[thinking] " : "[thinking] ", stdout);
            in_reasoning = true;
            std::fputs(d.text.c_str(), stdout);
            break;
          case DeltaKind::kContent:
            if (in_reasoning) std::fputs(tty ? "\033[0m\n" : "\n", stdout);
            in_reasoning = false;
            reply.content += d.text;
            std::fputs(d.text.c_str(), stdout);
            break;
          case DeltaKind::kToolCallStart:
            std::printf("\n[tool call %s]", d.tool_name.c_str());
            break;
          case DeltaKind::kToolCallArguments:
            std::fputs(d.text.c_str(), stdout);
            break;
          case DeltaKind::kToolCallEnd:
            std::fputs("\n", stdout);
            break;
          case DeltaKind::kWarning:
            std::fprintf(stderr, "\nwarning: %s\n", d.text.c_str());
            break;
        }
      }
      std::fflush(stdout);
      if (e.finished) {
        reply.usage = e.usage;
        reply.end_reason = e.end_reason;
        reply.ok = e.end_reason != EndReason::kError;
        if (!e.error.empty()) std::fprintf(stderr, "\nerror: %s\n", e.error.c_str());
      }
    }
    events.clear();
  }
  if (in_reasoning && tty) std::fputs("\033[0m", stdout);
  std::fputs("\n", stdout);
  reply.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return reply;
}

}  // namespace deepinfer::cli
