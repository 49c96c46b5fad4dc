// safetensors reading (mmap, zero copy) and writing, and a sharded checkpoint directory
// (model.safetensors.index.json + shards). Tensors are views into the mapping: nothing is expanded or
// copied, so a 149 GB FP8/FP4 checkpoint runs from its stored form. Every header is validated before
// use: offsets inside the file, sizes matching dtype x shape, no overlaps; errors name file and tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "core/status.h"

namespace deepinfer {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;      // outermost first
  const uint8_t* data = nullptr;   // points into the file mapping
  size_t n_bytes = 0;
  const std::string* file = nullptr;  // the shard this tensor lives in

  int64_t numel() const;
  std::string shape_string() const;  // "[4, 256]"
  template <typename T> const T* as() const { return reinterpret_cast<const T*>(data); }
};

// For a tensor read a few rows at a time (embedding and Engram tables): 4 KB pages over its bytes, so that a
// lookup reads and keeps only the pages around its row, where the rest of the mapping asks for huge pages
// (SafetensorsFile::open) and a 2 MB fault per lookup would read most of a vocabulary table for one prompt.
void advise_row_lookups(const TensorView& t);

// One mapped .safetensors file. Move-only; unmaps on destruction.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_bytes() const { return size_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // mlock()s the whole mapping, faulting it in: its pages stay in RAM until the file is unmapped.
  Status lock_in_memory() const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: either model.safetensors.index.json + shards, or a single model.safetensors.
class Checkpoint {
 public:
  struct OpenOptions {
    bool show_progress = false;  // one line per shard on stderr (shards, bytes, rate)
    // mlock every shard (SafetensorsFile::lock_in_memory): the whole checkpoint is read into RAM at open and
    // no page of it is reclaimed later. Without it, the kernel may drop weights untouched for a while (the
    // experts a stretch of tokens did not route to) and read them back from disk on their next use.
    bool lock_in_memory = false;
  };
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir, const OpenOptions& options);
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir) { return open(dir, OpenOptions{}); }

  const TensorView* find(const std::string& name) const;
  std::vector<std::string> tensor_names() const;
  const std::string& dir() const { return dir_; }
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> by_name_;
};

// A tensor to write: raw little-endian bytes in the dtype's storage form.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown.
size_t resident_bytes();

}  // namespace deepinfer
