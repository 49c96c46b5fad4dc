// Test helpers for checkpoint directories: read every tensor of a sharded checkpoint into memory, edit the
// list, and write shards + index back (to build corrupt or disagreeing checkpoints from good ones).
// Tests only; nothing here is part of the engine.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "temp_dir.h"

namespace deepinfer::testing {

struct StoredTensor {
  std::string shard;  // file name inside the checkpoint directory
  TensorToWrite tensor;
};

inline std::vector<StoredTensor> read_checkpoint(const std::string& dir) {
  const nlohmann::json index = nlohmann::json::parse(read_text(dir + "/model.safetensors.index.json"));
  std::vector<std::string> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (std::find(shards.begin(), shards.end(), shard.get<std::string>()) == shards.end()) shards.push_back(shard);
  }
  std::sort(shards.begin(), shards.end());
  std::vector<StoredTensor> out;
  for (const std::string& shard : shards) {
    auto file = SafetensorsFile::open(dir + "/" + shard);
    EXPECT_TRUE(file.ok()) << file.status().message();
    if (!file.ok()) return {};
    for (const TensorView& t : file.value()->tensors()) {
      out.push_back({shard, {t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes)}});
    }
  }
  return out;
}

// Writes the tensors back as shards (grouped by StoredTensor::shard) and a matching index.
inline void write_checkpoint(const std::string& dir, const std::vector<StoredTensor>& tensors) {
  std::map<std::string, std::vector<TensorToWrite>> by_shard;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (const StoredTensor& s : tensors) {
    by_shard[s.shard].push_back(s.tensor);
    weight_map[s.tensor.name] = s.shard;
    total += s.tensor.bytes.size();
  }
  for (const auto& [shard, list] : by_shard) {
    const Status st = write_safetensors(dir + "/" + shard, list, {{"format", "pt"}});
    EXPECT_TRUE(st.ok()) << st.message();
  }
  write_text(dir + "/model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
}

inline StoredTensor* find_tensor(std::vector<StoredTensor>& tensors, const std::string& name) {
  for (StoredTensor& s : tensors) {
    if (s.tensor.name == name) return &s;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

}  // namespace deepinfer::testing
