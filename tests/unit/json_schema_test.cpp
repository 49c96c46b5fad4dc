// The JSON Schema compiler (format/json_schema.h), the schema prefix validator (format/json_schema_prefix.h) and
// its token mask (engine/json_schema_mask.h): unsupported keywords are refused by name and path; valid documents
// are accepted at every split point; invalid ones are refused at the first byte no completion can satisfy;
// random documents generated from schemas are accepted; random JSON texts the validator accepts to the end are
// valid (an independent whole-document check); the mask equals trying every token (real V4 tokenizer; skipped
// without it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/json_schema_mask.h"
#include "format/json_schema.h"
#include "format/json_schema_prefix.h"
#include "format/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::shared_ptr<const CompiledJsonSchema> compile(const std::string& schema_text) {
  Result<CompiledJsonSchema> c = compile_json_schema(Json::parse(schema_text));
  EXPECT_TRUE(c.ok()) << schema_text << ": " << (c.ok() ? "" : c.status().message());
  if (!c.ok()) return nullptr;
  return std::make_shared<const CompiledJsonSchema>(std::move(c.value()));
}

std::string compile_error(const std::string& schema_text) {
  Result<CompiledJsonSchema> c = compile_json_schema(Json::parse(schema_text));
  return c.ok() ? "" : c.status().message();
}

// The byte offset where the validator first refuses `doc`, or -1 if it takes it all.
int64_t first_refused(const std::shared_ptr<const CompiledJsonSchema>& schema, const std::string& doc) {
  JsonSchemaPrefixValidator v(schema);
  for (size_t i = 0; i < doc.size(); ++i) {
    if (!v.feed(uint8_t(doc[i]))) return int64_t(i);
  }
  return -1;
}

// An independent whole-document check written from the JSON Schema rules of the subset (not from the compiled
// graph): the oracle for the random tests.
bool validates(const Json& v, const Json& s, const Json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    if (ref == "#") return validates(v, root, root);
    const std::string key = ref.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return validates(v, root[key][ref.substr(key.size() + 3)], root);
  }
  if (s.contains("anyOf")) {
    for (const Json& b : s["anyOf"]) {
      if (validates(v, b, root)) return true;
    }
    return false;
  }
  if (s.contains("type")) {
    const Json types = s["type"].is_array() ? s["type"] : Json::array({s["type"]});
    bool ok = false;
    for (const Json& t : types) {
      ok = ok || (t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) || (t == "string" && v.is_string()) ||
           (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) || (t == "array" && v.is_array()) ||
           (t == "object" && v.is_object());
    }
    if (!ok) return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (v.is_object()) {
    for (const auto& [k, sub] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!validates(sub, s["properties"][k], root)) return false;
      } else if (s.contains("additionalProperties") && !validates(sub, s["additionalProperties"], root)) {
        return false;
      }
    }
    for (const Json& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
  }
  if (v.is_array()) {
    if (int64_t(v.size()) < s.value("minItems", int64_t(0)) || int64_t(v.size()) > s.value("maxItems", INT64_MAX)) return false;
    for (const Json& item : v) {
      if (s.contains("items") && !validates(item, s["items"], root)) return false;
    }
  }
  return true;
}

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "title": "Name"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "role": {"enum": ["admin", "user", 7, null]},
    "address": {"$ref": "#/$defs/address"},
    "score": {"anyOf": [{"type": "number"}, {"type": "null"}]}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"const": "75001"}},
                        "required": ["city"], "additionalProperties": false}}
})";

TEST(JsonSchemaCompile, UnsupportedKeywordsAreRefusedByNameAndPath) {
  EXPECT_EQ(compile_error(R"({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}})"),
            "#/properties/zip: unsupported keyword 'pattern' (see the README for the supported JSON Schema subset)");
  EXPECT_NE(compile_error(R"({"type": "array", "items": {"minimum": 3}})").find("#/items: unsupported keyword 'minimum'"), std::string::npos);
  EXPECT_NE(compile_error(R"({"oneOf": [{"type": "string"}]})").find("'oneOf'"), std::string::npos);
  EXPECT_NE(compile_error(R"({"anyOf": [{"type": "string"}, {"enum": ["a"]}]})").find("#/anyOf: two branches accept string"), std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "http://example.com/s.json"})").find("#/$ref"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "required": ["x"]})").find("#/required"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a\"b": {}}})").find("escapes"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "widget"})").find("#/type: unknown type"), std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})").find("cycle"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": false}, "required": ["a"]})").find("no JSON value"), std::string::npos);
  // Annotations are fine.
  EXPECT_EQ(compile_error(R"({"$schema": "x", "title": "t", "description": "d", "default": 1, "examples": [1], "type": "integer"})"), "");
  EXPECT_EQ(compile_error(kPerson), "");
}

TEST(JsonSchemaPrefix, ValidDocumentsAreAcceptedAtEverySplitPoint) {
  auto person = compile(kPerson);
  const std::vector<std::string> docs = {
      R"({"name": "Ada", "age": 36})",
      R"({"age":-0,"name":"\u00e9\"x\" caf)" "\xC3\xA9" R"(","tags":[],"role":null})",
      R"( { "role" : 7 , "tags" : [ "a" , "b" , "c" ] , "age" : 1 , "name" : "" , "score" : -1.5e+3 } )",
      R"({"address": {"zip": "75001", "city": "Paris"}, "name": "n", "age": 10, "score": null, "role": "admin"})",
  };
  for (const std::string& doc : docs) {
    ASSERT_TRUE(validates(Json::parse(doc), Json::parse(kPerson), Json::parse(kPerson))) << doc;
    for (size_t split = 0; split <= doc.size(); ++split) {
      JsonSchemaPrefixValidator v(person);
      ASSERT_TRUE(v.feed(std::string_view(doc).substr(0, split))) << doc << " split " << split;
      EXPECT_TRUE(v.accepts(std::string_view(doc).substr(split))) << doc << " split " << split;
      ASSERT_TRUE(v.feed(std::string_view(doc).substr(split))) << doc << " split " << split;
      EXPECT_TRUE(v.can_end()) << doc;
    }
    EXPECT_EQ(first_refused(person, doc), -1) << doc;
  }
}

// Each case: the document and the offset of the first byte after which no completion satisfies the schema.
TEST(JsonSchemaPrefix, InvalidDocumentsAreRefusedAtTheFirstImpossibleByte) {
  auto person = compile(kPerson);
  struct Case {
    std::string doc;
    int64_t refused_at;
  };
  const std::vector<Case> cases = {
      {R"([1])", 0},                                     // not an object
      {R"({})", 1},                                      // '}' with name and age missing
      {R"({"name": "a"})", 12},                          // age still missing
      {R"({"nam": 1})", 5},                              // no declared key is "nam" and no other keys
      {R"({"namx": 1})", 5},
      {R"({"name": 1})", 9},                             // name is a string
      {R"({"age": 1.5})", 9},                            // integers have no fraction
      {R"({"age": 1e3})", 9},
      {R"({"age": 1, "age": 2})", 13},                   // a declared key repeats (no unseen key starts "ag")
      {R"({"role": "adm1"})", 13},                       // not an enum value
      {R"({"role": 70})", 10},                           // 7 then a digit: no enum value
      {R"({"role": true})", 9},
      {R"({"tags": ["a", "b", "c", "d"]})", 23},         // ',' past maxItems
      {R"({"tags": [1]})", 10},
      {R"({"score": "x"})", 10},                         // anyOf number | null
      {R"({"address": {"zip": "75002"}})", 25},
      {R"({"address": {"zip": "75001"}})", 27},          // city missing
      {R"({"n\u0061me": "x"})", 3},                      // no escapes in keys
      {R"({"name": "a", "age": 1}x)", 23},               // only whitespace after the document
  };
  for (const Case& c : cases) EXPECT_EQ(first_refused(person, c.doc), c.refused_at) << c.doc;

  // With other keys allowed: unknown keys pass, a declared key keeps its schema, '}' waits for required keys.
  auto open = compile(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": {"type": "boolean"}})");
  EXPECT_EQ(first_refused(open, R"({"ab": true, "a": 2, "zz": false})"), -1);
  EXPECT_EQ(first_refused(open, R"({"a": "x"})"), 6);
  EXPECT_EQ(first_refused(open, R"({"ab": 1})"), 7);
  EXPECT_EQ(first_refused(open, R"({"b": true})"), 10);
  EXPECT_EQ(first_refused(open, R"({"a": 1, "a": 2})"), 11);  // a declared key repeats: refused at its closing quote
  // Arrays: minItems, and a full object-free item set.
  auto arr = compile(R"({"type": "array", "items": {"type": ["integer", "null"]}, "minItems": 2, "maxItems": 2})");
  EXPECT_EQ(first_refused(arr, "[]"), 1);
  EXPECT_EQ(first_refused(arr, "[1]"), 2);
  EXPECT_EQ(first_refused(arr, "[1, null, 3]"), 8);
  EXPECT_EQ(first_refused(arr, "[1, null]"), -1);
  // A property whose schema cannot be satisfied is never started; additionalProperties false with every key
  // seen refuses ','.
  auto closed = compile(R"({"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "array", "items": false, "minItems": 1}}, "additionalProperties": false})");
  EXPECT_EQ(first_refused(closed, R"({"b": [])"), 2);
  EXPECT_EQ(first_refused(closed, R"({"a": null, )"), 10);
}

TEST(JsonSchemaPrefix, TopLevelScalarsEndWhereTheyCan) {
  auto n = compile(R"({"type": "integer"})");
  JsonSchemaPrefixValidator v(n);
  EXPECT_FALSE(v.can_end());
  ASSERT_TRUE(v.feed(std::string_view("12")));
  EXPECT_TRUE(v.can_end());
  EXPECT_FALSE(v.complete());
  EXPECT_FALSE(v.accepts("."));
  auto lit = compile(R"({"enum": [1, 12, "x"]})");
  JsonSchemaPrefixValidator l(lit);
  ASSERT_TRUE(l.feed(uint8_t('1')));
  EXPECT_TRUE(l.can_end());
  EXPECT_TRUE(l.accepts("2"));
  EXPECT_FALSE(l.accepts("3"));
  JsonSchemaPrefixValidator x(lit);
  ASSERT_TRUE(x.feed(std::string_view("\"x\"")));
  EXPECT_TRUE(x.complete());
}

TEST(JsonSchemaPrefix, WhitespaceRunsAreBounded) {
  auto any = compile(R"({"type": "array"})");
  const std::string run(JsonSchemaPrefixValidator::kMaxWhitespaceRun, ' ');
  EXPECT_EQ(first_refused(any, run + "[" + run + "\"  " + run + "\"" + run + "," + run + "1" + run + "]"), -1);
  EXPECT_EQ(first_refused(any, run + " ["), int64_t(run.size()));
  EXPECT_EQ(first_refused(any, "[1" + run + "\n]"), int64_t(run.size()) + 2);
}

TEST(JsonSchemaPrefix, RecursiveReferencesAreFollowed) {
  auto tree = compile(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": false}}})");
  EXPECT_EQ(first_refused(tree, R"({"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]})"), -1);
  EXPECT_EQ(first_refused(tree, R"({"v": 1, "kids": [{"kids": []}]})"), 29);  // "v" missing
}

// Random values of a schema (with random whitespace); keys unescaped and integers plain, as the validator asks.
class Generator {
 public:
  Generator(const Json& root, uint32_t seed) : root_(root), rng_(seed) {}

  std::string value(const Json& s, int depth) {
    if (s.is_boolean()) return "null";
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"];
      if (ref == "#") return value(root_, depth);
      const std::string key = ref.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
      return value(root_[key][ref.substr(key.size() + 3)], depth);
    }
    if (s.contains("anyOf")) return value(s["anyOf"][pick(s["anyOf"].size())], depth);
    if (s.contains("const")) return s["const"].dump();
    if (s.contains("enum")) return s["enum"][pick(s["enum"].size())].dump();
    const Json types = !s.contains("type") ? Json::array({"string", "integer", "null"}) : s["type"].is_array() ? s["type"] : Json::array({s["type"]});
    const std::string t = types[pick(types.size())];
    if (t == "null") return "null";
    if (t == "boolean") return pick(2) ? "true" : "false";
    if (t == "integer") return std::to_string(int64_t(rng_() % 2001) - 1000);
    if (t == "number") return pick(2) ? "-0.5e-3" : "12.25";
    if (t == "string") {
      const std::vector<std::string> parts = {"a", " ", "\\n", "\\\"", "\\u00e9", "\xC3\xA9", "\xF0\x9F\x98\x80", "}", ",", "x"};
      std::string out = "\"";
      for (size_t i = pick(6); i > 0; --i) out += parts[pick(parts.size())];
      return out + "\"";
    }
    if (t == "array") {
      const int64_t lo = s.value("minItems", int64_t(0)), hi = std::min<int64_t>(s.value("maxItems", int64_t(4)), lo + 3);
      const int64_t n = depth > 4 ? lo : lo + int64_t(pick(size_t(hi - lo + 1)));
      std::string out = "[" + ws();
      for (int64_t i = 0; i < n; ++i) {
        if (i > 0) out += ",", out += ws();
        out += value(s.value("items", Json(true)), depth + 1) + ws();
      }
      return out + "]";
    }
    // object: the required keys and some optional ones, in a random order
    std::vector<std::string> keys;
    const Json props = s.value("properties", Json::object());
    const Json required = s.value("required", Json::array());
    for (const auto& [k, sub] : props.items()) {
      const bool req = std::find(required.begin(), required.end(), k) != required.end();
      if (req || (depth < 4 && pick(2))) keys.push_back(k);
    }
    std::shuffle(keys.begin(), keys.end(), rng_);
    std::string out = "{" + ws();
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0) out += ",", out += ws();
      out += Json(keys[i]).dump() + ws() + ":" + ws() + value(props[keys[i]], depth + 1) + ws();
    }
    return out + "}";
  }

  std::string ws() { return pick(3) == 0 ? std::string(" \n\t\r").substr(pick(4), 1 + pick(2)) : ""; }
  size_t pick(size_t n) { return size_t(rng_() % n); }

 private:
  const Json& root_;
  std::mt19937 rng_;
};

const std::vector<std::string> kRandomSchemas = {
    kPerson,
    R"({"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"},
        "kind": {"enum": ["a", "ab", "abc", 1, 12, [1, 2], {"x": null}]}}, "required": ["id", "kind"], "additionalProperties": false},
        "minItems": 1, "maxItems": 5})",
    R"({"$ref": "#/definitions/n", "definitions": {"n": {"type": "object", "properties": {"v": {"type": ["number", "null"]},
        "next": {"anyOf": [{"$ref": "#/definitions/n"}, {"type": "null"}]}}, "required": ["v", "next"], "additionalProperties": false}}})",
    R"({"type": "object", "properties": {"s": {"type": "string"}, "n": {"const": 3}}, "required": ["n"], "additionalProperties": {"type": "integer"}})",
};

TEST(JsonSchemaPrefix, RandomDocumentsOfTheSchemaAreAccepted) {
  for (size_t i = 0; i < kRandomSchemas.size(); ++i) {
    const Json raw = Json::parse(kRandomSchemas[i]);
    auto schema = compile(kRandomSchemas[i]);
    Generator gen(raw, uint32_t(i));
    for (int n = 0; n < 300; ++n) {
      const std::string doc = gen.ws() + gen.value(raw, 0) + gen.ws();
      ASSERT_TRUE(validates(Json::parse(doc), raw, raw)) << doc;  // the generator is right
      ASSERT_EQ(first_refused(schema, doc), -1) << doc;
      JsonSchemaPrefixValidator v(schema);
      ASSERT_TRUE(v.feed(doc));
      EXPECT_TRUE(v.can_end()) << doc;
    }
  }
}

// Soundness: random mutations of valid documents that the validator takes to the end (and may end) parse and
// validate; and where it refuses a byte, the refusal is not premature for the mutations that stay valid.
TEST(JsonSchemaPrefix, AcceptedRandomTextsAreValid) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[],:\" 0123456789.-eEtrufalsn\\xabc";
  int64_t n_accepted = 0, n_valid_mutants = 0;
  for (size_t i = 0; i < kRandomSchemas.size(); ++i) {
    const Json raw = Json::parse(kRandomSchemas[i]);
    auto schema = compile(kRandomSchemas[i]);
    Generator gen(raw, uint32_t(100 + i));
    for (int n = 0; n < 3000; ++n) {
      std::string doc = gen.value(raw, 0);
      for (int m = int(rng() % 3); m >= 0; --m) {
        const size_t at = rng() % (doc.size() + 1);
        switch (rng() % 3) {
          case 0: doc.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          case 1: if (at < doc.size()) doc.erase(at, 1); break;
          default: if (at < doc.size()) doc[at] = alphabet[rng() % alphabet.size()]; break;
        }
      }
      JsonSchemaPrefixValidator v(schema);
      const bool taken = v.feed(doc) && v.can_end();
      const Json parsed = Json::parse(doc, nullptr, false);
      const bool valid = !parsed.is_discarded() && validates(parsed, raw, raw);
      if (taken) {
        ++n_accepted;
        ASSERT_TRUE(valid) << kRandomSchemas[i] << "\n" << doc;
      }
      n_valid_mutants += valid;
    }
  }
  EXPECT_GT(n_accepted, 500);
  EXPECT_GT(n_valid_mutants, n_accepted / 2);
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

// The mask's shortcuts give exactly the tokens that trying every candidate would give, in every state along
// sample documents (keys with and without other keys allowed, enum strings with spaces, numbers at the top).
TEST(JsonSchemaTokenMask, EqualsTryingEveryTokenWithTheRealTokenizer) {
  const std::string path = find_real_tokenizer();
  if (path.empty()) GTEST_SKIP() << "no v4/tokenizer.json (run scripts/fetch_tokenizers.sh build/tokenizers)";
  auto tokenizer = Tokenizer::load(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const int32_t n_vocab = 129280, eos = 1;
  const JsonTokenTable table = build_json_token_table(*tokenizer, n_vocab);
  std::vector<uint8_t> added(size_t(n_vocab), 0);
  for (int32_t id : tokenizer->added_token_ids()) added[size_t(id)] = 1;
  struct Case {
    std::string schema, doc;
  };
  const std::vector<Case> cases = {
      {kPerson, R"({"name": "A\u00e9 )" "\xF0\x9F\x98\x80" R"(", "role": "user", "tags": ["x"], "age": 3})"},
      {R"({"type": "object", "properties": {"the key": {"enum": ["a b", 10, 1]}}, "additionalProperties": {"type": "number"}})",
       R"({"other": 1.5, "the key": "a b", "k": -2})"},
      {R"({"type": "integer"})", "-120"},
      {R"({"type": "array", "items": {"type": "boolean"}})", "[                             true  ,\n\n\t  false]"},
  };
  std::vector<uint8_t> allowed;
  int n_states = 0;
  for (const Case& c : cases) {
    auto schema = compile(c.schema);
    JsonSchemaPrefixValidator scratch(schema);
    for (size_t i = 0; i <= c.doc.size(); ++i) {
      JsonSchemaPrefixValidator at(schema);
      ASSERT_TRUE(at.feed(std::string_view(c.doc).substr(0, i))) << c.doc.substr(0, i);
      json_schema_token_mask(table, at, eos, allowed, scratch);
      ++n_states;
      int64_t n_allowed = 0;
      for (int32_t id = 0; id < n_vocab; ++id) {
        const std::string_view b = tokenizer->token_bytes(id);
        bool expect = !b.empty() && !added[size_t(id)] && !at.complete() && at.accepts(b);
        if (id == eos) expect = at.can_end();
        ASSERT_EQ(bool(allowed[size_t(id)]), expect) << "token " << id << " '" << b << "' after " << c.doc.substr(0, i);
        n_allowed += allowed[size_t(id)];
      }
      EXPECT_GT(n_allowed, 0) << c.doc.substr(0, i);
    }
  }
  EXPECT_GT(n_states, 50);
}

}  // namespace
}  // namespace deepinfer
