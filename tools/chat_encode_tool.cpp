// chat_encode_tool: the chat encoding and the output parser behind a stdin/stdout JSON interface, for the
// differential tests against deepseek-recipe (tests/e2e/test_chat_encoding_diff.py) and for inspection.
//   chat_encode_tool            stdin: one request (chat_request_json.h)   stdout: the prompt string
//   chat_encode_tool --json     stdin: a request or a list of them         stdout: {"prompt", "special_ranges"}
//                                                                            or {"error"} per request
//   chat_encode_tool --parse    stdin: a request (or list) with "output_chunks": [text...] and optional
//                               "stream_end" ("eos" | "length" | "content_filter" | "unknown", default eos)
//                               stdout: {"reasoning", "content", "tool_calls", "finish_reason",
//                                        "stop_sequence", "warnings", "events"}
// Request extras: "api_normalization" (bool, default false: messages exactly as written).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "format/chat_encoding.h"
#include "format/chat_request_json.h"
#include "format/output_parser.h"

namespace {

using deepinfer::ChatRequest;
using Json = nlohmann::ordered_json;

deepinfer::Result<ChatRequest> load(const Json& request) {
  deepinfer::ChatRequestJsonOptions options;
  if (request.is_object()) {
    const auto it = request.find("api_normalization");
    options.api_normalization = it != request.end() && it->is_boolean() && it->get<bool>();
  }
  return deepinfer::chat_request_from_json(request, options);
}

Json encode_one(const Json& request) {
  deepinfer::Result<ChatRequest> loaded = load(request);
  if (!loaded.ok()) return Json{{"error", loaded.status().message()}};
  deepinfer::Result<deepinfer::EncodedPrompt> prompt = deepinfer::encode_chat(loaded->messages, loaded->options);
  if (!prompt.ok()) return Json{{"error", prompt.status().message()}};
  Json ranges = Json::array();
  for (const deepinfer::ByteRange& r : prompt->special_ranges) ranges.push_back(Json::array({r.begin, r.end}));
  return Json{{"prompt", prompt->text}, {"special_ranges", ranges}};
}

deepinfer::StreamEnd stream_end_from(const Json& request) {
  const auto it = request.find("stream_end");
  if (it == request.end() || !it->is_string()) return deepinfer::StreamEnd::kEos;
  if (*it == "length") return deepinfer::StreamEnd::kLength;
  if (*it == "content_filter") return deepinfer::StreamEnd::kContentFilter;
  if (*it == "unknown") return deepinfer::StreamEnd::kUnknown;
  return deepinfer::StreamEnd::kEos;
}

Json parse_one(const Json& request) {
  deepinfer::Result<ChatRequest> loaded = load(request);
  if (!loaded.ok()) return Json{{"error", loaded.status().message()}};
  deepinfer::OutputParser parser(
      deepinfer::output_parser_options_for(loaded->messages, loaded->options, loaded->stop));
  std::vector<deepinfer::OutputEvent> events;
  const auto chunks = request.find("output_chunks");
  if (chunks != request.end() && chunks->is_array()) {
    for (const Json& chunk : *chunks) {
      if (chunk.is_string()) parser.feed(chunk.get_ref<const std::string&>(), events);
    }
  }
  parser.finish(stream_end_from(request), events);
  deepinfer::ParsedOutput parsed;
  Json event_list = Json::array();
  for (const deepinfer::OutputEvent& e : events) {
    deepinfer::accumulate_event(e, parsed);
    event_list.push_back(Json{{"kind", static_cast<int>(e.kind)}, {"text", e.text}, {"index", e.tool_call_index}});
  }
  Json calls = Json::array();
  for (const deepinfer::ParsedToolCall& c : parsed.tool_calls) {
    calls.push_back(Json{{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
  }
  return Json{{"reasoning", parsed.reasoning},
              {"content", parsed.content},
              {"tool_calls", calls},
              {"finish_reason",
               parsed.finish_reason ? std::string(deepinfer::finish_reason_name(*parsed.finish_reason)) : ""},
              {"stop_sequence", parsed.stop_sequence},
              {"warnings", parsed.warnings},
              {"events", event_list}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!mode.empty() && mode != "--json" && mode != "--parse") {
    std::fprintf(stderr, "usage: chat_encode_tool [--json | --parse] < request.json\n");
    return 2;
  }
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const Json request = Json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) {
    std::fprintf(stderr, "chat_encode_tool: stdin is not valid JSON\n");
    return 1;
  }
  if (mode.empty()) {
    const Json result = encode_one(request);
    if (result.contains("error")) {
      std::fprintf(stderr, "chat_encode_tool: %s\n", result["error"].get<std::string>().c_str());
      return 1;
    }
    const std::string& prompt = result["prompt"].get_ref<const std::string&>();
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
  }
  auto run = [&](const Json& one) { return mode == "--json" ? encode_one(one) : parse_one(one); };
  Json output;
  if (request.is_array()) {
    output = Json::array();
    for (const Json& one : request) output.push_back(run(one));
  } else {
    output = run(request);
  }
  const std::string text = output.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
