// Cost of the response_format json_object token mask (engine/json_mask.h) per generated token, on the real
// DeepSeek-V4 vocabulary (129,280 tokens; DEEPINFER_TOKENIZER_DIR, else build/tokenizers; skips otherwise), in the
// states an answer spends its time in: inside a string (the plain-string fast path), after a key (structural: only
// the first-byte groups that can follow are tried), inside a number, and in an array. Compare with the decode step
// (`deepinfer bench`, or TPOT in `deepinfer bench serve`): the mask runs once per generated token.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/json_mask.h"
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
