// The JSON-object prefix validator (format/json_prefix.h) and the token mask over it (engine/json_mask.h):
// valid and invalid prefixes, every split point of sample documents (UTF-8 split across feeds included), a
// differential check of complete documents against nlohmann's parser, and the mask's fast paths against trying
// every token (real V4 tokenizer; skipped without it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/json_mask.h"
#include "format/json_prefix.h"
#include "format/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kDocuments = {
    "{}",
    " \n{ } ",
    "{\"a\":1}",
    "{\"key\": \"value\", \"n\": -12.5e+3, \"z\": 0, \"f\": 0.25E-2, \"t\": true, \"f2\": false, \"x\": null}",
    "{\"nested\": {\"list\": [1, [2, {}], [], {\"q\": []}], \"s\": \"\\\"quoted\\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}}",
    "{\"unicode\": \"\\u00e9\\uD83D\\uDE00 caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 \xED\x9F\xBF \xF4\x8F\xBF\xBF\"}",
    "{\"\xE4\xBD\xA0\": [\"\xF0\x9F\x98\x80\", -0, 1E5, 3.14159]}",
    "{\"a\" : [ true , false , null ] , \"b\" :{}\t}\r\n",
};

TEST(JsonPrefix, EveryPrefixOfValidDocumentsIsAccepted) {
  for (const std::string& doc : kDocuments) {
    JsonPrefixValidator v;
    for (size_t i = 0; i < doc.size(); ++i) {
      ASSERT_TRUE(v.feed(uint8_t(doc[i]))) << "byte " << i << " of " << doc;
      const size_t n_fed = i + 1, closing_end = doc.find_last_of('}') + 1;
      if (n_fed < closing_end) {
        EXPECT_FALSE(v.complete()) << doc.substr(0, n_fed);
      } else {
        EXPECT_TRUE(v.complete()) << doc.substr(0, n_fed);  // closed, then only trailing whitespace
      }
    }
    EXPECT_TRUE(v.complete()) << doc;
  }
}

TEST(JsonPrefix, EverySplitPointGivesTheSameAnswer) {
  for (const std::string& doc : kDocuments) {
    for (size_t split = 0; split <= doc.size(); ++split) {
      JsonPrefixValidator v;
      ASSERT_TRUE(v.feed(std::string_view(doc).substr(0, split))) << doc << " split " << split;
      EXPECT_TRUE(v.accepts(std::string_view(doc).substr(split))) << doc << " split " << split;
      ASSERT_TRUE(v.feed(std::string_view(doc).substr(split))) << doc << " split " << split;
      EXPECT_TRUE(v.complete()) << doc << " split " << split;
    }
  }
}

TEST(JsonPrefix, InvalidPrefixesAreRefused) {
  const std::vector<std::string> bad = {
      "[", "1", "\"a\"", "x", "{,", "{\"a\" 1", "{\"a\":01", "{\"a\":-x", "{\"a\":tru e", "{\"a\":nul}",
      "{\"a\":\"\x01\"", "{\"a\":\"\\x\"", "{\"a\":\"\\u12g", "{}}", "{} x", "{]", "{\"a\":[}", "{\"a\":1.}",
      "{\"a\":1e}", "{\"a\":1e+}", "{\"a\":.5}", "{\"a\":+1}", "{\"a\":1,}", "{\"a\":[1,]}", "{\"a\":[1 2]}",
      "{\"a\"}", "{1:2}", "{\"a\":\"\xC0\x80\"}", "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF5\x80\"}",
      "{\"a\":\"\xE0\x80\x80\"}", "{\"a\":\"\xF0\x80\x80\x80\"}", "{\"a\":\"\xF4\x90\x80\x80\"}", "{\"a\":\"\x80\"}",
      "{\"a\":\"\xC3\"}", "{\"a\":\"\t\"}", "{\"a\":\"\n\"}", "{\"a\":True}", "{'a':1}",
  };
  for (const std::string& text : bad) EXPECT_FALSE(is_json_object_prefix(text)) << text;
}

TEST(JsonPrefix, ARefusedByteLeavesTheStateUnchanged) {
  JsonPrefixValidator v;
  ASSERT_TRUE(v.feed(std::string_view("{\"a\":[1")));
  EXPECT_FALSE(v.feed(uint8_t('}')));            // the array is open
  EXPECT_FALSE(v.feed(std::string_view("2]x")));  // all or nothing: "2]" is not kept
  ASSERT_TRUE(v.feed(std::string_view("2]}")));
  EXPECT_TRUE(v.complete());
  EXPECT_TRUE(v.feed(uint8_t(' ')));
  EXPECT_FALSE(v.feed(uint8_t('{')));  // one document only
}

TEST(JsonPrefix, NestingDeeperThanTheLimitIsRefused) {
  JsonPrefixValidator v;
  ASSERT_TRUE(v.feed(uint8_t('{')));
  ASSERT_TRUE(v.feed(std::string_view("\"a\":")));
  for (int i = 1; i < JsonPrefixValidator::kMaxDepth; ++i) ASSERT_TRUE(v.feed(uint8_t('['))) << i;
  EXPECT_FALSE(v.accepts("["));
  EXPECT_FALSE(v.feed(uint8_t('[')));
  EXPECT_TRUE(v.accepts("1]"));
}

// Random texts from JSON-ish pieces: a text the validator calls complete must be one JSON object for nlohmann,
// and an object nlohmann accepts must be complete for the validator (and every prefix of it accepted).
TEST(JsonPrefix, CompleteDocumentsAgreeWithNlohmann) {
  const std::vector<std::string> pieces = {"{", "}", "[", "]", ":", ",", "\"", "a", "1", "0", "-", ".", "e", "+",
                                           "true", "null", " ", "\\n", "\\\"", "\\u00e9", "\xC3\xA9", "\"k\":", "{\"k\":"};
  std::mt19937 rng(7);
  int n_objects = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    std::string text = rng() % 2 ? "{" : "";  // half start like an object, so that enough of them are one
    const int n = 1 + int(rng() % 12);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    if (rng() % 2) text += "}";
    const bool ours = [&] {
      JsonPrefixValidator v;
      return v.feed(text) && v.complete();
    }();
    const bool theirs = nlohmann::json::accept(text) && nlohmann::json::parse(text).is_object();
    ASSERT_EQ(ours, theirs) << text;
    n_objects += theirs;
  }
  EXPECT_GT(n_objects, 100);  // the generator does produce objects
}

std::string find_real_tokenizer() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("DEEPINFER_TOKENIZER_DIR")) candidates.emplace_back(env);
  candidates.emplace_back(fs::path(DEEPINFER_BINARY).parent_path() / "tokenizers");
  for (const auto& dir : candidates) {
    if (fs::exists(dir / "v4" / "tokenizer.json")) return (dir / "v4" / "tokenizer.json").string();
  }
  return {};
}

// The mask's shortcuts (first-byte groups, plain string tokens, only EOS once complete) give exactly the
// tokens that trying every candidate would give, in every state along the sample documents.
TEST(JsonTokenMask, EqualsTryingEveryTokenWithTheRealTokenizer) {
  const std::string path = find_real_tokenizer();
  if (path.empty()) GTEST_SKIP() << "no v4/tokenizer.json (run scripts/fetch_tokenizers.sh build/tokenizers)";
  auto tokenizer = Tokenizer::load(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const int32_t n_vocab = 129280, eos = 1;
  const JsonTokenTable table = build_json_token_table(*tokenizer, n_vocab);
  std::vector<uint8_t> added(size_t(n_vocab), 0);
  for (int32_t id : tokenizer->added_token_ids()) added[size_t(id)] = 1;
  EXPECT_GT(table.not_plain.size(), 0u);
  const std::string doc = kDocuments[5];  // strings, escapes, \u, multi-byte UTF-8
  const std::string doc2 = "{\"n\": [-1.5e3, true, null], \"o\": {}}";
  std::vector<uint8_t> allowed;
  JsonPrefixValidator scratch;
  int n_states = 0;
  for (const std::string& d : {doc, doc2}) {
    for (size_t i = 0; i <= d.size(); ++i) {
      JsonPrefixValidator at;
      ASSERT_TRUE(at.feed(std::string_view(d).substr(0, i)));
      json_token_mask(table, at, eos, allowed, scratch);
      ++n_states;
      int64_t n_allowed = 0;
      for (int32_t id = 0; id < n_vocab; ++id) {
        const std::string_view b = tokenizer->token_bytes(id);
        bool expect = !b.empty() && !added[size_t(id)] && !at.complete() && at.accepts(b);
        if (id == eos) expect = at.complete();
        ASSERT_EQ(bool(allowed[size_t(id)]), expect) << "token " << id << " after " << d.substr(0, i);
        n_allowed += allowed[size_t(id)];
      }
      EXPECT_GT(n_allowed, 0) << d.substr(0, i);
    }
  }
  EXPECT_GT(n_states, 20);
}

}  // namespace
}  // namespace deepinfer
