#pragma once
// The tiny models the non-golden checks train: the golden model cases (E2B, E4B, 31B, 26B-A4B in
// miniature, golden/model_cases.h) with seeded weights, run through a backend's ops and hand-off.
#include <string>
#include <vector>

#include "conformance/check.h"
#include "golden/golden_file.h"
#include "reference/model.h"

namespace gemma4::conformance {

struct TinyModel {
  std::string name;  // "e2b", ...
  Config config;
  ModelWeights weights;      // in the suite's dtype, on its device
  golden::TensorMap inputs;  // input_ids, labels, attention_mask
};

std::vector<std::string> tiny_model_names();
TinyModel tiny_model(const std::string& name, const SuiteOptions& options, uint64_t seed = 11);

// The backend's ops and hand-off.
ForwardOptions backend_ops(const SuiteOptions& options);
// The same, with checkpointing of every layer when asked.
ForwardOptions backend_forward(const SuiteOptions& options, const Config& config, bool checkpoint = false);

// "" when the backend supports the options' device, dtype and every head dim of `config`.
std::string unsupported(const SuiteOptions& options, const Config& config);

}  // namespace gemma4::conformance
