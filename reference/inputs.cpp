#include "reference/inputs.h"

#include "reference/error.h"
#include "reference/safetensors.h"

namespace gemma4 {

ForwardInputs load_inputs(const std::string& path) {
  const SafetensorsFile file(path);
  for (const std::string& name : file.names()) {
    if (name != "input_ids" && name != "labels" && name != "attention_mask") {
      throw Error(path + ": unexpected tensor '" + name + "' (expected input_ids, labels, attention_mask)");
    }
  }
  if (!file.contains("input_ids")) throw Error(path + ": no 'input_ids' tensor");
  ForwardInputs in;
  auto read_int64 = [&](const char* name) {
    if (!file.contains(name)) return torch::Tensor();
    if (file.entry(name).dtype != torch::kInt64) {
      throw Error(path + ": '" + name + "' must be int64 (I64), is " + safetensors_dtype_name(file.entry(name).dtype));
    }
    return file.read(name);
  };
  in.input_ids = read_int64("input_ids");
  in.labels = read_int64("labels");
  in.attention_mask = read_int64("attention_mask");
  return in;
}

}  // namespace gemma4
