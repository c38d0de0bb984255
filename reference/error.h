#pragma once
// The one exception type of the project. Its message is a single line meant for a person: it names
// the file, field, tensor or layer at fault. The CLI prints it and exits non-zero.
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace gemma4 {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "[2, 3]", for messages about shapes (tensor.sizes() and std::vector<int64_t> both convert).
inline std::string shape_string(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace gemma4
