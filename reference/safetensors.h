#pragma once
// Reading and writing the safetensors format: an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw tensor bytes.
// The header is parsed with nlohmann/json; the file is mapped read-only with mmap.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gemma4 {

class SafetensorsFile {
 public:
  struct Entry {
    torch::Dtype dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // byte offsets into the data section
    uint64_t end = 0;
  };

  // Maps the file and validates the whole header (JSON syntax, dtypes, shapes against byte sizes,
  // offsets inside the file). Throws gemma4::Error naming the path and the problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;  // throws naming the tensor and the file
  // A CPU tensor that owns a copy of the bytes (the mapping may close before the tensor dies).
  torch::Tensor read(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes CPU or CUDA tensors of dtypes F64/F32/F16/BF16/I64/I32/I8/U8/BOOL; names sorted as the
// format requires. Throws gemma4::Error when the file cannot be written.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// "F32" <-> torch::kFloat32 and so on; throws gemma4::Error on an unknown name.
torch::Dtype safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(torch::Dtype dtype);

}  // namespace gemma4
