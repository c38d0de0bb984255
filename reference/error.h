#pragma once
// The one exception type of the project. Its message is a single line meant for a person: it names
// the file, field, tensor or layer at fault. The CLI prints it and exits non-zero.
#include <stdexcept>
#include <string>

namespace gemma4 {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace gemma4
