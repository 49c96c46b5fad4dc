#include "model/engram.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/dtypes.h"
#include "core/pcg64.h"
#include "core/status.h"
#include "format/engram_token_map.h"
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

namespace {

constexpr const char* kSideFileName = "engram_token_map.safetensors";

// The sizes the derivations divide by or loop over; config.json may leave them out.
Status check_engram_sizes(const ModelConfig& c) {
  if (c.engram_compressed_vocab_size <= 0 || c.engram_max_ngram < 2 || c.engram_n_heads <= 0) {
    return Status::error("config.json: a model with engram_layer_ids needs engram_compressed_vocab_size > 0, engram_max_ngram_size >= 2 and "
                         "engram_n_heads > 0 (got " + std::to_string(c.engram_compressed_vocab_size) + ", " + std::to_string(c.engram_max_ngram) +
                         ", " + std::to_string(c.engram_n_heads) + ")");
  }
  return Status();
}

std::vector<std::vector<int64_t>> derived_multipliers(const ModelConfig& c) {
  std::vector<std::vector<int64_t>> out;
  for (int layer : c.engram_layers) out.push_back(engram_multipliers(layer, c.engram_compressed_vocab_size, c.engram_max_ngram));
  return out;
}

// Primes and offsets (steps 8-9), checked against engram_num_embeddings; `source` names the map's origin.
Status add_primes(const ModelConfig& c, const std::string& source, EngramHashing* e) {
  e->primes = engram_primes(c);
  for (size_t l = 0; l < c.engram_layers.size(); ++l) {
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (int64_t p : e->primes[l]) {
      offsets.push_back(total);
      total += p;
    }
    if (total != c.engram_num_embeddings[l]) {
      return Status::error(source + ": the Engram primes of layer " + std::to_string(c.engram_layers[l]) + " sum to " + std::to_string(total) +
                           " but engram_num_embeddings says " + std::to_string(c.engram_num_embeddings[l]));
    }
    e->offsets.push_back(std::move(offsets));
  }
  return Status();
}

// The golden models' side file: token_map and multipliers as shipped (the multipliers must equal PCG64's).
Result<EngramHashing> load_side_file(const ModelConfig& c, const std::string& path) {
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
  const std::vector<std::vector<int64_t>> derived = derived_multipliers(c);
  for (size_t l = 0; l < n_layers; ++l) {
    const int64_t* row = all_multipliers.data() + l * size_t(c.engram_max_ngram);
    e.multipliers.emplace_back(row, row + c.engram_max_ngram);
    for (int n = 0; n < c.engram_max_ngram; ++n) {
      if (row[n] != derived[l][size_t(n)]) {
        return Status::error(path + ": tensor 'engram.multipliers' [" + std::to_string(l) + ", " + std::to_string(n) + "] is " + std::to_string(row[n]) +
                             " but numpy default_rng(10007*" + std::to_string(c.engram_layers[l]) + ") with engram_compressed_vocab_size " +
                             std::to_string(c.engram_compressed_vocab_size) + " gives " + std::to_string(derived[l][size_t(n)]));
      }
    }
  }
  DI_RETURN_IF_ERROR(add_primes(c, path, &e));
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

}  // namespace

Result<EngramHashing> derive_engram_hashing(const ModelConfig& c, const Tokenizer& tokenizer, const std::string& tokenizer_name) {
  DI_RETURN_IF_ERROR(check_engram_sizes(c));
  const EngramTokenMap map = build_engram_token_map(tokenizer);
  if (map.n_compressed != c.engram_compressed_vocab_size) {
    return Status::error(tokenizer_name + ": the Engram normalizer gives a compressed vocabulary of " + std::to_string(map.n_compressed) +
                         " ids but config.json's engram_compressed_vocab_size is " + std::to_string(c.engram_compressed_vocab_size) +
                         " (a different tokenizer than the model was trained with?)");
  }
  if (int64_t(map.token_map.size()) > c.vocab_size) {
    return Status::error(tokenizer_name + ": " + std::to_string(map.token_map.size()) + " tokens, more than config.json's vocab_size " + std::to_string(c.vocab_size));
  }
  if (c.engram_pad_token_id < 0 || size_t(c.engram_pad_token_id) >= map.token_map.size()) {
    return Status::error(tokenizer_name + ": engram_pad_token_id " + std::to_string(c.engram_pad_token_id) + " is not a token id of this tokenizer");
  }
  std::vector<int32_t> token_map = map.token_map;
  // The reference's map has len(tokenizer) entries and would fail on a larger id. Ids the tokenizer does
  // not have (only reachable by sampling a padded embedding row) hash as the pad id here.
  token_map.resize(size_t(c.vocab_size), token_map[size_t(c.engram_pad_token_id)]);
  return engram_hashing_for_map(c, std::move(token_map), tokenizer_name);
}

Result<EngramHashing> engram_hashing_for_map(const ModelConfig& c, std::vector<int32_t> token_map, const std::string& source) {
  DI_RETURN_IF_ERROR(check_engram_sizes(c));
  if (int64_t(token_map.size()) != c.vocab_size || c.engram_pad_token_id < 0 || c.engram_pad_token_id >= c.vocab_size) {
    return Status::error(source + ": the Engram token map needs vocab_size entries and engram_pad_token_id inside it");
  }
  EngramHashing e;
  e.max_ngram = c.engram_max_ngram;
  e.n_heads = c.engram_n_heads;
  e.token_map = std::move(token_map);
  e.pad = e.token_map[size_t(c.engram_pad_token_id)];  // spec §7.6 step 3
  e.multipliers = derived_multipliers(c);
  DI_RETURN_IF_ERROR(add_primes(c, source, &e));
  return e;
}

Result<EngramHashing> load_engram_hashing(const ModelConfig& c, const std::string& model_dir) {
  DI_RETURN_IF_ERROR(check_engram_sizes(c));
  const std::string side_file = model_dir + "/" + kSideFileName, tokenizer_file = model_dir + "/tokenizer.json";
  if (std::filesystem::exists(side_file)) return load_side_file(c, side_file);
  if (!std::filesystem::exists(tokenizer_file)) {
    return Status::error(model_dir + ": this V4.1 model has Engram layers, whose token map comes from " + kSideFileName + " or is derived from " +
                         "tokenizer.json; neither is in the folder");
  }
  auto tokenizer = Tokenizer::load(tokenizer_file);
  if (!tokenizer.ok()) return tokenizer.status();
  return derive_engram_hashing(c, tokenizer.value(), tokenizer_file);
}

Status write_engram_side_file(const ModelConfig& c, const EngramHashing& e, const std::string& path, const std::string& note) {
  const auto bytes_of = [](const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    return std::vector<uint8_t>(p, p + n);
  };
  const auto flat = [](const std::vector<std::vector<int64_t>>& rows) {
    std::vector<int64_t> out;
    for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
    return out;
  };
  const int64_t n_layers = int64_t(c.engram_layers.size());
  const std::vector<int64_t> multipliers = flat(e.multipliers), primes = flat(e.primes), offsets = flat(e.offsets);
  std::vector<TensorToWrite> tensors = {
      {"engram.token_map", DType::kI32, {int64_t(e.token_map.size())}, bytes_of(e.token_map.data(), e.token_map.size() * sizeof(int32_t))},
      {"engram.multipliers", DType::kI64, {n_layers, c.engram_max_ngram}, bytes_of(multipliers.data(), multipliers.size() * sizeof(int64_t))},
      {"engram.primes", DType::kI64, {n_layers, e.n_rows_per_token()}, bytes_of(primes.data(), primes.size() * sizeof(int64_t))},
      {"engram.offsets", DType::kI64, {n_layers, e.n_rows_per_token()}, bytes_of(offsets.data(), offsets.size() * sizeof(int64_t))},
  };
  return write_safetensors(path, tensors, {{"note", note}});
}

void engram_table_row(const EngramTable& table, int64_t row, float* out) {
  const uint8_t* codes = table.codes + row * table.dim;
  const uint8_t* scales = table.scales + row * (table.dim / 32);
  for (int64_t i = 0; i < table.dim; ++i) out[i] = e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / 32]);
}

void copy_engram_table_rows(const EngramTable& table, const int64_t* rows, int64_t k0, int64_t k1, uint8_t* codes,
                            uint8_t* scales) {
  const int64_t row_scales = table.dim / 32;
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t row = rows[k];
    DI_CHECK_MSG(row >= 0 && row < table.rows, "Engram: a table row out of range");
    std::memcpy(codes + k * table.dim, table.codes + row * table.dim, size_t(table.dim));
    std::memcpy(scales + k * row_scales, table.scales + row * row_scales, size_t(row_scales));
  }
}

}  // namespace deepinfer
