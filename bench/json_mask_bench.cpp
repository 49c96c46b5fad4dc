// Cost of the response_format json_object token mask (engine/json_mask.h) per generated token, on the real
// DeepSeek-V4 vocabulary (129,280 tokens; DEEPINFER_TOKENIZER_DIR, else build/tokenizers; skips otherwise), in the
// states an answer spends its time in: inside a string (the plain-string fast path), after a key (structural: only
// the first-byte groups that can follow are tried), inside a number, and in an array. Compare with the decode step
// (`deepinfer bench`, or TPOT in `deepinfer bench serve`): the mask runs once per generated token. The
// BM_JsonSchemaMask cases measure the response_format json_schema mask (engine/json_schema_mask.h) the same way.
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/json_mask.h"
#include "engine/json_schema_mask.h"
#include "format/json_schema.h"
#include "format/tokenizer.h"

namespace {

using namespace deepinfer;

const JsonTokenTable* table() {
  static const JsonTokenTable* t = []() -> const JsonTokenTable* {
    std::vector<std::filesystem::path> dirs;
    if (const char* env = std::getenv("DEEPINFER_TOKENIZER_DIR")) dirs.emplace_back(env);
    dirs.emplace_back("build/tokenizers");
    for (const auto& d : dirs) {
      auto tok = Tokenizer::load((d / "v4" / "tokenizer.json").string());
      if (tok.ok()) return new JsonTokenTable(build_json_token_table(*tok, 129280));
    }
    return nullptr;
  }();
  return t;
}

void BM_JsonMask(benchmark::State& state, const char* prefix) {
  const JsonTokenTable* t = table();
  if (t == nullptr) {
    state.SkipWithError("no v4/tokenizer.json (run scripts/fetch_tokenizers.sh build/tokenizers)");
    return;
  }
  JsonPrefixValidator v;
  if (!v.feed(std::string_view(prefix))) {
    state.SkipWithError("bad prefix");
    return;
  }
  std::vector<uint8_t> allowed;
  JsonPrefixValidator scratch;
  for (auto _ : state) {
    json_token_mask(*t, v, 1, allowed, scratch);
    benchmark::DoNotOptimize(allowed.data());
  }
  int64_t n = 0;
  for (uint8_t a : allowed) n += a;
  state.counters["allowed_tokens"] = double(n);
}

BENCHMARK_CAPTURE(BM_JsonMask, in_string, "{\"name\": \"Ada Love")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonMask, after_key, "{\"name\"")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonMask, value, "{\"name\":")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonMask, in_number, "{\"age\": 3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonMask, in_array, "{\"a\": [1, true, {\"b\": null}")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonMask, start, "")->Unit(benchmark::kMicrosecond);

}  // namespace

// response_format json_schema (engine/json_schema_mask.h) on a typical object schema, in the same kinds of state:
// a free string value, a key when only declared keys may come (few first bytes), a key when other keys may come
// (the plain-string fast path), an integer, an enum string, between values.
const char* kBenchSchema = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
  "role": {"enum": ["admin", "user", "guest"]}, "tags": {"type": "array", "items": {"type": "string"}},
  "extra": {"type": "object"}}, "required": ["name", "age"], "additionalProperties": false})";

namespace {

void BM_JsonSchemaMask(benchmark::State& state, const char* prefix) {
  const JsonTokenTable* t = table();
  if (t == nullptr) {
    state.SkipWithError("no v4/tokenizer.json (run scripts/fetch_tokenizers.sh build/tokenizers)");
    return;
  }
  auto compiled = compile_json_schema(nlohmann::ordered_json::parse(kBenchSchema));
  if (!compiled.ok()) {
    state.SkipWithError(compiled.status().message().c_str());
    return;
  }
  auto schema = std::make_shared<const CompiledJsonSchema>(std::move(compiled.value()));
  JsonSchemaPrefixValidator v(schema);
  if (!v.feed(std::string_view(prefix))) {
    state.SkipWithError("bad prefix");
    return;
  }
  std::vector<uint8_t> allowed;
  JsonSchemaPrefixValidator scratch(schema);
  for (auto _ : state) {
    json_schema_token_mask(*t, v, 1, allowed, scratch);
    benchmark::DoNotOptimize(allowed.data());
  }
  int64_t n = 0;
  for (uint8_t a : allowed) n += a;
  state.counters["allowed_tokens"] = double(n);
}

BENCHMARK_CAPTURE(BM_JsonSchemaMask, in_string, "{\"name\": \"Ada Love")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, declared_key, "{\"name\": \"Ada\", \"")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, open_key, "{\"name\": \"Ada\", \"extra\": {\"")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, value, "{\"age\":")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, in_integer, "{\"age\": 3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, in_enum, "{\"role\": \"ad")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, after_value, "{\"age\": 3, \"tags\": [\"x\"]")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_JsonSchemaMask, start, "")->Unit(benchmark::kMicrosecond);

}  // namespace
