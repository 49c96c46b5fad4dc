// Request → PreparedRequest on the submitting thread: validates sampling parameters and limits, renders a chat
// request with the DeepSeek chat encoding and tokenizes it (special tokens only where the template put them),
// and picks the output parser's options. No engine or model state is touched.
// Invariant: a PreparedRequest fits the context and the cache budget (prompt + max_new_tokens), or prepare fails
// with a message naming the field; nothing is truncated.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "deepinfer/status.h"
#include "deepinfer/types.h"
#include "engine/cache_footprint.h"
#include "format/chat_encoding.h"
#include "format/json_schema.h"
#include "format/output_parser.h"
#include "format/tokenizer.h"

namespace deepinfer {

struct PrepareContext {
  const Tokenizer* tokenizer = nullptr;  // null: token-id requests only, no text output
  int32_t vocab_size = 0;
  int32_t eos_token_id = 1;
  int32_t bos_token_id = 0;
  ChatModelVersion chat_version = ChatModelVersion::kV4;
  bool default_thinking = true;
  int64_t max_context_tokens = 0;
  int default_max_tokens = 0;
  CacheFootprint footprint;
  int64_t cache_budget_bytes = 0;
};

struct PreparedRequest {
  std::vector<int32_t> prompt;
  std::optional<OutputParserOptions> parser;  // text output; absent without a tokenizer
  SamplingParams sampling;
  int64_t max_new_tokens = 0;
  std::chrono::steady_clock::time_point deadline;
  // Chat: the prompt length up to and including the last user-turn token (the history and system prompt that
  // other requests share); the engine snapshots its state there for the prefix cache. 0: none.
  int64_t shared_prefix_tokens = 0;
  // response_format json_object / json_schema: the answer is constrained to one JSON object (engine/json_mask.h)
  // or to a document valid against json_schema (engine/json_schema_mask.h). In thinking mode the constraint
  // starts after the model's </think> (the reasoning is free text); an assistant prefix's content is the start of
  // the document and is fed to the validator first.
  bool json_object = false;
  std::shared_ptr<const CompiledJsonSchema> json_schema;
  bool json_after_think = false;
  std::string json_prefix;
};

[[nodiscard]] Result<PreparedRequest> prepare_request(Request request, const PrepareContext& context);

// Tokenizes an encoded chat prompt: special ranges become their token ids, the text between them is encoded
// with no added token recognised (so text a user typed never becomes a control token).
[[nodiscard]] Result<std::vector<int32_t>> tokenize_encoded_prompt(const EncodedPrompt& prompt, const Tokenizer& tokenizer);

}  // namespace deepinfer
