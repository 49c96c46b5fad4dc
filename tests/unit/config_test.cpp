// config.json -> ModelConfig: the golden configs parse to the right values; every missing, mistyped or
// inconsistent field is an error that names the field (and never an exception or a crash).
#include "model/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "temp_dir.h"

namespace deepinfer {
namespace {

using nlohmann::json;

const std::string kGolden = DEEPINFER_GOLDEN_DIR "/v4-flash";

json golden_config(const std::string& model) {
  return json::parse(deepinfer::testing::read_text(kGolden + "/" + model + "/config.json"));
}

// Tests that start from the golden configs skip (with the reason) when ../shared/golden is absent.
class ModelConfigParse : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kGolden + "/flash-tiny/config.json")) {
      GTEST_SKIP() << "golden configs not found under " << kGolden;
    }
  }
};

Result<ModelConfig> parse(const json& j) { return parse_model_config(j.dump(), "test/config.json"); }

void expect_error_naming(const Result<ModelConfig>& result, const std::string& field) {
  ASSERT_FALSE(result.ok()) << "accepted a config with a bad '" << field << "'";
  const std::string& message = result.status().message();
  EXPECT_NE(message.find(field), std::string::npos) << "'" << field << "' not in: " << message;
  EXPECT_NE(message.find("test/config.json"), std::string::npos) << message;
}

TEST_F(ModelConfigParse, ParsesGoldenFlashTiny) {
  auto r = load_model_config(kGolden + "/flash-tiny");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ModelConfig& c = r.value();
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.dim, 256);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.nope_head_dim(), 448);
  EXPECT_EQ(c.q_lora_rank, 128);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 64);
  EXPECT_EQ(c.window_size, 128);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 12);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.n_activated_experts, 2);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_inter_dim, 128);
  EXPECT_EQ(c.n_hash_layers, 3);
  EXPECT_DOUBLE_EQ(c.route_scale, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.weight_block, 128);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000);
  EXPECT_DOUBLE_EQ(c.rope.compress_theta, 160000);
  EXPECT_DOUBLE_EQ(c.rope.yarn_factor, 16);
  EXPECT_EQ(c.rope.yarn_original_max_pos, 65536);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1);
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 0, 4, 128, 0}));
  EXPECT_EQ(c.compress_ratio(3), 128);
}

TEST_F(ModelConfigParse, ParsesGoldenProTiny) {
  auto r = load_model_config(kGolden + "/pro-tiny");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().compress_ratios, (std::vector<int>{128, 128, 4, 128, 0}));
  EXPECT_DOUBLE_EQ(r.value().route_scale, 2.5);
  EXPECT_EQ(r.value().index_topk, 16);
  EXPECT_EQ(r.value().n_activated_experts, 3);
  EXPECT_EQ(r.value().vocab_size, 512);
}

TEST(ModelConfig, MissingFileNamesThePath) {
  deepinfer::testing::TempDir dir;
  auto r = load_model_config(dir.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.file("config.json")), std::string::npos) << r.status().message();
}

TEST(ModelConfig, MalformedJson) {
  auto r = parse_model_config("{\"hidden_size\": 256,", "test/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("test/config.json"), std::string::npos);
  EXPECT_FALSE(parse_model_config("[]", "test/config.json").ok());
}

TEST_F(ModelConfigParse, EveryMissingRequiredFieldIsNamed) {
  const char* required[] = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "qk_rope_head_dim",
      "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window", "index_n_heads", "index_head_dim",
      "index_topk", "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
      "num_hash_layers", "routed_scaling_factor", "swiglu_limit", "rms_norm_eps", "hc_mult",
      "hc_sinkhorn_iters", "hc_eps", "rope_theta", "compress_rope_theta", "compress_ratios", "scoring_func",
      "rope_scaling", "model_type"};
  for (const char* field : required) {
    json j = golden_config("flash-tiny");
    j.erase(field);
    SCOPED_TRACE(field);
    expect_error_naming(parse(j), field);
  }
  for (const char* field : {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow"}) {
    json j = golden_config("flash-tiny");
    j["rope_scaling"].erase(field);
    SCOPED_TRACE(field);
    expect_error_naming(parse(j), field);
  }
}

TEST_F(ModelConfigParse, NullCountsAsMissing) {
  json j = golden_config("flash-tiny");
  j["hidden_size"] = nullptr;
  expect_error_naming(parse(j), "hidden_size");
}

TEST_F(ModelConfigParse, WrongTypesAreNamed) {
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {
      {"hidden_size", "256"},           {"hidden_size", 256.5},          {"hidden_size", true},
      {"hidden_size", json::array({256})}, {"num_hash_layers", true},    {"vocab_size", 1e12},
      {"n_routed_experts", -8.0},       {"rms_norm_eps", "1e-6"},        {"rms_norm_eps", false},
      {"routed_scaling_factor", json::object()}, {"scoring_func", 3},    {"compress_ratios", 4},
      {"compress_ratios", json::array({0, 0, 4, "128", 0})},             {"compress_ratios", json::array({0, 0, 4, 128.5, 0})},
      {"hc_mult", 4.0000001},
  };
  for (const Case& c : cases) {
    json j = golden_config("flash-tiny");
    j[c.field] = c.value;
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    expect_error_naming(parse(j), c.field);
  }
}

TEST_F(ModelConfigParse, BadRopeScalingAndQuantizationConfig) {
  json j = golden_config("flash-tiny");
  j["rope_scaling"]["factor"] = "16";
  expect_error_naming(parse(j), "factor");
  j = golden_config("flash-tiny");
  j["rope_scaling"] = 16;
  expect_error_naming(parse(j), "rope_scaling");
  j = golden_config("flash-tiny");
  j["quantization_config"]["weight_block_size"] = {128, 64};
  expect_error_naming(parse(j), "weight_block_size");
  j = golden_config("flash-tiny");
  j["quantization_config"]["weight_block_size"] = {"128", 128};
  expect_error_naming(parse(j), "weight_block_size");
  j = golden_config("flash-tiny");
  j["quantization_config"]["weight_block_size"] = {128, "128"};
  expect_error_naming(parse(j), "weight_block_size");
  j = golden_config("flash-tiny");
  j["quantization_config"]["weight_block_size"] = {0, 0};
  expect_error_naming(parse(j), "weight_block_size");
}

TEST_F(ModelConfigParse, CompressRatiosLengthAndValues) {
  json j = golden_config("flash-tiny");
  j["compress_ratios"] = {0, 0, 4, 128};  // MTP entry missing
  expect_error_naming(parse(j), "compress_ratios");
  j["compress_ratios"] = {0, 0, 4, 128, 0, 0};
  expect_error_naming(parse(j), "compress_ratios");
  j["compress_ratios"] = {0, 0, 3, 128, 0};
  expect_error_naming(parse(j), "compress_ratios[2]");
  j["compress_ratios"] = {0, 0, 4, 128, 4};
  expect_error_naming(parse(j), "compress_ratios");
  j = golden_config("flash-tiny");
  j["num_nextn_predict_layers"] = 0;  // then compress_ratios must have exactly num_hidden_layers entries
  expect_error_naming(parse(j), "compress_ratios");
  j["compress_ratios"] = {0, 0, 4, 128};
  EXPECT_TRUE(parse(j).ok());
}

TEST_F(ModelConfigParse, UnsupportedModelTypeAndScoring) {
  json j = golden_config("flash-tiny");
  j["model_type"] = "deepseek_v3";
  expect_error_naming(parse(j), "model_type");
  auto r = parse(j);
  EXPECT_NE(r.status().message().find("deepseek_v3"), std::string::npos);
  j["model_type"] = 4;
  expect_error_naming(parse(j), "model_type");
  j = golden_config("flash-tiny");
  j["scoring_func"] = "softmax";
  expect_error_naming(parse(j), "scoring_func");
}

TEST_F(ModelConfigParse, InconsistentValuesAreNamed) {
  struct Case {
    const char* field;
    json value;
    const char* named;
  };
  const Case cases[] = {
      {"num_experts_per_tok", 9, "num_experts_per_tok"},
      {"num_experts_per_tok", 0, "num_experts_per_tok"},
      {"o_groups", 3, "o_groups"},
      {"index_head_dim", 64, "index_head_dim"},
      {"hc_mult", 2, "hc_mult"},
      {"num_hash_layers", 5, "num_hash_layers"},
      {"sliding_window", 0, "sliding_window"},
      {"qk_rope_head_dim", 63, "qk_rope_head_dim"},
      {"head_dim", 500, "head_dim"},
      {"moe_intermediate_size", 100, "moe_intermediate_size"},
      {"hidden_size", 0, "hidden_size"},
      {"vocab_size", -5, "vocab_size"},
  };
  for (const Case& c : cases) {
    json j = golden_config("flash-tiny");
    j[c.field] = c.value;
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    expect_error_naming(parse(j), c.named);
  }
}

// V4.1 token ids the model embeds itself must lie inside the vocabulary.
TEST_F(ModelConfigParse, V41SpecialIdsOutsideTheVocabulary) {
  const std::string path = DEEPINFER_GOLDEN_DIR "/v41-flash/tiny-a/config.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "golden config not found: " << path;
  for (const char* field : {"dspark_noise_token_id", "engram_pad_token_id"}) {
    for (int value : {-1, 512, 128799}) {
      json j = json::parse(deepinfer::testing::read_text(path));
      j["text_config"][field] = value;
      SCOPED_TRACE(std::string(field) + " = " + std::to_string(value));
      expect_error_naming(parse(j), field);
    }
  }
}

TEST_F(ModelConfigParse, OptionalFieldsDefault) {
  json j = golden_config("flash-tiny");
  j.erase("bos_token_id");
  j.erase("eos_token_id");
  j.erase("quantization_config");
  j.erase("hidden_act");
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().weight_block, 128);
  EXPECT_EQ(r.value().eos_token_id, 1);
}

}  // namespace
}  // namespace deepinfer
