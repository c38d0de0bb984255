// Model inputs the reference refuses before computing anything, on boundaries the conformance
// suite's tiny models do not sit on.
#include <gtest/gtest.h>

#include "reference/error.h"
#include "reference/model.h"
#include "reference/tests/test_support.h"

namespace gemma4 {
namespace {

// Per-layer embeddings of width 1 index a table of vocab_size_per_layer_input rows; a token id
// past it is refused (not an out-of-range gather).
TEST(ModelInputs, TokenPastThePerLayerVocabularyIsRefused) {
  nlohmann::json j = test::tiny_shared_kv_config();  // vocabulary 64
  j["hidden_size_per_layer_input"] = 1;
  j["vocab_size_per_layer_input"] = 32;
  const Config config = parse_config(j);
  const Model model(config, random_weights(config, 5, torch::kFloat32, torch::kCPU));
  ForwardInputs in;
  in.input_ids = torch::tensor({{1, 2, 40}}, torch::kInt64);
  try {
    model.forward(in, ForwardOptions{});
    ADD_FAILURE() << "token 40 accepted with vocab_size_per_layer_input 32";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size_per_layer_input 32"), std::string::npos) << e.what();
  }
  in.input_ids = torch::tensor({{1, 2, 31}}, torch::kInt64);
  EXPECT_NO_THROW(model.forward(in, ForwardOptions{}));
}

}  // namespace
}  // namespace gemma4
