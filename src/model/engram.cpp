#include "model/engram.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/dtypes.h"
#include "format/safetensors.h"

namespace deepinfer {

namespace {
bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2) if (n % d == 0) return false;
  return true;
}
}  // namespace

std::vector<std::vector<int64_t>> engram_primes(const ModelConfig& c) {
  std::set<int64_t> used;
  std::vector<std::vector<int64_t>> out;
  for (size_t layer = 0; layer < c.engram_layers.size(); ++layer) {
    std::vector<int64_t> primes;
    for (int g = 2; g <= c.engram_max_ngram; ++g) {
      int64_t current = c.engram_vocab_size - 1;
      for (int h = 0; h < c.engram_n_heads; ++h) {
        int64_t p = current + 1;
        while (!is_prime(p) || used.count(p)) ++p;
        used.insert(p);
        primes.push_back(p);
        current = p;
      }
    }
    out.push_back(std::move(primes));
  }
  return out;
}

void EngramHashing::rows(int layer, const int32_t* history, int64_t* out) const {
  const std::vector<int64_t>& m = multipliers[size_t(layer)];
  int64_t roll = int64_t(history[0]) * m[0];  // spec §7.6 step 6: int64 products, XOR-rolled
  for (int n = 1; n < max_ngram; ++n) {
    roll ^= int64_t(history[n]) * m[size_t(n)];  // now hashes the (n+1)-gram
    for (int h = 0; h < n_heads; ++h) {
      const size_t k = size_t((n - 1) * n_heads + h);
      out[k] = roll % primes[size_t(layer)][k] + offsets[size_t(layer)][k];
    }
  }
}

Result<EngramHashing> load_engram_hashing(const ModelConfig& c, const std::string& model_dir) {
  const std::string path = model_dir + "/engram_token_map.safetensors";
  if (!std::filesystem::exists(path)) {
    return Status::error(path + ": not found. This V4.1 model has Engram layers; deepinfer reads the token map and hash "
                                "multipliers from this file (deriving them from tokenizer.json is not implemented yet)");
  }
  auto file = SafetensorsFile::open(path);
  if (!file.ok()) return file.status();
  const size_t n_layers = c.engram_layers.size();
  auto need = [&](const char* name, DType dtype, std::vector<int64_t> shape) -> Result<const TensorView*> {
    const TensorView* t = file.value()->find(name);
    if (!t) return Status::error(path + ": missing tensor '" + std::string(name) + "'");
    if (t->dtype != dtype || t->shape != shape) {
      return Status::error(path + ": tensor '" + std::string(name) + "' is " + dtype_name(t->dtype) + " " + t->shape_string() + ", expected " + dtype_name(dtype));
    }
    return t;
  };
  EngramHashing e;
  e.max_ngram = c.engram_max_ngram;
  e.n_heads = c.engram_n_heads;
  auto map = need("engram.token_map", DType::kI32, {c.vocab_size});
  if (!map.ok()) return map.status();
  e.token_map.resize(size_t(c.vocab_size));
  std::memcpy(e.token_map.data(), map.value()->data, map.value()->n_bytes);  // may sit misaligned
  for (int32_t v : e.token_map) {
    if (v < 0 || v >= c.engram_compressed_vocab_size) {
      return Status::error(path + ": engram.token_map holds " + std::to_string(v) + ", outside 0.." + std::to_string(c.engram_compressed_vocab_size - 1));
    }
  }
  if (c.engram_pad_token_id < 0 || c.engram_pad_token_id >= c.vocab_size) return Status::error(path + ": engram_pad_token_id outside the vocabulary");
  e.pad = e.token_map[size_t(c.engram_pad_token_id)];
  auto mult = need("engram.multipliers", DType::kI64, {int64_t(n_layers), c.engram_max_ngram});
  if (!mult.ok()) return mult.status();
  std::vector<int64_t> all_multipliers(n_layers * size_t(c.engram_max_ngram));
  std::memcpy(all_multipliers.data(), mult.value()->data, mult.value()->n_bytes);
  for (size_t l = 0; l < n_layers; ++l) {
    const int64_t* row = all_multipliers.data() + l * size_t(c.engram_max_ngram);
    e.multipliers.emplace_back(row, row + c.engram_max_ngram);
    for (int n = 0; n < c.engram_max_ngram; ++n) {
      // |id * m| must stay below 2^63 (the spec's bound guarantees it for real multipliers).
      if (row[n] <= 0 || row[n] > INT64_MAX / c.engram_compressed_vocab_size) return Status::error(path + ": engram.multipliers out of range");
    }
  }
  e.primes = engram_primes(c);
  for (size_t l = 0; l < n_layers; ++l) {
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (int64_t p : e.primes[l]) {
      offsets.push_back(total);
      total += p;
    }
    if (total != c.engram_num_embeddings[l]) {
      return Status::error(path + ": the Engram primes of layer " + std::to_string(c.engram_layers[l]) + " sum to " + std::to_string(total) +
                           " but engram_num_embeddings says " + std::to_string(c.engram_num_embeddings[l]));
    }
    e.offsets.push_back(std::move(offsets));
  }
  // The file's own primes, when present, must agree with the derivation.
  if (const TensorView* primes = file.value()->find("engram.primes"); primes && primes->dtype == DType::kI64) {
    std::vector<int64_t> file_primes(size_t(primes->numel()));
    std::memcpy(file_primes.data(), primes->data, primes->n_bytes);
    for (size_t l = 0; l < n_layers; ++l) {
      for (size_t k = 0; k < e.primes[l].size() && (l * e.primes[l].size() + k) < file_primes.size(); ++k) {
        if (file_primes[l * e.primes[l].size() + k] != e.primes[l][k]) {
          return Status::error(path + ": engram.primes disagrees with the primes rule at layer index " + std::to_string(l));
        }
      }
    }
  }
  return e;
}

void engram_table_row(const EngramTable& table, int64_t row, float* out) {
  const uint8_t* codes = table.codes + row * table.dim;
  const uint8_t* scales = table.scales + row * (table.dim / 32);
  for (int64_t i = 0; i < table.dim; ++i) out[i] = e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / 32]);
}

}  // namespace deepinfer
