#pragma once
// Tensors in HDF5 files, through the HDF5 C library. Dataset paths are slash-separated
// ("hidden_states/3", "grads/model.layers.0.mlp.up_proj.weight"); intermediate groups are created
// on write. Names may contain dots. Float tensors are stored as float32 or float64 (HDF5 1.10 has
// no bfloat16: bf16 and f16 are widened to float32 on write), integers as int64/int32.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gemma4::h5 {

class File {
 public:
  static File create(const std::string& path);     // truncates an existing file
  static File open_read(const std::string& path);  // throws gemma4::Error on a missing/damaged file
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }

  void write(const std::string& dataset, const torch::Tensor& tensor);  // any device, contiguous or not
  torch::Tensor read(const std::string& dataset) const;                 // CPU tensor; throws naming the dataset
  bool exists(const std::string& object) const;                         // group or dataset
  bool is_group(const std::string& object) const;
  std::vector<std::string> children(const std::string& group) const;    // names directly under it, sorted

  // Attributes on the root ("/") or on any group or dataset.
  void set_attr(const std::string& object, const std::string& name, const std::string& value);
  void set_attr(const std::string& object, const std::string& name, double value);
  void set_attr(const std::string& object, const std::string& name, int64_t value);
  bool has_attr(const std::string& object, const std::string& name) const;
  std::string attr_string(const std::string& object, const std::string& name) const;
  double attr_double(const std::string& object, const std::string& name) const;
  int64_t attr_int(const std::string& object, const std::string& name) const;

 private:
  File(std::string path, int64_t id) : path_(std::move(path)), id_(id) {}
  std::string path_;
  int64_t id_ = -1;  // hid_t
};

}  // namespace gemma4::h5
