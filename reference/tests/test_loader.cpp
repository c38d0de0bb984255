// Checkpoint loading: both key layouts, sharded files, tied and untied heads, keys a loader must
// skip, and every mismatch reported by name.
#include <gtest/gtest.h>

#include <fstream>

#include "reference/error.h"
#include "reference/files.h"
#include "reference/hf_checkpoint.h"
#include "reference/safetensors.h"
#include "reference/tests/test_support.h"

namespace gemma4 {
namespace {

using nlohmann::json;
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

class Loader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = files::make_temp_directory("gemma4_loader_");
  }

  // Random weights for `config_json`, named with `prefix` as a checkpoint would name them.
  Tensors checkpoint_tensors(const json& config_json, const std::string& prefix) {
    const Config config = parse_config(config_json);
    ModelWeights w = random_weights(config, 11, torch::kFloat32, torch::kCPU);
    Tensors out;
    for (const WeightSlot& slot : weight_slots(config, w)) {
      out.emplace_back(slot.name == "lm_head.weight" ? slot.name : prefix + slot.name, *slot.tensor);
    }
    return out;
  }

  void write_config(const json& j) { std::ofstream(files::join(dir_, "config.json")) << j.dump(2); }

  // Expects load_model to fail with a message containing each phrase.
  void expect_load_error(const std::vector<std::string>& phrases) {
    try {
      load_model(dir_, torch::kFloat32, torch::kCPU);
      ADD_FAILURE() << "loaded without error";
    } catch (const Error& e) {
      for (const std::string& p : phrases) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }

  std::string dir_;
};

TEST_F(Loader, CausalLmLayout) {
  const json j = test::tiny_moe_config();
  const Tensors tensors = checkpoint_tensors(j, "model.");
  write_config(j);
  write_safetensors(files::join(dir_, "model.safetensors"), tensors);
  const Model model = load_model(dir_, torch::kFloat32, torch::kCPU);
  EXPECT_TRUE(torch::equal(model.weights().lm_head, tensors.back().second));  // untied head
  EXPECT_EQ(model.checkpoint_key("layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight");
}

TEST_F(Loader, ConditionalGenerationLayoutShardedWithOtherModalities) {
  const json text = test::tiny_shared_kv_config();
  Tensors tensors = checkpoint_tensors(text, "model.language_model.");
  write_config({{"model_type", "gemma4"}, {"text_config", text}});
  // Split in two shards; add a vision tensor and the unused K/V weights of a shared layer (as
  // older files carry them), which the loader must skip.
  Tensors first(tensors.begin(), tensors.begin() + tensors.size() / 2);
  Tensors second(tensors.begin() + tensors.size() / 2, tensors.end());
  second.emplace_back("model.vision_tower.patch.weight", torch::ones({2, 2}));
  second.emplace_back("model.language_model.layers.5.self_attn.k_proj.weight", torch::ones({8, 32}));
  second.emplace_back("model.language_model.layers.5.self_attn.k_norm.weight", torch::ones({8}));
  json weight_map = json::object();
  for (const auto& [k, t] : first) weight_map[k] = "model-00001-of-00002.safetensors";
  for (const auto& [k, t] : second) weight_map[k] = "model-00002-of-00002.safetensors";
  write_safetensors(files::join(dir_, "model-00001-of-00002.safetensors"), first);
  write_safetensors(files::join(dir_, "model-00002-of-00002.safetensors"), second);
  std::ofstream(files::join(dir_, "model.safetensors.index.json")) << json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump();

  const Model model = load_model(dir_, torch::kBFloat16, torch::kCPU);
  EXPECT_EQ(model.dtype(), torch::kBFloat16);
  EXPECT_EQ(model.checkpoint_key("norm.weight"), "model.language_model.norm.weight");
  EXPECT_FALSE(model.weights().layers[5].attn.k_proj.defined());
  EXPECT_TRUE(torch::equal(model.weights().embed_tokens, tensors.front().second.to(torch::kBFloat16)));
}

// Checkpoints store BF16 or F16; the model may compute in another dtype.
TEST_F(Loader, HalfPrecisionFiles) {
  const json j = test::tiny_moe_config();
  write_config(j);
  for (torch::ScalarType stored : {torch::kBFloat16, torch::kFloat16}) {
    SCOPED_TRACE(c10::toString(stored));
    Tensors tensors = checkpoint_tensors(j, "model.");
    for (auto& [key, t] : tensors) t = t.to(stored);
    write_safetensors(files::join(dir_, "model.safetensors"), tensors);
    const Model model = load_model(dir_, torch::kFloat32, torch::kCPU);
    EXPECT_EQ(model.dtype(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(model.weights().embed_tokens, tensors.front().second.to(torch::kFloat32)));
  }
}

TEST_F(Loader, TiedHeadIgnoresAStoredLmHead) {
  const json j = test::tiny_shared_kv_config();
  Tensors tensors = checkpoint_tensors(j, "model.");
  tensors.emplace_back("lm_head.weight", torch::zeros({64, 32}));
  write_config(j);
  write_safetensors(files::join(dir_, "model.safetensors"), tensors);
  EXPECT_NO_THROW(load_model(dir_, torch::kFloat32, torch::kCPU));
}

TEST_F(Loader, ReportsMissingUnexpectedAndWrongShapeTogether) {
  const json j = test::tiny_moe_config();
  Tensors tensors = checkpoint_tensors(j, "model.");
  tensors.erase(tensors.begin() + 3);  // some layer-0 tensor
  const std::string dropped = checkpoint_tensors(j, "model.")[3].first;
  tensors.emplace_back("model.layers.0.mlp.extra_proj.weight", torch::ones({2}));
  for (auto& [key, t] : tensors) {
    if (key == "model.norm.weight") t = torch::ones({31});
  }
  write_config(j);
  write_safetensors(files::join(dir_, "model.safetensors"), tensors);
  expect_load_error({"1 missing: " + dropped, "1 unexpected: model.layers.0.mlp.extra_proj.weight",
                     "model.norm.weight [31] vs config [32]"});
}

// The message lists up to six names and marks only a longer list as cut.
TEST_F(Loader, MissingListIsCutOnlyAfterSixNames) {
  const json j = test::tiny_moe_config();
  for (int dropped : {6, 7}) {
    SCOPED_TRACE(std::to_string(dropped) + " dropped");
    Tensors tensors = checkpoint_tensors(j, "model.");
    tensors.erase(tensors.begin() + 1, tensors.begin() + 1 + dropped);
    write_config(j);
    write_safetensors(files::join(dir_, "model.safetensors"), tensors);
    try {
      load_model(dir_, torch::kFloat32, torch::kCPU);
      ADD_FAILURE() << "loaded without error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::to_string(dropped) + " missing: "), std::string::npos) << message;
      EXPECT_EQ(message.find(", ...") != std::string::npos, dropped > 6) << message;
    }
  }
}

TEST(Files, SizeOfAMissingFileIsMinusOne) {
  const std::string dir = files::make_temp_directory("gemma4_files_");
  EXPECT_EQ(files::file_size(files::join(dir, "absent")), -1);
  std::ofstream(files::join(dir, "three")) << "abc";
  EXPECT_EQ(files::file_size(files::join(dir, "three")), 3);
}

TEST_F(Loader, UntiedHeadMissing) {
  const json j = test::tiny_moe_config();
  Tensors tensors = checkpoint_tensors(j, "model.");
  tensors.pop_back();  // lm_head.weight
  write_config(j);
  write_safetensors(files::join(dir_, "model.safetensors"), tensors);
  expect_load_error({"missing: lm_head.weight"});
}

TEST_F(Loader, IntegerWeightIsRejected) {
  const json j = test::tiny_moe_config();
  Tensors tensors = checkpoint_tensors(j, "model.");
  for (auto& [key, t] : tensors) {
    if (key == "model.norm.weight") t = t.to(torch::kInt32);
  }
  write_config(j);
  write_safetensors(files::join(dir_, "model.safetensors"), tensors);
  expect_load_error({"model.norm.weight is I32"});
}

TEST_F(Loader, TruncatedFileIsAnErrorNotACrash) {
  const json j = test::tiny_moe_config();
  write_config(j);
  const std::string file = files::join(dir_, "model.safetensors");
  write_safetensors(file, checkpoint_tensors(j, "model."));
  files::truncate_file(file, files::file_size(file) / 2);
  expect_load_error({"model.safetensors", "truncated"});
}

TEST_F(Loader, IndexNamingAMissingShard) {
  const json j = test::tiny_moe_config();
  write_config(j);
  std::ofstream(files::join(dir_, "model.safetensors.index.json"))
      << json{{"weight_map", {{"model.embed_tokens.weight", "model-00001-of-00009.safetensors"}}}}.dump();
  expect_load_error({"model-00001-of-00009.safetensors"});
}

TEST_F(Loader, NoWeightsAtAll) {
  write_config(test::tiny_moe_config());
  expect_load_error({"no model.safetensors or model.safetensors.index.json"});
}

TEST_F(Loader, BadConfigNamesTheFile) {
  json j = test::tiny_moe_config();
  j.erase("vocab_size");
  write_config(j);
  expect_load_error({"config.json", "missing required field 'vocab_size'"});
}

}  // namespace
}  // namespace gemma4
