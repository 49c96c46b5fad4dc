// The random checkpoint generator: deterministic bytes, the golden on-disk layout, valid codes and
// scales, and per-kind value statistics that match the golden flash-tiny / pro-tiny / tiny-a checkpoints.
#include "model/random_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "checkpoint_edit.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "temp_dir.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using deepinfer::testing::read_bytes;
using deepinfer::testing::read_checkpoint;
using deepinfer::testing::read_text;
using deepinfer::testing::StoredTensor;
using deepinfer::testing::TempDir;
using nlohmann::json;

const std::string kGolden = DEEPINFER_GOLDEN_DIR "/v4-flash";
const std::string kGoldenV41 = DEEPINFER_GOLDEN_DIR "/v41-flash/tiny-a";

class RandomCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGolden + "/flash-tiny/config.json")) GTEST_SKIP() << "golden checkpoints not found under " << kGolden;
  }
  static std::string config_text(const std::string& model) { return read_text(kGolden + "/" + model + "/config.json"); }
  static void generate(const std::string& model, uint64_t seed, const TempDir& dir, int n_shards) {
    const Status s = write_random_checkpoint(config_text(model), seed, dir.path().string(), n_shards);
    ASSERT_TRUE(s.ok()) << s.message();
  }
};

std::map<std::string, std::vector<uint8_t>> all_files(const TempDir& dir) {
  std::map<std::string, std::vector<uint8_t>> files;
  for (const auto& e : fs::directory_iterator(dir.path())) files[e.path().filename().string()] = read_bytes(e.path().string());
  return files;
}

std::map<std::string, StoredTensor> by_name(const std::vector<StoredTensor>& tensors) {
  std::map<std::string, StoredTensor> m;
  for (const StoredTensor& t : tensors) m[t.tensor.name] = t;
  return m;
}

TEST_F(RandomCheckpoint, DeterministicForASeed) {
  TempDir a, b, c;
  generate("flash-tiny", 5, a, 3);
  generate("flash-tiny", 5, b, 3);
  generate("flash-tiny", 6, c, 3);
  const auto fa = all_files(a), fb = all_files(b), fc = all_files(c);
  EXPECT_EQ(fa, fb);
  ASSERT_EQ(fa.size(), fc.size());
  EXPECT_NE(fa.at("model-00001-of-00003.safetensors"), fc.at("model-00001-of-00003.safetensors"));
}

TEST_F(RandomCheckpoint, LayoutMatchesGolden) {
  TempDir dir;
  generate("flash-tiny", 1001, dir, 3);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                          "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  EXPECT_EQ(read_text(dir.file("config.json")), config_text("flash-tiny")) << "config.json must be copied verbatim";

  const json index = json::parse(read_text(dir.file("model.safetensors.index.json")));
  const json golden_index = json::parse(read_text(kGolden + "/flash-tiny/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], golden_index["metadata"]["total_size"]);
  std::set<std::string> keys, golden_keys;
  for (const auto& [k, v] : index["weight_map"].items()) keys.insert(k);
  for (const auto& [k, v] : golden_index["weight_map"].items()) golden_keys.insert(k);
  EXPECT_EQ(keys, golden_keys);

  // MTP alone in the last shard; every tensor where the index says, with the golden dtype and shape.
  const auto golden = by_name(read_checkpoint(kGolden + "/flash-tiny"));
  uint64_t total = 0;
  for (const StoredTensor& s : read_checkpoint(dir.path().string())) {
    const std::string& name = s.tensor.name;
    EXPECT_EQ(index["weight_map"][name], s.shard) << name;
    EXPECT_EQ(name.rfind("mtp.", 0) == 0, s.shard == "model-00003-of-00003.safetensors") << name;
    ASSERT_TRUE(golden.count(name)) << name;
    EXPECT_EQ(s.tensor.dtype, golden.at(name).tensor.dtype) << name;
    EXPECT_EQ(s.tensor.shape, golden.at(name).tensor.shape) << name;
    total += s.tensor.bytes.size();
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  auto shard = SafetensorsFile::open(dir.file("model-00001-of-00003.safetensors"));
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard.value()->metadata().at("format"), "pt");
}

TEST_F(RandomCheckpoint, TensorBytesDoNotDependOnSharding) {
  TempDir one, three, five;
  generate("pro-tiny", 9, one, 1);
  generate("pro-tiny", 9, three, 3);
  generate("pro-tiny", 9, five, 5);
  const auto t1 = by_name(read_checkpoint(one.path().string()));
  for (const TempDir* d : {&three, &five}) {
    const auto t = by_name(read_checkpoint(d->path().string()));
    ASSERT_EQ(t.size(), t1.size());
    std::set<std::string> shards;
    for (const auto& [name, s] : t) {
      EXPECT_EQ(s.tensor.bytes, t1.at(name).tensor.bytes) << name;
      shards.insert(s.shard);
    }
    EXPECT_EQ(shards.size(), d == &three ? 3u : 5u) << "every shard holds tensors";
  }
}

TEST_F(RandomCheckpoint, CodesAndScalesAreValid) {
  TempDir dir;
  generate("flash-tiny", 3, dir, 2);
  const auto tensors = by_name(read_checkpoint(dir.path().string()));
  auto config = parse_model_config(config_text("flash-tiny"), "flash-tiny");
  ASSERT_TRUE(config.ok());
  const int n_experts = config.value().n_routed_experts;
  for (const auto& [name, s] : tensors) {
    const TensorToWrite& t = s.tensor;
    const size_t n = t.bytes.size();
    SCOPED_TRACE(name);
    if (t.dtype == DType::kF8E8M0) {
      for (uint8_t b : t.bytes) ASSERT_TRUE(b >= 1 && b <= 254) << int(b);
    } else if (t.dtype == DType::kF8E4M3) {
      // Minimal pow2 scale per 128x128 block: the largest |code value| of every block is above 448/2.
      const int64_t rows = t.shape[0], cols = t.shape[1];
      std::map<std::pair<int64_t, int64_t>, double> block_max;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t code = t.bytes[size_t(r * cols + c)];
          ASSERT_NE(code & 0x7f, 0x7f) << "NaN code";
          ASSERT_NE(code, 0x80) << "negative zero";
          double& m = block_max[{r / 128, c / 128}];
          m = std::max(m, double(std::fabs(e4m3_to_float(code))));
        }
      }
      for (const auto& [block, m] : block_max) EXPECT_GE(m, 224.0);
    } else if (t.dtype == DType::kI8) {
      const int64_t rows = t.shape[0], packed = t.shape[1];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < packed / 16; ++b) {  // 32 codes = 16 bytes per scale block
          double m = 0;
          for (int64_t i = 0; i < 16; ++i) {
            const uint8_t byte = t.bytes[size_t(r * packed + b * 16 + i)];
            ASSERT_NE(byte & 0xf, 8) << "negative zero";
            ASSERT_NE(byte >> 4, 8) << "negative zero";
            m = std::max({m, double(std::fabs(e2m1_to_float(byte & 0xf))), double(std::fabs(e2m1_to_float(byte >> 4)))});
          }
          EXPECT_GE(m, 3.0) << "row " << r << " block " << b;
        }
      }
    } else if (t.dtype == DType::kBF16) {
      for (size_t i = 0; i < n; i += 2) ASSERT_TRUE(std::isfinite(bf16_to_float(uint16_t(t.bytes[i] | (t.bytes[i + 1] << 8)))));
    } else if (t.dtype == DType::kF32) {
      for (size_t i = 0; i < n; i += 4) {
        float f;
        std::memcpy(&f, &t.bytes[i], 4);
        ASSERT_TRUE(std::isfinite(f));
      }
    } else if (t.dtype == DType::kI64) {
      const int64_t k = t.shape[1];
      std::vector<int> uses(size_t(n_experts), 0);
      for (int64_t r = 0; r < t.shape[0]; ++r) {
        std::set<int64_t> row;
        for (int64_t i = 0; i < k; ++i) {
          int64_t e;
          std::memcpy(&e, &t.bytes[size_t(r * k + i) * 8], 8);
          ASSERT_TRUE(e >= 0 && e < n_experts) << "row " << r << " expert " << e;
          row.insert(e);
          ++uses[size_t(e)];
        }
        ASSERT_EQ(row.size(), size_t(k)) << "row " << r << " repeats an expert";
      }
      for (int u : uses) EXPECT_GT(u, t.shape[0] * k / n_experts / 2) << "experts should be used about evenly";
    } else {
      ADD_FAILURE() << "unexpected dtype " << dtype_name(t.dtype);
    }
  }
}

// ---- statistics against the goldens ----

struct KindStats {
  double n = 0, sum = 0, sum_sq = 0;
  std::map<int, int> scale_bytes;
  double mean() const { return sum / n; }
  double stddev() const { return std::sqrt(std::max(0.0, sum_sq / n - mean() * mean())); }
};

// "layers.3.ffn.experts.5.w1.weight" -> "ffn.experts.E.w1.weight": one kind per role, all layers pooled.
std::string kind_of(const std::string& name) {
  static const std::regex layer(R"(^(layers|mtp)\.\d+\.)"), expert(R"(experts\.\d+\.)");
  return std::regex_replace(std::regex_replace(name, layer, ""), expert, "experts.E.");
}

// Scale blocks are inferred from the shapes: 128x128 (V4), 32x32 (V4.1) or 1x32 (V4.1 Engram tables).
std::map<std::string, KindStats> statistics(const std::string& dir) {
  const auto tensors = by_name(read_checkpoint(dir));
  std::map<std::string, KindStats> stats;
  auto scale_of = [&](const std::string& name) -> const TensorToWrite& {
    return tensors.at(name.substr(0, name.size() - 7) + ".scale").tensor;
  };
  for (const auto& [name, s] : tensors) {
    const TensorToWrite& t = s.tensor;
    KindStats& k = stats[kind_of(name)];
    auto add = [&k](double v) { k.n += 1; k.sum += v; k.sum_sq += v * v; };
    switch (t.dtype) {
      case DType::kBF16:
        for (size_t i = 0; i < t.bytes.size(); i += 2) add(bf16_to_float(uint16_t(t.bytes[i] | (t.bytes[i + 1] << 8))));
        break;
      case DType::kF32:
        for (size_t i = 0; i < t.bytes.size(); i += 4) {
          float f;
          std::memcpy(&f, &t.bytes[i], 4);
          add(f);
        }
        break;
      case DType::kF8E4M3: {
        const TensorToWrite& sc = scale_of(name);
        const int64_t rows = t.shape[0], cols = t.shape[1], scale_cols = sc.shape[1];
        const int64_t block_rows = (rows + sc.shape[0] - 1) / sc.shape[0], block_cols = (cols + scale_cols - 1) / scale_cols;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            add(e4m3_to_float(t.bytes[size_t(r * cols + c)]) *
                e8m0_to_float(sc.bytes[size_t((r / block_rows) * scale_cols + c / block_cols)]));
        for (uint8_t b : sc.bytes) ++k.scale_bytes[b];
        break;
      }
      case DType::kI8: {
        const TensorToWrite& sc = scale_of(name);
        const int64_t packed = t.shape[1], scale_cols = sc.shape[1];
        for (int64_t r = 0; r < t.shape[0]; ++r)
          for (int64_t i = 0; i < packed * 2; ++i) {
            const uint8_t byte = t.bytes[size_t(r * packed + i / 2)];
            add(e2m1_to_float(i % 2 ? byte >> 4 : byte & 0xf) * e8m0_to_float(sc.bytes[size_t(r * scale_cols + i / 32)]));
          }
        for (uint8_t b : sc.bytes) ++k.scale_bytes[b];
        break;
      }
      default:
        stats.erase(kind_of(name));  // scales are counted with their weights; tid2eid is checked elsewhere
    }
  }
  return stats;
}

int mode(const std::map<int, int>& histogram) {
  int best = -1, count = 0;
  for (const auto& [value, c] : histogram) if (c > count) { best = value; count = c; }
  return best;
}

void expect_statistics_like_golden(const std::string& golden_dir, uint64_t seed, int mode_slack = 0) {
  TempDir dir;
  ASSERT_TRUE(write_random_checkpoint(read_text(golden_dir + "/config.json"), seed, dir.path().string(), 3).ok());
  const auto golden = statistics(golden_dir);
  const auto generated = statistics(dir.path().string());
  ASSERT_EQ(golden.size(), generated.size());
  for (const auto& [kind, g] : golden) {
    ASSERT_TRUE(generated.count(kind)) << kind;
    const KindStats& r = generated.at(kind);
    SCOPED_TRACE(kind + ": golden mean " + std::to_string(g.mean()) + " std " + std::to_string(g.stddev()) +
                 ", generated mean " + std::to_string(r.mean()) + " std " + std::to_string(r.stddev()));
    ASSERT_EQ(g.n, r.n);
    // Sampling noise of two independent draws (5 sigma) plus a few percent for pow2-scale flips.
    EXPECT_LE(std::fabs(r.mean() - g.mean()), 5 * g.stddev() * std::sqrt(2.0 / g.n) + 1e-3);
    EXPECT_LE(std::fabs(r.stddev() / g.stddev() - 1), 0.06 + 5 / std::sqrt(g.n));
    if (!g.scale_bytes.empty()) {
      // The most frequent block exponent. Blocks of 32x32 gaussians have their max near a power-of-two
      // boundary of max/448, so there two neighbouring exponents are about equally frequent.
      EXPECT_LE(std::abs(mode(r.scale_bytes) - mode(g.scale_bytes)), mode_slack);
    }
  }
}

TEST_F(RandomCheckpoint, StatisticsMatchGoldenFlashTiny) { expect_statistics_like_golden(kGolden + "/flash-tiny", 1001); }
TEST_F(RandomCheckpoint, StatisticsMatchGoldenProTiny) { expect_statistics_like_golden(kGolden + "/pro-tiny", 2002); }

TEST_F(RandomCheckpoint, GeneratedCheckpointBinds) {
  TempDir dir;
  generate("flash-tiny", 77, dir, 4);
  auto config = load_model_config(dir.path().string());
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto ckpt = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  auto weights = bind_weights(config.value(), *ckpt.value());
  EXPECT_TRUE(weights.ok()) << weights.status().message();
}

// V4.1 (tiny-a's config): the golden tensor inventory, the Engram side file with numpy's multipliers and
// the primes rule (equal to the golden file's, which depend only on the config), statistics like tiny-a's,
// and a forward pass with finite logits.
class RandomCheckpointV41 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldenV41 + "/config.json")) GTEST_SKIP() << "golden checkpoint not found under " << kGoldenV41;
  }
};

TEST_F(RandomCheckpointV41, LayoutAndEngramSideFile) {
  TempDir dir;
  ASSERT_TRUE(write_random_checkpoint(read_text(kGoldenV41 + "/config.json"), 41, dir.path().string(), 4).ok());
  const auto golden = by_name(read_checkpoint(kGoldenV41));
  const auto generated = by_name(read_checkpoint(dir.path().string()));
  ASSERT_EQ(generated.size(), golden.size());
  for (const auto& [name, g] : golden) {
    ASSERT_TRUE(generated.count(name)) << name;
    EXPECT_EQ(generated.at(name).tensor.dtype, g.tensor.dtype) << name;
    EXPECT_EQ(generated.at(name).tensor.shape, g.tensor.shape) << name;
  }
  auto side = SafetensorsFile::open(dir.file("engram_token_map.safetensors"));
  auto golden_side = SafetensorsFile::open(kGoldenV41 + "/engram_token_map.safetensors");
  ASSERT_TRUE(side.ok()) << side.status().message();
  ASSERT_TRUE(golden_side.ok());
  for (const char* name : {"engram.multipliers", "engram.primes", "engram.offsets"}) {
    const TensorView* t = side.value()->find(name);
    const TensorView* g = golden_side.value()->find(name);
    ASSERT_TRUE(t && g) << name;
    EXPECT_EQ(t->shape, g->shape) << name;
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), std::vector<uint8_t>(g->data, g->data + g->n_bytes)) << name;
  }
  const TensorView* map = side.value()->find("engram.token_map");
  ASSERT_TRUE(map);
  auto config = parse_model_config(read_text(kGoldenV41 + "/config.json"), "tiny-a");
  ASSERT_TRUE(config.ok());
  std::vector<int32_t> ids(size_t(map->numel()));
  std::memcpy(ids.data(), map->data, map->n_bytes);
  int32_t next_new = 0;  // first-appearance numbering covering the whole compressed vocabulary
  for (int32_t id : ids) {
    ASSERT_TRUE(id >= 0 && id <= next_new) << id;
    if (id == next_new) ++next_new;
  }
  EXPECT_EQ(next_new, config.value().engram_compressed_vocab_size);
}

TEST_F(RandomCheckpointV41, StatisticsMatchGoldenTinyA) { expect_statistics_like_golden(kGoldenV41, 4101, 1); }

TEST_F(RandomCheckpointV41, ForwardGivesFiniteLogits) {
  TempDir dir;
  ASSERT_TRUE(write_random_checkpoint(read_text(kGoldenV41 + "/config.json"), 7, dir.path().string(), 2).ok());
  auto model = Model::open(dir.path().string(), ModelOptions{.n_threads = 1});
  ASSERT_TRUE(model.ok()) << model.status().message();
  SequenceState seq = model.value()->new_sequence();
  const std::vector<int32_t> ids = {0, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11, 12};
  ForwardChunk chunk{.state = &seq, .ids = ids, .prompt_len = int64_t(ids.size()), .all_logits = true};
  const std::vector<ChunkOutput> out = model.value()->forward({&chunk, 1});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].logits.size(), ids.size() * size_t(model.value()->config().vocab_size));
  double sum_sq = 0;
  for (float v : out[0].logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum_sq += double(v) * v;
  }
  EXPECT_GT(sum_sq, 0.0);
}

TEST_F(RandomCheckpoint, WithoutMtpLayer) {
  json c = json::parse(config_text("flash-tiny"));
  c["num_nextn_predict_layers"] = 0;
  c["compress_ratios"] = {0, 0, 4, 128};
  TempDir dir;
  ASSERT_TRUE(write_random_checkpoint(c.dump(2), 1, dir.path().string(), 2).ok());
  for (const StoredTensor& s : read_checkpoint(dir.path().string())) EXPECT_NE(s.tensor.name.rfind("mtp.", 0), 0u);
}

TEST_F(RandomCheckpoint, Errors) {
  TempDir dir;
  Status s = write_random_checkpoint(config_text("flash-tiny"), 1, dir.file("a"), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("n_shards"), std::string::npos) << s.message();
  s = write_random_checkpoint(config_text("flash-tiny"), 1, dir.file("b"), 100000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shards"), std::string::npos) << s.message();
  json c = json::parse(config_text("flash-tiny"));
  c.erase("hidden_size");
  s = write_random_checkpoint(c.dump(), 1, dir.file("c"), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hidden_size"), std::string::npos) << s.message();
  deepinfer::testing::write_text(dir.file("file"), "x");
  s = write_random_checkpoint(config_text("flash-tiny"), 1, dir.file("file") + "/sub", 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir.file("file")), std::string::npos) << s.message();
}

}  // namespace
}  // namespace deepinfer
