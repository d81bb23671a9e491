#pragma once
// safetensors reading (mmap, zero copy, fully validated) and writing.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {str: str}}, then the byte buffer. Every check failure throws parity::Error
// naming the file and the problem.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace parity::io {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// One mmapped .safetensors file. Validates: file at least 8 bytes; header length within the
// file; header is a JSON object; dtype names known; shapes non-negative; shape × dtype size ==
// byte range length; ranges inside the buffer, non-overlapping, and covering it exactly.
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // null if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a checkpoint folder: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` (weight_map). A name listed by the index but missing from its
// shard is an error at open time.
class WeightStore {
 public:
  static WeightStore open_folder(const std::string& dir);
  const TensorView* find(const std::string& name) const;
  // Throws parity::Error("<name>: missing …") when absent.
  const TensorView& get(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel × dtype_size bytes
};

// Writes atomically (temp file + rename) so a crash never leaves a half-written file behind.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace parity::io
