// Engram derivations (spec §7.6 steps 1-5): numpy's PCG64 draws, the reference normalizer, the compressed
// token map over a small tokenizer.json built here, and load_engram_hashing's three sources (side file,
// tokenizer.json, neither). The exhaustive comparisons with real numpy and HF `tokenizers` are
// tests/e2e/test_engram_diff.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/pcg64.h"
#include "core/utf8.h"
#include "format/engram_normalizer.h"
#include "format/engram_token_map.h"
#include "format/engram_unicode_delta.h"
#include "format/safetensors.h"
#include "format/tokenizer_bpe.h"
#include "model/config.h"
#include "model/engram.h"
#include "temp_dir.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using testing::TempDir;

const std::string kTinyA = std::string(DEEPINFER_GOLDEN_DIR) + "/v41-flash/tiny-a";

// Values printed by numpy 2.1.3: default_rng(seed).integers(low, high, size=n, dtype=np.int64).
TEST(Pcg64, MatchesNumpyIntegers) {
  EXPECT_EQ(Pcg64(0).integers(0, int64_t(1) << 62, 3), (std::vector<int64_t>{2937467307694268567, 1244171615822312904, 188957027462249006}));
  // A range below 2^32 draws 32-bit halves (low half first); a negative low offsets the draw.
  EXPECT_EQ(Pcg64((uint64_t(1) << 40) + 5).integers(-7, 1000, 6), (std::vector<int64_t>{7, -3, 446, 368, 915, 584}));
  EXPECT_EQ(Pcg64(123).integers(0, int64_t(1) << 32, 3), (std::vector<int64_t>{66316749, 2930678937, 2546691363}));
  EXPECT_EQ(Pcg64(123).integers(5, 6, 2), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(Pcg64(7).integers(INT64_MIN, INT64_MAX, 2), (std::vector<int64_t>{2307604057237572234, 7327301329031162516}));
}

// The real DeepSeek-V4.1-Flash multipliers (layers 1 and 14, compressed vocab 99,092), from numpy.
TEST(EngramMultipliers, RealModelValues) {
  EXPECT_EQ(engram_multipliers(1, 99092, 4), (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(engram_multipliers(14, 99092, 4), (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  // bound = max(1, ...) = 1 for a huge vocabulary: every draw is 0, every multiplier 1.
  EXPECT_EQ(engram_multipliers(3, INT64_MAX, 2), (std::vector<int64_t>{1, 1}));
}

TEST(EngramMultipliers, EqualGoldenSideFile) {
  const std::string path = kTinyA + "/engram_token_map.safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto config = load_model_config(kTinyA);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const TensorView* t = file.value()->find("engram.multipliers");
  ASSERT_NE(t, nullptr);
  std::vector<int64_t> stored(size_t(t->numel()));
  std::memcpy(stored.data(), t->data, t->n_bytes);
  std::vector<int64_t> derived;
  for (int layer : config->engram_layers) {
    for (int64_t m : engram_multipliers(layer, config->engram_compressed_vocab_size, config->engram_max_ngram)) derived.push_back(m);
  }
  EXPECT_EQ(stored, derived);
}

// Expected strings from HF tokenizers 0.23 normalizers.Sequence([...]).normalize_str.
TEST(EngramNormalizer, FollowsTheReferenceSteps) {
  EXPECT_EQ(engram_normalize(" "), " ");                        // a lone space is protected from Strip
  EXPECT_EQ(engram_normalize("\n\t "), " ");                    // collapsed to one space first, then protected
  EXPECT_EQ(engram_normalize("  H\xC3\xA9llo \t World "), "hello world");  // accents stripped, runs collapsed, stripped
  EXPECT_EQ(engram_normalize("\xC4\xB0STANBUL \xCE\xA3\xCE\x91\xCE\xA3"), "istanbul \xCF\x83\xCE\xB1\xCF\x83");  // no final sigma
  EXPECT_EQ(engram_normalize("\xEF\xAC\x81 \xE2\x91\xA0"), "fi 1");  // NFKC: ligature, circled digit
  EXPECT_EQ(engram_normalize("\xEE\x80\x80x"), " x");              // a literal U+E000 becomes a space too
  EXPECT_EQ(engram_normalize("\xCC\x81"), "");                      // a lone combining mark vanishes
  EXPECT_EQ(engram_normalize("\xE3\x80\x80" "a\xC2\xA0"), "a");     // ideographic / no-break spaces: NFKC + Strip
  EXPECT_EQ(engram_normalize("<|User|>"), "<|user|>");
}

// engram_unicode_delta.h is ICU-version specific: another ICU needs scripts/gen_engram_unicode_delta.py rerun.
TEST(EngramNormalizer, DeltaTableMatchesLinkedIcu) {
  EXPECT_EQ(engram_icu_unicode_version(), std::string(kEngramDeltaIcuUnicodeVersion))
      << "regenerate src/format/engram_unicode_delta.h with scripts/gen_engram_unicode_delta.py";
  // U+07FD (NKO DANTAYALAN) is a mark to ICU 15 but unknown to HF's normalization tables: kept, unreordered.
  EXPECT_EQ(engram_normalize("a\xDF\xBD\xE0\xA2\x98"), "a\xDF\xBD\xE0\xA2\x98");
}

std::string byte_level(std::string_view text) {
  std::string s;
  for (unsigned char c : text) append_utf8(byte_level_chars()[c], &s);
  return s;
}

// 256 byte tokens (id = byte), then `extra` (UTF-8 texts, stored in byte-level form), then one special token.
std::string tokenizer_json(const std::vector<std::string>& extra) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, char(b)))] = b;
  int32_t id = 256;
  for (const std::string& text : extra) vocab[byte_level(text)] = id++;
  json added = json::array({{{"id", id}, {"content", "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>"}, {"special", true}, {"normalized", false},
                             {"lstrip", false}, {"rstrip", false}, {"single_word", false}}});
  return json{{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
              {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                         {"vocab", vocab}, {"merges", json::array()}}}}
      .dump();
}

const std::vector<std::string> kExtra = {"Hello", " hello", "HELLO", "\xC3\xA9t\xC3\xA9", "ete", "  ", "\n\n", "\xCC\x81", "\xE4\xBD"};

TEST(EngramTokenMap, KeysAndFirstAppearanceOrder) {
  auto tok = Tokenizer::from_json_text(tokenizer_json(kExtra), "small tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const EngramTokenMap map = build_engram_token_map(tok.value());
  ASSERT_EQ(map.token_map.size(), size_t(256 + kExtra.size() + 1));
  const auto& m = map.token_map;
  // Ids are numbered in order of first appearance.
  int32_t next = 0;
  for (int32_t v : m) {
    ASSERT_LE(v, next);
    if (v == next) ++next;
  }
  EXPECT_EQ(next, map.n_compressed);
  EXPECT_EQ(m['h'], m['H']);                      // Lowercase
  EXPECT_EQ(m[256], m[257]);                      // "Hello" == " hello" (Strip)
  EXPECT_EQ(m[256], m[258]);                      // == "HELLO"
  EXPECT_EQ(m[259], m[260]);                      // "été" == "ete" (StripAccents)
  EXPECT_EQ(m[' '], m[261]);                      // " " and "  " both normalize to the protected " "
  EXPECT_EQ(m[' '], m[262]);                      // and so does "\n\n"
  EXPECT_EQ(m['\t'], m[' ']);
  EXPECT_NE(m[263], m[0]);                        // a lone combining mark normalizes to "": keyed by its own text
  EXPECT_NE(m[0xE4], m[264]);                     // partial UTF-8 tokens are keyed by their raw token strings
  EXPECT_NE(m[0xC3], m[0xE4]);
  EXPECT_NE(m[265], m['<']);                      // the special token decodes to its content
  // 256 bytes: 26 upper-case letters merge into lower case, 0x09/0x0A/0x0D and space share " ", the 128
  // bytes >= 0x80 are 128 distinct raw keys; among the extras only the combining mark, the partial
  // "\xE4\xBD" and "hello"/"ete" are new keys, plus the special token.
  EXPECT_EQ(map.n_compressed, 256 - 26 - 3 + 4 + 1);
}

TEST(EngramHashing, SideFileMultipliersMustEqualPcg64) {
  if (!std::filesystem::exists(kTinyA + "/engram_token_map.safetensors")) GTEST_SKIP() << kTinyA << " is absent";
  auto config = load_model_config(kTinyA);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto good = load_engram_hashing(config.value(), kTinyA);
  ASSERT_TRUE(good.ok()) << good.status().message();
  TempDir dir;
  EngramHashing tampered = good.value();
  tampered.multipliers[1][2] += 2;
  ASSERT_TRUE(write_engram_side_file(config.value(), tampered, dir.file("engram_token_map.safetensors")).ok());
  auto bad = load_engram_hashing(config.value(), dir.path().string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'engram.multipliers' [1, 2]"), std::string::npos) << bad.status().message();
  // Written back unchanged, the side file loads to the same hashing.
  ASSERT_TRUE(write_engram_side_file(config.value(), good.value(), dir.file("engram_token_map.safetensors")).ok());
  auto again = load_engram_hashing(config.value(), dir.path().string());
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->token_map, good->token_map);
  EXPECT_EQ(again->pad, good->pad);
  EXPECT_EQ(again->multipliers, good->multipliers);
  EXPECT_EQ(again->offsets, good->offsets);
}

TEST(EngramHashing, DerivesFromTokenizerJsonWithoutSideFile) {
  if (!std::filesystem::exists(kTinyA + "/config.json")) GTEST_SKIP() << kTinyA << " is absent";
  auto loaded = load_model_config(kTinyA);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ModelConfig config = loaded.value();
  TempDir dir;
  auto none = load_engram_hashing(config, dir.path().string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("engram_token_map.safetensors"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("tokenizer.json"), std::string::npos) << none.status().message();

  testing::write_text(dir.file("tokenizer.json"), tokenizer_json(kExtra));
  auto mismatch = load_engram_hashing(config, dir.path().string());  // tiny-a's compressed vocab is 308
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("tokenizer.json: the Engram normalizer gives a compressed vocabulary of 232 ids but "
                                             "config.json's engram_compressed_vocab_size is 308"),
            std::string::npos)
      << mismatch.status().message();

  ModelConfig no_size = config;
  no_size.engram_compressed_vocab_size = 0;  // a config that leaves the field out: an error, not a crash
  auto zero = load_engram_hashing(no_size, dir.path().string());
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("engram_compressed_vocab_size > 0"), std::string::npos) << zero.status().message();

  config.engram_compressed_vocab_size = 232;
  auto derived = load_engram_hashing(config, dir.path().string());
  ASSERT_TRUE(derived.ok()) << derived.status().message();
  ASSERT_EQ(int64_t(derived->token_map.size()), config.vocab_size);  // 512 > the tokenizer's 266 ids
  EXPECT_EQ(derived->pad, derived->token_map[2]);
  EXPECT_EQ(derived->token_map[266], derived->pad);
  EXPECT_EQ(derived->token_map[511], derived->pad);
  EXPECT_EQ(derived->multipliers[0], engram_multipliers(config.engram_layers[0], 232, config.engram_max_ngram));
  EXPECT_EQ(derived->multipliers[1], engram_multipliers(config.engram_layers[1], 232, config.engram_max_ngram));
}

// The real DeepSeek-V4 tokenizer (fetched by scripts/fetch_tokenizers.sh) yields V4.1's compressed vocab.
TEST(EngramTokenMap, RealV4TokenizerGives99092) {
  const char* dir = std::getenv("DEEPINFER_TOKENIZER_DIR");
  const std::string path = std::string(dir ? dir : DEEPINFER_SOURCE_DIR "/build/tokenizers") + "/v4/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (bash scripts/fetch_tokenizers.sh build/tokenizers)";
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const EngramTokenMap map = build_engram_token_map(tok.value());
  EXPECT_EQ(map.token_map.size(), 129280u);
  EXPECT_EQ(map.n_compressed, 99092);
  EXPECT_EQ(map.token_map[2], 2);  // the pad id's compressed id
}

}  // namespace
}  // namespace deepinfer
