// safetensors files and sharded checkpoint directories: round trips, and every kind of corruption gives
// one clear error that names the file (and the tensor where there is one) instead of crashing.
#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace deepinfer {
namespace {

using deepinfer::testing::read_bytes;
using deepinfer::testing::TempDir;
using deepinfer::testing::write_bytes;
using deepinfer::testing::write_text;

// Expects a failed status whose message contains every given piece.
template <typename T>
void expect_error(const Result<T>& result, std::initializer_list<std::string> pieces) {
  ASSERT_FALSE(result.ok()) << "expected an error mentioning " << *pieces.begin();
  const std::string& message = result.status().message();
  for (const std::string& piece : pieces) EXPECT_NE(message.find(piece), std::string::npos) << "'" << piece << "' not in: " << message;
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(start + i);
  return v;
}

// Tensors named in data order and in alphabetical order alike (a_*, b_*, c_*), so the first tensor a
// truncation cuts is also the first one the header walk meets.
std::vector<TensorToWrite> sample_tensors() {
  return {
      {"a_bf16", DType::kBF16, {2, 3}, iota_bytes(12, 1)},
      {"b_f32", DType::kF32, {4}, iota_bytes(16, 50)},
      {"c_i64", DType::kI64, {2, 2}, iota_bytes(32, 100)},
      {"d_e4m3", DType::kF8E4M3, {3}, iota_bytes(3, 200)},
      {"e_empty", DType::kU8, {0}, {}},
  };
}

// A file with a hand-written header: u64 length, header text, data.
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes(8);
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(path, bytes);
}

// Touches every byte of every tensor: a header that lies about offsets would fault here.
uint64_t checksum(const SafetensorsFile& file) {
  uint64_t sum = 0;
  for (const TensorView& t : file.tensors()) {
    for (size_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
  }
  return sum;
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  const auto tensors = sample_tensors();
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).ok());

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const SafetensorsFile& f = *file.value();
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.file_bytes(), std::filesystem::file_size(path));
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (const TensorToWrite& want : tensors) {
    const TensorView* got = f.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->name, want.name);
    EXPECT_EQ(got->dtype, want.dtype);
    EXPECT_EQ(got->shape, want.shape);
    EXPECT_EQ(got->n_bytes, want.bytes.size());
    EXPECT_EQ(got->file, &f.path());
    if (!want.bytes.empty()) {
      EXPECT_EQ(std::memcmp(got->data, want.bytes.data(), want.bytes.size()), 0) << want.name;
    }
  }
  EXPECT_EQ(f.find("a_bf16")->numel(), 6);
  EXPECT_EQ(f.find("a_bf16")->shape_string(), "[2, 3]");
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.metadata().at("format"), "pt");

  uint64_t header_len = 0;
  std::memcpy(&header_len, read_bytes(path).data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "data area should start 8-byte aligned";
}

// The VmFlags of the mapping that holds addr in this process (/proc/self/smaps), or "" if none does.
std::string vm_flags_at(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find('-') < line.find(' ')) {
      inside = begin <= a && a < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

TEST(Safetensors, MappingAsksForHugePagesExceptRowLookupTables) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    GTEST_SKIP() << "this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)";
  }
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  const size_t mb = size_t(1) << 20;
  ASSERT_TRUE(write_safetensors(path, {{"weight", DType::kU8, {int64_t(6 * mb)}, std::vector<uint8_t>(6 * mb, 1)},
                                       {"table", DType::kU8, {int64_t(6 * mb)}, std::vector<uint8_t>(6 * mb, 2)}})
                  .ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const TensorView* weight = file.value()->find("weight");
  const TensorView* table = file.value()->find("table");
  EXPECT_NE(vm_flags_at(weight->data).find(" hg "), std::string::npos) << vm_flags_at(weight->data);
  EXPECT_NE(vm_flags_at(table->data).find(" hg "), std::string::npos) << vm_flags_at(table->data);

  advise_row_lookups(*table);
  EXPECT_NE(vm_flags_at(table->data).find(" nh "), std::string::npos) << vm_flags_at(table->data);
  EXPECT_NE(vm_flags_at(table->data + table->n_bytes - 1).find(" nh "), std::string::npos);
  EXPECT_NE(vm_flags_at(weight->data).find(" hg "), std::string::npos) << "the weights keep their huge pages";
}

TEST(Safetensors, WriterRejectsByteCountMismatch) {
  TempDir dir;
  const Status s = write_safetensors(dir.file("x.safetensors"), {{"w", DType::kF32, {3}, iota_bytes(8, 0)}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
}

TEST(Safetensors, MissingFileNamesThePath) {
  TempDir dir;
  expect_error(SafetensorsFile::open(dir.file("nope.safetensors")), {dir.file("nope.safetensors"), "cannot open"});
}

TEST(Safetensors, TruncatedFileIsAnErrorAtEveryCut) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  ASSERT_TRUE(write_safetensors(good, sample_tensors()).ok());
  const std::vector<uint8_t> bytes = read_bytes(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const size_t data_start = 8 + header_len;
  // Data-area end offset of each tensor in write order (= alphabetical order, see sample_tensors).
  std::vector<std::pair<std::string, size_t>> ends;
  size_t offset = 0;
  for (const auto& t : sample_tensors()) ends.push_back({t.name, offset += t.bytes.size()});

  const std::string path = dir.file("cut.safetensors");
  std::vector<size_t> cuts;  // every cut in the length word and the data area, every 5th in the header
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    if (cut <= 8 || cut + 1 >= data_start || cut % 5 == 0) cuts.push_back(cut);
  }
  for (size_t cut : cuts) {
    write_bytes(path, bytes.data(), cut);
    auto file = SafetensorsFile::open(path);
    ASSERT_FALSE(file.ok()) << "a file cut at byte " << cut << " of " << bytes.size() << " opened";
    const std::string& message = file.status().message();
    EXPECT_EQ(message.rfind(path, 0), 0u) << message;
    if (cut > data_start) {
      std::string first_cut;
      for (const auto& [name, end] : ends) {
        if (end > cut - data_start) { first_cut = name; break; }
      }
      EXPECT_NE(message.find("tensor '" + first_cut + "'"), std::string::npos) << "cut " << cut << ": " << message;
    }
  }
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  ASSERT_TRUE(write_safetensors(path, sample_tensors()).ok());
  std::vector<uint8_t> bytes = read_bytes(path);
  for (uint64_t lie : {uint64_t(bytes.size() - 7), uint64_t(bytes.size()), uint64_t(1) << 40, ~uint64_t(0)}) {
    std::memcpy(bytes.data(), &lie, 8);
    write_bytes(path, bytes);
    expect_error(SafetensorsFile::open(path), {path, "header length"});
  }
}

TEST(Safetensors, MalformedHeaderJson) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  for (const char* header : {"{", "not json", "{\"a\": {\"dtype\": \"F32\",", "\xff\xfe"}) {
    write_raw(path, header, iota_bytes(16, 0));
    expect_error(SafetensorsFile::open(path), {path, "malformed"});
  }
  write_raw(path, "[1, 2]", {});
  expect_error(SafetensorsFile::open(path), {path, "not a JSON object"});
  write_raw(path, R"({"__metadata__": [1]})", {});
  expect_error(SafetensorsFile::open(path), {path, "__metadata__"});
}

TEST(Safetensors, BadTensorEntriesNameTheTensor) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  struct Case {
    const char* header;
    const char* what;
  };
  const Case cases[] = {
      {R"({"w": 5})", "needs dtype, shape and data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [4]}})", "needs dtype, shape and data_offsets"},
      {R"({"w": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [0, 4]}})", "unknown dtype"},
      {R"({"w": {"dtype": 7, "shape": [4], "data_offsets": [0, 16]}})", "unknown dtype"},
      {R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", "shape"},
      {R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", "shape"},
      {R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 16]}})", "shape"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [-1, 15]}})", "data_offsets"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", "needs 12"},      // shape/bytes
      {R"({"w": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 8]}})", "needs 16"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", "past the data area"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 17]}})", "past the data area"},
      {R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [12, 8]}})", "past the data area"},  // begin > end
  };
  for (const Case& c : cases) {
    write_raw(path, c.header, iota_bytes(16, 0));
    SCOPED_TRACE(c.header);
    expect_error(SafetensorsFile::open(path), {path, "tensor 'w'", c.what});
  }
}

TEST(Safetensors, ElementCountOverflowIsRejected) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  // 2^62 * 4 elements wrap to 0 in 64 bits; a header must not pass by overflowing the size check.
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", {});
  expect_error(SafetensorsFile::open(path), {path, "tensor 'w'"});
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4]}})", iota_bytes(4, 0));
  expect_error(SafetensorsFile::open(path), {path, "tensor 'w'"});
  write_raw(path, R"({"w": {"dtype": "I64", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", {});
  expect_error(SafetensorsFile::open(path), {path, "tensor 'w'"});
}

TEST(Safetensors, OverlappingTensors) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
            iota_bytes(24, 0));
  expect_error(SafetensorsFile::open(path), {path, "'a'", "'b'", "overlap"});
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
                "b": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}})",
            iota_bytes(24, 0));
  expect_error(SafetensorsFile::open(path), {path, "'a'", "'b'", "overlap"});
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  ASSERT_TRUE(write_safetensors(good, sample_tensors(), {{"format", "pt"}}).ok());
  const std::vector<uint8_t> bytes = read_bytes(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const std::string path = dir.file("fuzz.safetensors");
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(state >> 33);
  };
  const char interesting[] = "0123456789,[]{}\":-e.";
  int n_opened = 0;
  for (int round = 0; round < 800; ++round) {
    std::vector<uint8_t> mutated = bytes;
    const int n_edits = 1 + int(next() % 4);
    for (int e = 0; e < n_edits; ++e) {
      const size_t at = next() % (8 + header_len);  // the length word and the header text
      mutated[at] = next() % 2 ? uint8_t(interesting[next() % (sizeof interesting - 1)]) : uint8_t(next());
    }
    if (next() % 8 == 0) mutated.resize(next() % mutated.size());
    write_bytes(path, mutated);
    auto file = SafetensorsFile::open(path);
    if (file.ok()) {
      ++n_opened;
      (void)checksum(*file.value());
    } else {
      EXPECT_EQ(file.status().message().rfind(path, 0), 0u) << file.status().message();
    }
  }
  EXPECT_LT(n_opened, 800);
}

// ---- sharded checkpoint directories ----

struct ShardSpec {
  std::string file;
  std::vector<TensorToWrite> tensors;
};

// Writes shards and an index whose weight_map is given explicitly (defaults to the shards' contents).
void write_checkpoint(const TempDir& dir, const std::vector<ShardSpec>& shards, nlohmann::json weight_map = nullptr) {
  nlohmann::json map = nlohmann::json::object();
  for (const ShardSpec& s : shards) {
    ASSERT_TRUE(write_safetensors(dir.file(s.file), s.tensors).ok());
    for (const auto& t : s.tensors) map[t.name] = s.file;
  }
  if (weight_map.is_null()) weight_map = map;
  write_text(dir.file("model.safetensors.index.json"),
             nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2));
}

const char kShard1[] = "model-00001-of-00002.safetensors";
const char kShard2[] = "model-00002-of-00002.safetensors";

std::vector<ShardSpec> two_shards() {
  auto t = sample_tensors();
  return {{kShard1, {t[0], t[1]}}, {kShard2, {t[2], t[3]}}};
}

TEST(Checkpoint, OpensShardedDirectory) {
  TempDir dir;
  write_checkpoint(dir, two_shards());
  auto ckpt = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const Checkpoint& c = *ckpt.value();
  EXPECT_EQ(c.tensor_names(), (std::vector<std::string>{"a_bf16", "b_f32", "c_i64", "d_e4m3"}));
  ASSERT_NE(c.find("c_i64"), nullptr);
  EXPECT_EQ(*c.find("c_i64")->file, dir.file(kShard2));
  EXPECT_EQ(c.find("c_i64")->data[0], 100);
  EXPECT_EQ(*c.find("a_bf16")->file, dir.file(kShard1));
  EXPECT_EQ(c.find("nope"), nullptr);
  EXPECT_EQ(c.total_bytes(), std::filesystem::file_size(dir.file(kShard1)) + std::filesystem::file_size(dir.file(kShard2)));
}

// Locked kB of this process (VmLck in /proc/self/status), -1 if unknown.
int64_t locked_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

TEST(Checkpoint, LockInMemoryLocksEveryShardOrNamesTheLimit) {
  TempDir dir;
  write_checkpoint(dir, two_shards());
  const int64_t before = locked_kib();
  Checkpoint::OpenOptions options;
  options.lock_in_memory = true;
  auto ckpt = Checkpoint::open(dir.path().string(), options);
  if (!ckpt.ok()) {  // an unprivileged user over RLIMIT_MEMLOCK: the error says which file and which limit
    EXPECT_NE(ckpt.status().message().find(dir.file(kShard1)), std::string::npos) << ckpt.status().message();
    EXPECT_NE(ckpt.status().message().find("mlock"), std::string::npos) << ckpt.status().message();
    return;
  }
  EXPECT_EQ(ckpt.value()->find("c_i64")->data[0], 100);
  if (before < 0) GTEST_SKIP() << "no VmLck in /proc/self/status: the locked size cannot be checked";
  // Each shard is smaller than a page: one locked page each at least.
  EXPECT_GE(locked_kib() - before, 2 * int64_t(sysconf(_SC_PAGESIZE) / 1024));
  ckpt.value().reset();  // unmapping releases the lock
  EXPECT_EQ(locked_kib(), before);
}

TEST(Checkpoint, OpensSingleFileDirectory) {
  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), sample_tensors()).ok());
  auto ckpt = Checkpoint::open(dir.path().string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt.value()->tensor_names().size(), sample_tensors().size());
}

TEST(Checkpoint, EmptyDirectoryIsAnError) {
  TempDir dir;
  expect_error(Checkpoint::open(dir.path().string()), {dir.path().string(), "model.safetensors"});
}

TEST(Checkpoint, IndexListsTensorMissingFromShard) {
  TempDir dir;
  nlohmann::json map = {{"a_bf16", kShard1}, {"b_f32", kShard1}, {"c_i64", kShard2}, {"d_e4m3", kShard2},
                        {"z_ghost", kShard2}};
  write_checkpoint(dir, two_shards(), map);
  expect_error(Checkpoint::open(dir.path().string()), {dir.file(kShard2), "'z_ghost'", "missing"});
}

TEST(Checkpoint, IndexListsMissingShard) {
  TempDir dir;
  nlohmann::json map = {{"a_bf16", kShard1}, {"b_f32", kShard1}, {"c_i64", kShard2}, {"d_e4m3", kShard2},
                        {"z_ghost", "model-00003-of-00002.safetensors"}};
  write_checkpoint(dir, two_shards(), map);
  expect_error(Checkpoint::open(dir.path().string()), {dir.file("model-00003-of-00002.safetensors"), "cannot open"});
}

TEST(Checkpoint, TensorInShardButNotInIndex) {
  TempDir dir;
  nlohmann::json map = {{"a_bf16", kShard1}, {"b_f32", kShard1}, {"c_i64", kShard2}};
  write_checkpoint(dir, two_shards(), map);
  expect_error(Checkpoint::open(dir.path().string()), {dir.file(kShard2), "'d_e4m3'", "not listed"});
}

TEST(Checkpoint, TensorListedUnderAnotherShard) {
  TempDir dir;
  nlohmann::json map = {{"a_bf16", kShard1}, {"b_f32", kShard2}, {"c_i64", kShard2}, {"d_e4m3", kShard2}};
  write_checkpoint(dir, two_shards(), map);
  expect_error(Checkpoint::open(dir.path().string()), {dir.file(kShard1), "'b_f32'", kShard2});
}

TEST(Checkpoint, DuplicateTensorAcrossShards) {
  TempDir dir;
  auto shards = two_shards();
  shards[1].tensors.push_back(shards[0].tensors[0]);  // a_bf16 in both shards
  write_checkpoint(dir, shards);                      // the index names the second one
  expect_error(Checkpoint::open(dir.path().string()), {"'a_bf16'"});
  auto result = Checkpoint::open(dir.path().string());
  ASSERT_FALSE(result.ok());
  const std::string& m = result.status().message();
  EXPECT_TRUE(m.find(kShard1) != std::string::npos || m.find(kShard2) != std::string::npos) << m;
}

TEST(Checkpoint, MalformedIndex) {
  TempDir dir;
  write_checkpoint(dir, two_shards());
  const std::string index = dir.file("model.safetensors.index.json");
  write_text(index, "{\"weight_map\": {");
  expect_error(Checkpoint::open(dir.path().string()), {index, "malformed"});
  write_text(index, R"({"metadata": {}})");
  expect_error(Checkpoint::open(dir.path().string()), {index, "weight_map"});
  write_text(index, R"({"weight_map": {"a_bf16": 3}})");
  expect_error(Checkpoint::open(dir.path().string()), {index, "a_bf16"});
  write_text(index, R"({"weight_map": {"a_bf16": "../model-00001-of-00002.safetensors"}})");
  expect_error(Checkpoint::open(dir.path().string()), {index, "path"});
}

TEST(Checkpoint, CorruptShardNamesFileAndTensor) {
  TempDir dir;
  write_checkpoint(dir, two_shards());
  const std::string shard = dir.file(kShard2);
  const auto bytes = read_bytes(shard);
  write_bytes(shard, bytes.data(), bytes.size() - 1);  // cuts d_e4m3, the last tensor
  expect_error(Checkpoint::open(dir.path().string()), {shard, "'d_e4m3'"});
}

}  // namespace
}  // namespace deepinfer
