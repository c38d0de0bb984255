#pragma once
// The forward inputs file: safetensors with int64 input_ids [B, S] and optional labels and
// attention_mask of the same shape. Any other tensor in the file is an error (a typo would
// otherwise be ignored silently).
#include <string>

#include "reference/model.h"

namespace gemma4 {

ForwardInputs load_inputs(const std::string& path);

}  // namespace gemma4
