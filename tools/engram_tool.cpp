// engram_tool: a thin driver over the Engram derivations for differential tests against numpy and HF
// `tokenizers` (tests/e2e/test_engram_diff.py). Owns only I/O framing; every decision is the library's.
//   engram_tool integers SEED LOW HIGH N   numpy.random.default_rng(SEED).integers(LOW, HIGH, N, int64), one line
//   engram_tool multipliers LAYER_ID COMPRESSED_VOCAB N   the Engram multipliers of one layer, one line
//   engram_tool normalize                  each stdin line is hex UTF-8 -> the hex of its Engram normalization
//   engram_tool token-map TOKENIZER_JSON   "<n_compressed>" then one line of comma-separated compressed ids
//   engram_tool icu-steps                  ICU's Unicode version, then for each stdin line (a hex code point)
//                                          "<is_mark 0|1> <ccc> <nfkc hex> <nfd of nfkc hex> <lowercase hex>"
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/pcg64.h"
#include "format/engram_normalizer.h"
#include "format/engram_token_map.h"
#include "format/tokenizer.h"

namespace {

std::string to_hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
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

void print_ints(const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(v[i]));
  std::printf("\n");
}

int usage() {
  std::fprintf(stderr, "usage: engram_tool integers SEED LOW HIGH N | multipliers LAYER_ID COMPRESSED_VOCAB N | normalize | "
                       "token-map TOKENIZER_JSON | icu-steps\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string mode = argv[1];
  if (mode == "integers" && argc == 6) {
    const long long low = std::atoll(argv[3]), high = std::atoll(argv[4]);
    if (low >= high) return usage();
    deepinfer::Pcg64 rng(std::strtoull(argv[2], nullptr, 10));
    print_ints(rng.integers(low, high, std::atoi(argv[5])));
    return 0;
  }
  if (mode == "multipliers" && argc == 5) {
    print_ints(deepinfer::engram_multipliers(std::atoi(argv[2]), std::atoll(argv[3]), std::atoi(argv[4])));
    return 0;
  }
  if (mode == "normalize" && argc == 2) {
    std::string line, text;
    while (std::getline(std::cin, line)) {
      if (!from_hex(line, &text)) {
        std::fprintf(stderr, "engram_tool: not a hex line: %s\n", line.c_str());
        return 1;
      }
      std::printf("%s\n", to_hex(deepinfer::engram_normalize(text)).c_str());
    }
    return 0;
  }
  if (mode == "token-map" && argc == 3) {
    auto tokenizer = deepinfer::Tokenizer::load(argv[2]);
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "engram_tool: %s\n", tokenizer.status().message().c_str());
      return 1;
    }
    const deepinfer::EngramTokenMap map = deepinfer::build_engram_token_map(tokenizer.value());
    std::printf("%d\n", map.n_compressed);
    for (size_t i = 0; i < map.token_map.size(); ++i) std::printf("%s%d", i ? "," : "", map.token_map[i]);
    std::printf("\n");
    return 0;
  }
  if (mode == "icu-steps" && argc == 2) {
    std::printf("%s\n", deepinfer::engram_icu_unicode_version().c_str());
    std::string line;
    while (std::getline(std::cin, line)) {
      const deepinfer::EngramIcuSteps s = deepinfer::engram_icu_steps(char32_t(std::strtoul(line.c_str(), nullptr, 16)));
      std::printf("%d %d %s %s %s\n", s.is_mark ? 1 : 0, s.combining_class, to_hex(s.nfkc).c_str(), to_hex(s.nfd_of_nfkc).c_str(), to_hex(s.lowercase).c_str());
    }
    return 0;
  }
  return usage();
}
