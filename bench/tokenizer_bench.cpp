// Tokenizer throughput (bytes/s and tokens/s) on the real DeepSeek-V4 tokenizer.json. Needs the file that
// scripts/fetch_tokenizers.sh fetches (DEEPINFER_TOKENIZER_DIR, else build/tokenizers); skips otherwise.
// Corpus: DEEPINFER_TOKENIZER_CORPUS (a file of hex-encoded documents, one per line, as written by
// bench/tokenizer_vs_hf.py, which also times HF `tokenizers` on the same documents), else a built-in
// deterministic mix of English, CJK, code and digits. The BPE word cache is warm after the first iteration,
// as HF's is in a long-running process.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "format/tokenizer.h"

namespace {

using deepinfer::Tokenizer;

const Tokenizer* real_tokenizer(std::string* why) {
  static std::string error;
  static const Tokenizer* tok = [] () -> const Tokenizer* {
    std::vector<std::filesystem::path> dirs;
    if (const char* env = std::getenv("DEEPINFER_TOKENIZER_DIR")) dirs.emplace_back(env);
    dirs.emplace_back("build/tokenizers");
    dirs.emplace_back("tokenizers");
    dirs.emplace_back("../tokenizers");
    for (const auto& d : dirs) {
      if (!std::filesystem::exists(d / "v4" / "tokenizer.json")) continue;
      auto t = Tokenizer::load((d / "v4" / "tokenizer.json").string());
      if (!t.ok()) {
        error = t.status().message();
        return nullptr;
      }
      return new Tokenizer(std::move(*t));
    }
    error = "no v4/tokenizer.json (run scripts/fetch_tokenizers.sh build/tokenizers or set DEEPINFER_TOKENIZER_DIR)";
    return nullptr;
  }();
  *why = error;
  return tok;
}

std::vector<std::string> builtin_corpus() {
  std::mt19937 rng(1234);
  const std::vector<std::string> words = {"the", "model", "attention", "kernel", "of", "and", "DeepSeek", "token",
                                          "inference", "is", "a", "cache", "we", "batch", "Hello,", "world."};
  const std::vector<std::string> cjk = {"你好", "世界", "模型", "推理", "注意力",
                                        "我们", "的", "是", "こんにちは", "한국어"};
  const std::vector<std::string> code = {"for (int i = 0; i < n; ++i) {\n", "    return x;\n", "}\n",
                                         "def f(x):\n", "    y = x ** 2  # square\n", "std::vector<float> v;\n"};
  std::vector<std::string> docs;
  for (int d = 0; d < 2000; ++d) {
    std::string s;
    const int kind = d % 4;
    for (int i = 0; i < 80; ++i) {
      if (kind == 0) s += words[rng() % words.size()] + " ";
      else if (kind == 1) s += cjk[rng() % cjk.size()] + (rng() % 8 == 0 ? "，" : "");
      else if (kind == 2) s += code[rng() % code.size()];
      else s += std::to_string(rng()) + (rng() % 2 ? " " : ", ") + words[rng() % words.size()] + " ";
    }
    docs.push_back(std::move(s));
  }
  return docs;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    const char* path = std::getenv("DEEPINFER_TOKENIZER_CORPUS");
    if (path == nullptr) return builtin_corpus();
    std::vector<std::string> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      std::string doc;
      for (size_t i = 0; i + 1 < line.size(); i += 2) {
        doc.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
      }
      out.push_back(std::move(doc));
    }
    return out;
  }();
  return docs;
}

void BM_TokenizerEncode(benchmark::State& state) {
  std::string why;
  const Tokenizer* tok = real_tokenizer(&why);
  if (tok == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  const auto& docs = corpus();
  size_t n_bytes = 0, n_tokens = 0;
  std::vector<int32_t> ids;
  for (auto _ : state) {
    for (const std::string& d : docs) {
      ids.clear();
      tok->encode_into(d, deepinfer::AddedTokenMatching::kAll, &ids);
      n_bytes += d.size();
      n_tokens += ids.size();
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(n_bytes));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TokenizerEncode)->Unit(benchmark::kMillisecond);

void BM_TokenizerDecode(benchmark::State& state) {
  std::string why;
  const Tokenizer* tok = real_tokenizer(&why);
  if (tok == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  std::vector<std::vector<int32_t>> seqs;
  for (const std::string& d : corpus()) seqs.push_back(tok->encode(d));
  size_t n_bytes = 0, n_tokens = 0;
  for (auto _ : state) {
    for (const auto& ids : seqs) {
      const std::string text = tok->decode(ids);
      n_bytes += text.size();
      n_tokens += ids.size();
      benchmark::DoNotOptimize(text.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(n_bytes));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TokenizerDecode)->Unit(benchmark::kMillisecond);

void BM_StreamDecoder(benchmark::State& state) {
  std::string why;
  const Tokenizer* tok = real_tokenizer(&why);
  if (tok == nullptr) {
    state.SkipWithError(why.c_str());
    return;
  }
  std::vector<std::vector<int32_t>> seqs;
  for (const std::string& d : corpus()) seqs.push_back(tok->encode(d));
  size_t n_tokens = 0;
  deepinfer::StreamDecoder stream(*tok);
  for (auto _ : state) {
    for (const auto& ids : seqs) {
      for (int32_t id : ids) benchmark::DoNotOptimize(stream.push(id).size());
      benchmark::DoNotOptimize(stream.flush().size());
      n_tokens += ids.size();
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StreamDecoder)->Unit(benchmark::kMillisecond);

}  // namespace
