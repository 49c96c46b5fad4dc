// Weight binding: the golden checkpoints and generated ones bind; a config that disagrees with the
// tensors, a missing / extra / mistyped / misshapen tensor and an out-of-range hash route each fail with
// a message that names the tensor.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint_edit.h"
#include "model/random_checkpoint.h"
#include "temp_dir.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using deepinfer::testing::find_tensor;
using deepinfer::testing::read_text;
using deepinfer::testing::StoredTensor;
using deepinfer::testing::TempDir;
using deepinfer::testing::write_text;
using nlohmann::json;

const std::string kGolden = DEEPINFER_GOLDEN_DIR "/v4-flash";

// Loads config + checkpoint from dir and binds; returns the binding status.
Status bind_dir(const std::string& dir) {
  auto config = load_model_config(dir);
  if (!config.ok()) return config.status();
  auto ckpt = Checkpoint::open(dir);
  if (!ckpt.ok()) return ckpt.status();
  auto weights = bind_weights(config.value(), *ckpt.value());
  return weights.ok() ? Status() : weights.status();
}

void expect_bind_error(const std::string& dir, std::initializer_list<std::string> pieces) {
  const Status s = bind_dir(dir);
  ASSERT_FALSE(s.ok()) << "bound a checkpoint that should fail (expected: " << *pieces.begin() << ")";
  for (const std::string& piece : pieces) {
    EXPECT_NE(s.message().find(piece), std::string::npos) << "'" << piece << "' not in: " << s.message();
  }
}

class WeightBinding : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGolden + "/flash-tiny/model.safetensors.index.json")) {
      GTEST_SKIP() << "golden checkpoints not found under " << kGolden;
    }
  }
  // A view of a golden checkpoint (shards and index linked, not copied) with a modified config.json.
  void golden_with_config(const std::string& model, const json& config) {
    for (const auto& entry : fs::directory_iterator(kGolden + "/" + model)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("model", 0) == 0) fs::create_symlink(entry.path(), dir_.path() / name);
    }
    write_text(dir_.file("config.json"), config.dump(2));
  }
  json golden_config(const std::string& model) { return json::parse(read_text(kGolden + "/" + model + "/config.json")); }
  // dir_ := a generated flash-tiny-shaped checkpoint (made once per suite) after edit.
  void random_flash_edited(const std::function<void(std::vector<StoredTensor>&)>& edit) {
    ASSERT_TRUE(pristine_ok_);
    fs::copy_file(pristine_->file("config.json"), dir_.file("config.json"), fs::copy_options::overwrite_existing);
    std::vector<StoredTensor> tensors = deepinfer::testing::read_checkpoint(pristine_->path().string());
    ASSERT_FALSE(tensors.empty());
    edit(tensors);
    deepinfer::testing::write_checkpoint(dir(), tensors);
  }
  std::string dir() const { return dir_.path().string(); }

  static void SetUpTestSuite() {
    if (!fs::exists(kGolden + "/flash-tiny/config.json")) return;
    pristine_ = new TempDir();
    pristine_ok_ = write_random_checkpoint(read_text(kGolden + "/flash-tiny/config.json"), 7, pristine_->path().string(), 3).ok();
  }
  static void TearDownTestSuite() {
    delete pristine_;
    pristine_ = nullptr;
  }

  TempDir dir_;
  static inline TempDir* pristine_ = nullptr;
  static inline bool pristine_ok_ = false;
};

TEST_F(WeightBinding, BindsGoldenFlashTiny) {
  const std::string model = kGolden + "/flash-tiny";
  auto config = load_model_config(model);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto ckpt = Checkpoint::open(model);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto bound = bind_weights(config.value(), *ckpt.value());
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  const ModelWeights& w = bound.value();
  const Checkpoint& c = *ckpt.value();

  EXPECT_EQ(expected_tensors(config.value()).size(), c.tensor_names().size());
  EXPECT_EQ(w.embed, c.find("embed.weight")->as<uint16_t>()) << "weights must be views into the mapping";
  EXPECT_EQ(w.head_proj.dtype, DType::kBF16);
  EXPECT_EQ(w.head_proj.n_out, 1024);
  EXPECT_EQ(w.head_proj.n_in, 256);
  ASSERT_EQ(w.layers.size(), 4u);
  ASSERT_EQ(w.mtp.size(), 1u);
  for (int l = 0; l < 4; ++l) {
    const BlockWeights& b = w.layers[size_t(l)];
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(b.compress_ratio, config.value().compress_ratios[size_t(l)]);
    EXPECT_EQ(b.hash_routed, l < 3);
    EXPECT_EQ(b.tid2eid != nullptr, l < 3);
    EXPECT_EQ(b.gate_bias != nullptr, l >= 3);
    EXPECT_EQ(b.compressor.wkv.data != nullptr, b.compress_ratio != 0);
    EXPECT_EQ(b.index_wq_b.data != nullptr, b.compress_ratio == 4);
    ASSERT_EQ(b.experts.size(), 8u);
    EXPECT_EQ(b.experts[7].w2.dtype, DType::kI8);
    EXPECT_EQ(b.experts[7].w2.n_out, 256);
    EXPECT_EQ(b.experts[7].w2.n_in, 128);
    EXPECT_EQ(b.experts[7].w2.block, 32);
    EXPECT_NE(b.experts[7].w2.scale, nullptr);
    EXPECT_EQ(b.wq_b.dtype, DType::kF8E4M3);
    EXPECT_EQ(b.wq_b.n_out, 2048);
    EXPECT_EQ(b.wq_b.n_in, 128);
    EXPECT_EQ(b.wq_b.block, 128);
    EXPECT_EQ(b.wo_a.n_in, 1024);
    EXPECT_EQ(b.shared.w2.n_in, 128);
  }
  EXPECT_EQ(w.layers[2].compressor.wkv.n_out, 1024);        // ratio 4: overlap width 2 * head_dim
  EXPECT_EQ(w.layers[3].compressor.wkv.n_out, 512);         // ratio 128
  EXPECT_EQ(w.layers[2].index_weights_proj.n_out, 4);
  EXPECT_FALSE(w.mtp[0].block.hash_routed);
  EXPECT_NE(w.mtp[0].block.gate_bias, nullptr);
  EXPECT_NE(w.mtp[0].e_proj.data, nullptr);
  EXPECT_NE(w.mtp[0].head.hc_fn, nullptr);
  EXPECT_NE(w.mtp[0].head.norm, w.head.norm);
}

TEST_F(WeightBinding, BindsGoldenProTiny) {
  const Status s = bind_dir(kGolden + "/pro-tiny");
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(WeightBinding, BindsGeneratedCheckpoints) {
  ASSERT_TRUE(pristine_ok_);
  Status s = bind_dir(pristine_->path().string());
  EXPECT_TRUE(s.ok()) << s.message();
  random_flash_edited([](std::vector<StoredTensor>&) {});  // the read / write-back helper itself is faithful
  s = bind_dir(dir());
  EXPECT_TRUE(s.ok()) << s.message();
  TempDir pro;
  s = write_random_checkpoint(read_text(kGolden + "/pro-tiny/config.json"), 11, pro.path().string(), 1);
  ASSERT_TRUE(s.ok()) << s.message();
  s = bind_dir(pro.path().string());
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(WeightBinding, ConfigHiddenSizeDisagrees) {
  json c = golden_config("flash-tiny");
  c["hidden_size"] = 512;
  golden_with_config("flash-tiny", c);
  expect_bind_error(dir(), {"tensor 'embed.weight'", "[1024, 256]", "[1024, 512]"});
}

TEST_F(WeightBinding, ConfigVocabSizeDisagrees) {
  json c = golden_config("pro-tiny");
  c["vocab_size"] = 1024;
  golden_with_config("pro-tiny", c);
  expect_bind_error(dir(), {"tensor 'embed.weight'", "[512, 256]"});
}

TEST_F(WeightBinding, ConfigHasMoreExperts) {
  json c = golden_config("flash-tiny");
  c["n_routed_experts"] = 16;
  golden_with_config("flash-tiny", c);
  expect_bind_error(dir(), {"tensor 'layers.0.ffn.gate.weight'", "[8, 256]", "[16, 256]"});
}

TEST_F(WeightBinding, ConfigHasFewerExperts) {
  json c = golden_config("flash-tiny");
  c["n_routed_experts"] = 4;
  golden_with_config("flash-tiny", c);
  expect_bind_error(dir(), {"unexpected tensor 'layers.0.ffn.experts.4."});
}

TEST_F(WeightBinding, ConfigHasFewerLayers) {
  json c = golden_config("flash-tiny");
  c["num_hidden_layers"] = 3;
  c["compress_ratios"] = {0, 0, 4, 0};
  golden_with_config("flash-tiny", c);
  expect_bind_error(dir(), {"unexpected tensor 'layers.3."});
}

TEST_F(WeightBinding, ConfigHashLayerCountDisagrees) {
  json c = golden_config("flash-tiny");
  c["num_hash_layers"] = 2;
  golden_with_config("flash-tiny", c);
  expect_bind_error(dir(), {"unexpected tensor 'layers.2.ffn.gate.tid2eid'"});
  c["num_hash_layers"] = 4;
  write_text(dir_.file("config.json"), c.dump());
  expect_bind_error(dir(), {"layers.3.ffn.gate"});
}

TEST_F(WeightBinding, ConfigCompressRatioDisagrees) {
  json c = golden_config("flash-tiny");
  c["compress_ratios"] = {0, 0, 4, 4, 0};  // layer 3 is ratio 128 in the tensors
  golden_with_config("flash-tiny", c);
  expect_bind_error(dir(), {"tensor 'layers.3.attn."});
}

TEST_F(WeightBinding, MissingTensor) {
  random_flash_edited([](std::vector<StoredTensor>& t) {
    std::erase_if(t, [](const StoredTensor& s) { return s.tensor.name == "layers.1.attn.q_norm.weight"; });
  });
  expect_bind_error(dir(), {"missing tensor 'layers.1.attn.q_norm.weight'", "BF16 [128]"});
}

TEST_F(WeightBinding, MissingScale) {
  random_flash_edited([](std::vector<StoredTensor>& t) {
    std::erase_if(t, [](const StoredTensor& s) { return s.tensor.name == "mtp.0.ffn.experts.3.w2.scale"; });
  });
  expect_bind_error(dir(), {"missing tensor 'mtp.0.ffn.experts.3.w2.scale'"});
}

TEST_F(WeightBinding, WrongDtype) {
  random_flash_edited([](std::vector<StoredTensor>& t) {
    StoredTensor* s = find_tensor(t, "layers.0.attn_norm.weight");
    ASSERT_NE(s, nullptr);
    s->tensor.dtype = DType::kF16;  // same bytes, other dtype
  });
  expect_bind_error(dir(), {"tensor 'layers.0.attn_norm.weight'", "F16", "BF16"});
}

TEST_F(WeightBinding, WrongDtypeOfQuantizedWeight) {
  random_flash_edited([](std::vector<StoredTensor>& t) {
    StoredTensor* s = find_tensor(t, "layers.2.attn.wq_b.weight");
    ASSERT_NE(s, nullptr);
    s->tensor.dtype = DType::kI8;  // e4m3 bytes claimed as packed fp4
  });
  expect_bind_error(dir(), {"tensor 'layers.2.attn.wq_b.weight'", "I8", "F8_E4M3"});
}

TEST_F(WeightBinding, WrongShape) {
  random_flash_edited([](std::vector<StoredTensor>& t) {
    StoredTensor* s = find_tensor(t, "norm.weight");
    ASSERT_NE(s, nullptr);
    s->tensor.shape = {128, 2};
  });
  expect_bind_error(dir(), {"tensor 'norm.weight'", "[128, 2]", "[256]"});
}

TEST_F(WeightBinding, ExtraTensor) {
  random_flash_edited([](std::vector<StoredTensor>& t) {
    t.push_back({t.front().shard, {"layers.0.attn.bogus", DType::kF32, {1}, std::vector<uint8_t>(4, 0)}});
  });
  expect_bind_error(dir(), {"unexpected tensor 'layers.0.attn.bogus'"});
}

TEST_F(WeightBinding, HashRouteOutOfRange) {
  for (int64_t bad : {int64_t(8), int64_t(-1), int64_t(1) << 40}) {
    random_flash_edited([bad](std::vector<StoredTensor>& t) {
      StoredTensor* s = find_tensor(t, "layers.1.ffn.gate.tid2eid");
      ASSERT_NE(s, nullptr);
      std::memcpy(&s->tensor.bytes[(5 * 2 + 1) * 8], &bad, 8);  // row 5, second expert
    });
    SCOPED_TRACE(bad);
    expect_bind_error(dir(), {"layers.1.ffn.gate.tid2eid[5]", std::to_string(bad), "0..7"});
  }
}

}  // namespace
}  // namespace deepinfer
