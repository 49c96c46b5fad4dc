// safetensors parsing and validation. The JSON header is parsed with nlohmann::json; its exceptions are
// caught here and turned into Status. Layout: u64 header length, JSON header, then the data area that
// every data_offsets pair indexes.
#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deepinfer {

using nlohmann::json;

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB

Status fail(const std::string& path, const std::string& what) {
  return Status::error(path + ": " + what);
}

// Error texts may quote bytes from a corrupt file: keep them printable ASCII (others become \xNN).
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char ch : text) {
    if (ch >= 0x20 && ch < 0x7f) {
      out += char(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out;
}

// Parses and validates the header of a mapped file into views.
Status parse_header(const std::string& path, const uint8_t* base, size_t size,
                    std::vector<TensorView>* tensors, std::map<std::string, std::string>* metadata) {
  if (size < 8) return fail(path, "file is " + std::to_string(size) + " bytes, too short for a safetensors header");
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return fail(path, "header length " + std::to_string(header_len) + " at byte 0 exceeds the file (" +
                          std::to_string(size) + " bytes): truncated or not a safetensors file");
  }
  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::exception& e) {
    return fail(path, "header JSON is malformed: " + printable(e.what()));
  }
  if (!header.is_object()) return fail(path, "header is not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  const size_t data_bytes = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return fail(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (m.value().is_string()) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + it.key() + "'";
    const json& entry = it.value();
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return fail(path, where + ": header entry needs dtype, shape and data_offsets");
    }
    TensorView view;
    view.name = it.key();
    if (!entry["dtype"].is_string() || !dtype_from_name(entry["dtype"].get<std::string>().c_str(), &view.dtype)) {
      return fail(path, where + ": unknown dtype " + entry["dtype"].dump());
    }
    const json& shape = entry["shape"];
    const json& offsets = entry["data_offsets"];
    if (!shape.is_array()) return fail(path, where + ": shape is not an array");
    uint64_t numel = 1;  // overflow-checked: a lying shape must not wrap around to the stored byte count
    for (const json& d : shape) {
      if (!d.is_number_unsigned()) return fail(path, where + ": shape has a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel)) {
        return fail(path, where + ": shape " + shape.dump() + " has more elements than any file can hold");
      }
      view.shape.push_back(int64_t(dim));
    }
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return fail(path, where + ": data_offsets must be two non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      return fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") reach past the data area (" + std::to_string(data_bytes) +
                            " bytes): the file is truncated or the header lies");
    }
    uint64_t expected = 0;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(view.dtype)), &expected)) {
      return fail(path, where + ": shape " + shape.dump() + " has more bytes than any file can hold");
    }
    if (end - begin != expected) {
      return fail(path, where + ": " + std::to_string(end - begin) + " bytes stored but dtype " +
                            dtype_name(view.dtype) + " x shape " + view.shape_string() + " needs " +
                            std::to_string(expected));
    }
    view.data = data + begin;
    view.n_bytes = end - begin;
    tensors->push_back(std::move(view));
  }
  // Overlapping tensors mean a corrupt header.
  std::vector<const TensorView*> sorted;
  for (const auto& t : *tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i - 1]->data + sorted[i - 1]->n_bytes > sorted[i]->data) {
      return fail(path, "tensors '" + sorted[i - 1]->name + "' and '" + sorted[i]->name + "' overlap at byte " +
                            std::to_string(sorted[i]->data - base));
    }
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return fail(path, "cannot stat");
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = size_t(st.st_size);
  if (file->size_ > 0) {
    void* mapping = mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED) {
      ::close(fd);
      return fail(path, std::string("mmap failed: ") + std::strerror(errno));
    }
    file->mapping_ = mapping;
    // Huge pages where the kernel can give them (THP in "madvise" mode or "always", a filesystem with large
    // folios such as ext4 on Linux 6.16+): faults then read 2 MB folios and map them with one PMD entry each.
    // The weights are streamed, gigabytes per token; with 4 KB pages every 4 KB of them cost a TLB miss, and
    // the page cache, left to itself, mapped ~40% of the 16 GB benchmark model in 4 KB pages (FilePmdMapped).
    // 2-core Xeon, that model read back from disk: decode batch 1 10.56 -> 11.60 tokens/s (FP8 GEMVs 16.6 ->
    // 20.1 GB/s), prefill 512 70.9 -> 73.4 tokens/s. Tables read a row at a time opt out (advise_row_lookups).
    // Advice only: a kernel without THP refuses it, and the mapping works as before.
    (void)madvise(mapping, file->size_, MADV_HUGEPAGE);
  }
  ::close(fd);
  DI_RETURN_IF_ERROR(parse_header(path, static_cast<const uint8_t*>(file->mapping_), file->size_,
                                  &file->tensors_, &file->metadata_));
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->tensors_[i].file = &file->path_;
    file->by_name_[file->tensors_[i].name] = i;
  }
  return file;
}

void advise_row_lookups(const TensorView& t) {
  if (t.n_bytes == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(t.data) + t.n_bytes + page - 1) / page * page;
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_NOHUGEPAGE);
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) munmap(mapping_, size_);
}

Status SafetensorsFile::lock_in_memory() const {
  if (!mapping_ || mlock(mapping_, size_) == 0) return Status();
  const int err = errno;
  std::string hint;
  if (err == ENOMEM || err == EPERM || err == EAGAIN) {
    struct rlimit limit {};
    getrlimit(RLIMIT_MEMLOCK, &limit);
    hint = limit.rlim_cur == RLIM_INFINITY ? std::string("; not enough free RAM for the checkpoint?")
                                           : "; the locked-memory limit is " + std::to_string(limit.rlim_cur >> 20) +
                                                 " MiB (ulimit -l): raise it, or run without --mlock";
  }
  return fail(path_, "mlock of " + std::to_string(size_) + " bytes failed: " + std::strerror(err) + hint);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir, const OpenOptions& options) {
  namespace fs = std::filesystem;
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      return fail(index_path.string(), std::string("malformed JSON: ") + e.what());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      return fail(index_path.string(), "missing object 'weight_map'");
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return fail(index_path.string(), "weight_map['" + it.key() + "'] is not a string");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos) return fail(index_path.string(), "shard name '" + shard + "' has a path");
      weight_map[it.key()] = shard;
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) shard_names.push_back(shard);
    }
    std::sort(shard_names.begin(), shard_names.end());
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    return fail(dir, "no model.safetensors.index.json or model.safetensors in this directory");
  }

  const auto t0 = std::chrono::steady_clock::now();
  size_t bytes_done = 0;
  for (size_t i = 0; i < shard_names.size(); ++i) {
    auto shard = SafetensorsFile::open((fs::path(dir) / shard_names[i]).string());
    if (!shard.ok()) return shard.status();
    if (options.lock_in_memory) DI_RETURN_IF_ERROR(shard.value()->lock_in_memory());
    bytes_done += shard.value()->file_bytes();
    if (options.show_progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\rloading shard %zu/%zu  %.2f GB mapped  %.1f GB/s   ", i + 1, shard_names.size(),
                   bytes_done / 1e9, s > 0 ? bytes_done / 1e9 / s : 0.0);
    }
    ckpt->shards_.push_back(std::move(shard.value()));
  }
  if (options.show_progress) std::fprintf(stderr, "\n");

  for (const auto& shard : ckpt->shards_) {
    const std::string shard_name = fs::path(shard->path()).filename().string();
    for (const TensorView& t : shard->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end()) {
          return fail(shard->path(), "tensor '" + t.name + "' is not listed in model.safetensors.index.json");
        }
        if (it->second != shard_name) {
          return fail(shard->path(), "tensor '" + t.name + "' is listed in the index under shard " + it->second);
        }
      }
      if (!ckpt->by_name_.emplace(t.name, &t).second) {
        return fail(shard->path(), "tensor '" + t.name + "' appears in more than one shard");
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!ckpt->by_name_.count(name)) {
      return fail((fs::path(dir) / shard).string(), "tensor '" + name + "' is listed in the index but missing from this shard");
    }
  }
  return ckpt;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : by_name_) names.push_back(name);
  return names;
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& shard : shards_) total += shard->file_bytes();
  return total;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (uint64_t(numel) * dtype_size(t.dtype) != t.bytes.size()) {
      return fail(path, "tensor '" + t.name + "': byte count does not match dtype x shape");
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';  // align the data area to 8 bytes
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return fail(path, "cannot open for writing");
  const uint64_t header_len = text.size();
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  if (!out.good()) return fail(path, "write failed");
  return Status();
}

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * size_t(sysconf(_SC_PAGESIZE));
}

}  // namespace deepinfer
