// tokenize_tool: a thin driver over format/tokenizer.h for differential tests and throughput comparisons.
// Owns only I/O framing; every tokenizer decision is the library's.
//   tokenize_tool TOKENIZER_JSON                    stdin text -> one line of ids
//   tokenize_tool TOKENIZER_JSON --hex-lines        each stdin line is hex bytes -> one line of ids each
//   tokenize_tool TOKENIZER_JSON --decode           each stdin line is ids -> "<hex decode> <hex stream>"
// Options: --matching all|nonspecial|none (added tokens, default all), --skip-special (decode),
//          --time N (with --hex-lines: encode the whole input N more times and report MB/s on stderr).
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "format/tokenizer.h"

namespace {

using deepinfer::AddedTokenMatching;

std::string to_hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

bool from_hex(std::string_view hex, std::string* out) {
  const auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = val(hex[i]), lo = val(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

void print_ids(const std::vector<int32_t>& ids, std::string* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out->push_back(' ');
    *out += std::to_string(ids[i]);
  }
  out->push_back('\n');
}

int usage() {
  std::fprintf(stderr,
               "usage: tokenize_tool TOKENIZER_JSON [--hex-lines | --decode] [--matching all|nonspecial|none]\n"
               "                     [--skip-special] [--time N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  bool hex_lines = false, decode = false, skip_special = false;
  int time_repeats = 0;
  AddedTokenMatching matching = AddedTokenMatching::kAll;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--hex-lines") {
      hex_lines = true;
    } else if (a == "--decode") {
      decode = true;
    } else if (a == "--skip-special") {
      skip_special = true;
    } else if (a == "--matching" && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m == "all") matching = AddedTokenMatching::kAll;
      else if (m == "nonspecial") matching = AddedTokenMatching::kNonSpecial;
      else if (m == "none") matching = AddedTokenMatching::kNone;
      else return usage();
    } else if (a == "--time" && i + 1 < argc) {
      time_repeats = std::atoi(argv[++i]);
    } else {
      return usage();
    }
  }
  auto tokenizer = deepinfer::Tokenizer::load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.status().message().c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string out;

  if (decode) {
    std::string line;
    deepinfer::StreamDecoder stream(*tokenizer, skip_special);
    while (std::getline(std::cin, line)) {
      std::vector<int32_t> ids;
      std::istringstream in(line);
      long long v;
      while (in >> v) ids.push_back(static_cast<int32_t>(v));
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      out += to_hex(tokenizer->decode(ids, skip_special)) + " " + to_hex(streamed) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  if (!hex_lines) {
    std::stringstream buffer;
    buffer << std::cin.rdbuf();
    print_ids(tokenizer->encode(buffer.str(), matching), &out);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  std::vector<std::string> texts;
  std::string line, text;
  size_t n_line = 0;
  while (std::getline(std::cin, line)) {
    ++n_line;
    if (!from_hex(line, &text)) {
      std::fprintf(stderr, "error: stdin line %zu is not hex\n", n_line);
      return 1;
    }
    texts.push_back(text);
  }
  std::vector<int32_t> ids;
  for (const std::string& t : texts) {
    ids.clear();
    tokenizer->encode_into(t, matching, &ids);
    print_ids(ids, &out);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (time_repeats > 0) {
    size_t n_bytes = 0, n_tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    for (int r = 0; r < time_repeats; ++r) {
      for (const std::string& t : texts) {
        ids.clear();
        tokenizer->encode_into(t, matching, &ids);
        n_bytes += t.size();
        n_tokens += ids.size();
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    std::fprintf(stderr, "encode: %zu bytes, %zu tokens in %.3f s (cpu %.3f s): %.2f MB/s, %.0f tokens/s\n", n_bytes,
                 n_tokens, s, cpu_s, n_bytes / s / 1e6, n_tokens / s);
  }
  return 0;
}
