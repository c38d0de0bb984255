// Config parsing: the released configs, both serializations of the global geometry, the
// defaults, and every validation error naming its field or layer.
#include <gtest/gtest.h>

#include <fstream>

#include "reference/config.h"
#include "reference/ops.h"
#include "reference/error.h"
#include "reference/tests/test_support.h"

namespace gemma4 {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

Config released(const std::string& name) { return load_config(test::released_configs_dir() + "/" + name + ".json"); }

// Expects parse_config to throw a gemma4::Error whose message contains `phrase`.
void expect_error(const json& j, const std::string& phrase) {
  try {
    parse_config(j);
    ADD_FAILURE() << "no error; expected one mentioning \"" << phrase << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << "message: " << e.what();
  }
}

TEST(Config, E2BGeometry) {
  const Config c = released("gemma-4-e2b");
  ASSERT_EQ(c.num_hidden_layers, 35);
  EXPECT_EQ(c.first_kv_shared_layer(), 15);
  for (int l = 0; l < 35; ++l) {
    const LayerSpec& s = c.layers[l];
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(s.head_dim, s.type == LayerType::kFull ? 512 : 256);
    EXPECT_EQ(s.num_kv_heads, 1);
    EXPECT_FALSE(s.k_eq_v);
    EXPECT_EQ(s.kv_shared, l >= 15);
    EXPECT_EQ(s.stores_kv, l == 13 || l == 14);
    if (s.kv_shared) EXPECT_EQ(s.kv_source, s.type == LayerType::kSliding ? 13 : 14);
    EXPECT_EQ(s.mlp_intermediate, l >= 15 ? 2 * 6144 : 6144);  // use_double_wide_mlp
  }
}

TEST(Config, E4BSources) {
  const Config c = released("gemma-4-e4b");
  EXPECT_EQ(c.first_kv_shared_layer(), 24);
  EXPECT_TRUE(c.layers[22].stores_kv);
  EXPECT_TRUE(c.layers[23].stores_kv);
  for (int l = 24; l < 42; ++l) EXPECT_EQ(c.layers[l].kv_source, c.layers[l].type == LayerType::kSliding ? 22 : 23);
  EXPECT_EQ(c.layers[30].mlp_intermediate, 10240);  // no double-wide MLP on E4B
}

TEST(Config, Dense31BGlobalLayersAreKEqV) {
  const Config c = released("gemma-4-31b");
  for (const LayerSpec& s : c.layers) {
    if (s.type == LayerType::kFull) {
      EXPECT_EQ(s.head_dim, 512);
      EXPECT_EQ(s.num_kv_heads, 4);
      EXPECT_TRUE(s.k_eq_v);
    } else {
      EXPECT_EQ(s.head_dim, 256);
      EXPECT_EQ(s.num_kv_heads, 16);
      EXPECT_FALSE(s.k_eq_v);
    }
    EXPECT_FALSE(s.kv_shared);
    EXPECT_FALSE(s.stores_kv);
  }
  EXPECT_EQ(c.rope.at(LayerType::kFull).rope_type, "proportional");
  EXPECT_DOUBLE_EQ(c.rope.at(LayerType::kFull).partial_rotary_factor, 0.25);
}

TEST(Config, Moe26B) {
  const Config c = released("gemma-4-26b-a4b");
  EXPECT_TRUE(c.enable_moe_block);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.top_k_experts, 8);
  EXPECT_EQ(c.moe_intermediate_size, 704);
  EXPECT_EQ(c.layers.back().num_kv_heads, 2);
}

// transformers >= 5.15 writes per_layer_config; the released files use the top-level fields.
json to_per_layer_config(json j, const Config& c) {
  json overrides = json::object();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_types[l] != LayerType::kFull) continue;
    overrides[std::to_string(l)] = {{"head_dim", c.layers[l].head_dim}, {"num_key_value_heads", c.layers[l].num_kv_heads}};
  }
  j.erase("global_head_dim");
  j.erase("num_global_key_value_heads");
  j["per_layer_config"] = overrides;
  return j;
}

void expect_same_layers(const Config& a, const Config& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(a.layers[l].type, b.layers[l].type);
    EXPECT_EQ(a.layers[l].head_dim, b.layers[l].head_dim);
    EXPECT_EQ(a.layers[l].num_kv_heads, b.layers[l].num_kv_heads);
    EXPECT_EQ(a.layers[l].k_eq_v, b.layers[l].k_eq_v);
    EXPECT_EQ(a.layers[l].kv_shared, b.layers[l].kv_shared);
    EXPECT_EQ(a.layers[l].kv_source, b.layers[l].kv_source);
    EXPECT_EQ(a.layers[l].stores_kv, b.layers[l].stores_kv);
    EXPECT_EQ(a.layers[l].mlp_intermediate, b.layers[l].mlp_intermediate);
  }
}

TEST(Config, BothGlobalGeometrySerializationsAgree) {
  for (const char* name : {"gemma-4-e2b", "gemma-4-e4b", "gemma-4-31b", "gemma-4-26b-a4b"}) {
    SCOPED_TRACE(name);
    const json top_level = read_json(test::released_configs_dir() + "/" + name + ".json");
    const Config a = parse_config(top_level);
    const Config b = parse_config(to_per_layer_config(top_level, a));
    expect_same_layers(a, b);
  }
}

TEST(Config, NestedTextConfig) {
  const json flat = read_json(test::released_configs_dir() + "/gemma-4-e2b.json");
  const json nested = {{"model_type", "gemma4"}, {"architectures", {"Gemma4ForConditionalGeneration"}}, {"text_config", flat}};
  expect_same_layers(parse_config(flat), parse_config(nested));
}

TEST(Config, DefaultLayerTypesAndLastLayerForcedFull) {
  json j = test::tiny_moe_config();
  j.erase("layer_types");
  j["num_hidden_layers"] = 8;
  const Config c = parse_config(j);
  for (int l = 0; l < 8; ++l) {
    const bool full = (l + 1) % 6 == 0 || l == 7;
    EXPECT_EQ(c.layer_types[l], full ? LayerType::kFull : LayerType::kSliding) << "layer " << l;
  }
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention"};
  EXPECT_EQ(parse_config(j).layer_types.back(), LayerType::kFull);
}

TEST(Config, DefaultRopeParameters) {
  const Config c = parse_config(test::tiny_moe_config());
  EXPECT_EQ(c.rope.at(LayerType::kSliding).rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope.at(LayerType::kSliding).theta, 1e4);
  EXPECT_EQ(c.rope.at(LayerType::kFull).rope_type, "proportional");
  EXPECT_DOUBLE_EQ(c.rope.at(LayerType::kFull).theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rope.at(LayerType::kFull).partial_rotary_factor, 0.25);
}

TEST(Config, GlobalKvHeadsOnlyWithKEqV) {
  json j = test::tiny_moe_config();
  j["attention_k_eq_v"] = false;
  const Config c = parse_config(j);
  EXPECT_EQ(c.layers[1].num_kv_heads, 2);  // num_global_key_value_heads ignored without K=V
  EXPECT_FALSE(c.layers[1].k_eq_v);
}

// The released K=V config names num_global_key_value_heads; one that leaves it out keeps
// num_key_value_heads on its full layers rather than a zero head count.
TEST(Config, KEqVWithoutGlobalKvHeadsKeepsNumKeyValueHeads) {
  json j = test::tiny_moe_config();
  j.erase("num_global_key_value_heads");
  const Config c = parse_config(j);
  EXPECT_EQ(c.layers[1].num_kv_heads, 2);
  EXPECT_TRUE(c.layers[1].k_eq_v);
}

// A per-layer override may name any count; zero is refused naming the layer (not a division
// by zero in the divisibility check that follows).
TEST(Config, PerLayerZeroKvHeadsIsRefused) {
  json j = test::tiny_moe_config();
  j.erase("num_global_key_value_heads");
  j.erase("global_head_dim");
  j["per_layer_config"] = {{"1", {{"num_key_value_heads", 0}}}};
  expect_error(j, "layer 1 (full_attention): num_key_value_heads must be positive, got 0");
}

TEST(Config, NumKvSharedLayersOutOfRangeIsRefused) {
  for (int shared : {-1, 8}) {
    json j = test::tiny_shared_kv_config();  // 7 layers
    j["num_kv_shared_layers"] = shared;
    expect_error(j, "field 'num_kv_shared_layers' must be in [0, num_hidden_layers], got " + std::to_string(shared));
  }
}

TEST(Config, PerLayerConfigMayNameLayerZero) {
  json j = test::tiny_moe_config();
  j.erase("num_global_key_value_heads");
  j.erase("global_head_dim");
  j["per_layer_config"] = {{"0", {{"num_key_value_heads", 1}}}};
  EXPECT_EQ(parse_config(j).layers[0].num_kv_heads, 1);
  j["per_layer_config"] = {{"-1", {{"num_key_value_heads", 1}}}};
  expect_error(j, "has key '-1', which is not a layer index");
}

// Per-layer inputs of width 1 still need a vocabulary (a boundary no released config sits on).
TEST(Config, PerLayerInputsOfWidthOneNeedAVocabulary) {
  json j = test::tiny_shared_kv_config();
  j["hidden_size_per_layer_input"] = 1;
  j["vocab_size_per_layer_input"] = 0;
  expect_error(j, "vocab_size_per_layer_input");
}

// Found by conformance/quality/fuzz: 2^62 layers made the per-layer loops run for ever.
TEST(Config, AbsurdLayerCountIsRefused) {
  json j = test::tiny_moe_config();
  j.erase("layer_types");
  j["num_hidden_layers"] = int64_t(1) << 62;
  expect_error(j, "field 'num_hidden_layers' is 4611686018427387904; at most 4096");
}

TEST(Config, PadTokenIdDefaultsToZeroAndMayBeNull) {
  json j = test::tiny_moe_config();
  EXPECT_EQ(parse_config(j).pad_token_id, 0);
  j["pad_token_id"] = nullptr;
  EXPECT_EQ(parse_config(j).pad_token_id, -1);
  j["pad_token_id"] = 5;
  EXPECT_EQ(parse_config(j).pad_token_id, 5);
  j["pad_token_id"] = 64;
  expect_error(j, "'pad_token_id' must be below vocab_size");
}

TEST(ConfigErrors, MissingRequiredField) {
  json j = test::tiny_moe_config();
  j.erase("hidden_size");
  expect_error(j, "missing required field 'hidden_size'");
}

TEST(ConfigErrors, WrongFieldType) {
  json j = test::tiny_moe_config();
  j["num_attention_heads"] = "four";
  expect_error(j, "'num_attention_heads' must be an integer");
}

TEST(ConfigErrors, SharedLayerWithoutSourceOfItsType) {
  json j = test::tiny_shared_kv_config();
  // No full layer before the sharing point (layer 3): the full layer 6 has nothing to read.
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention"};
  expect_error(j, "layer 6 (full_attention) is KV-shared");
}

TEST(ConfigErrors, AllLayersShared) {
  json j = test::tiny_shared_kv_config();
  j["num_kv_shared_layers"] = 7;
  expect_error(j, "layer 0 (sliding_attention) is KV-shared");
}

TEST(ConfigErrors, HeadsNotDivisibleByKvHeads) {
  json j = test::tiny_moe_config();
  j["num_key_value_heads"] = 3;
  expect_error(j, "layer 0 (sliding_attention): num_attention_heads 4 is not divisible by num_key_value_heads 3");
}

// One KV-shared layer still has a source that stores its K/V (a mutation that stored K/V only when
// two or more layers share survived the suite: conformance/quality/mutation).
TEST(Config, OneSharedLayerReadsAStoringSource) {
  json j = test::tiny_shared_kv_config();
  j["num_kv_shared_layers"] = 1;
  const Config c = parse_config(j);
  for (int l = 0; l < 6; ++l) EXPECT_FALSE(c.layers[l].kv_shared) << "layer " << l;
  EXPECT_TRUE(c.layers[6].kv_shared);
  EXPECT_EQ(c.layers[6].kv_source, 2);
  EXPECT_TRUE(c.layers[2].stores_kv);
}

TEST(ConfigErrors, UnknownRopeType) {
  json j = test::tiny_moe_config();
  j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}},
                          {"full_attention", {{"rope_type", "yarn"}, {"rope_theta", 1e6}}}};
  expect_error(j, "rope_parameters.full_attention.rope_type' is 'yarn'");
}

TEST(ConfigErrors, RopeParametersMissingAType) {
  json j = test::tiny_moe_config();
  j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}}}};
  expect_error(j, "no entry for 'full_attention'");
}

TEST(ConfigErrors, UnknownActivation) {
  json j = test::tiny_moe_config();
  j["hidden_activation"] = "silu";
  expect_error(j, "'hidden_activation' is 'silu'");
}

TEST(ConfigErrors, LayerTypesLengthAndValues) {
  json j = test::tiny_moe_config();
  j["layer_types"] = {"sliding_attention", "full_attention"};
  expect_error(j, "'layer_types' has 2 entries but num_hidden_layers is 3");
  j["layer_types"] = {"sliding_attention", "local_attention", "full_attention"};
  expect_error(j, "layer_types[1]");
}

TEST(ConfigErrors, PerLayerConfig) {
  json j = test::tiny_moe_config();
  j["per_layer_config"] = {{"7", {{"head_dim", 16}}}};
  expect_error(j, "per_layer_config' has key '7'");
  j["per_layer_config"] = {{"1", {{"intermediate_size", 16}}}};
  expect_error(j, "per_layer_config.1.intermediate_size' is not supported");
  j["per_layer_config"] = {{"1", {{"head_dim", 16}}}, {"2", {{"head_dim", 32}}}};
  expect_error(j, "layer 2 (full_attention): head_dim/num_key_value_heads 32/2 differ from layer 1's 16/2");
}

TEST(ConfigErrors, MoeFields) {
  json j = test::tiny_moe_config();
  j.erase("top_k_experts");
  expect_error(j, "'top_k_experts' is required when enable_moe_block is true");
  j = test::tiny_moe_config();
  j["top_k_experts"] = 5;
  expect_error(j, "'top_k_experts' (5) exceeds num_experts (4)");
  // The boundary: every expert chosen for every token is a valid (dense) mixture.
  j["top_k_experts"] = 4;
  EXPECT_EQ(parse_config(j).top_k_experts, 4);
}

// What transformers makes of a config.json that gives only the required fields, recorded by
// transformers itself (golden/generators/hf_cases.py defaults -> golden/transformers/defaults.json): every
// default the reference fills in, and RoPE's inverse frequencies per layer type as
// Gemma4TextRotaryEmbedding computes them.
TEST(Config, DefaultsAreTransformers) {
  const json fixture = read_json(test::source_dir() + "/golden/transformers/defaults.json");
  const Config c = parse_config(fixture.at("config"));
  const json& d = fixture.at("resolved");
  EXPECT_EQ(c.sliding_window, d.at("sliding_window").get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, d.at("rms_norm_eps").get<double>());
  EXPECT_EQ(c.tie_word_embeddings, d.at("tie_word_embeddings").get<bool>());
  EXPECT_EQ(c.pad_token_id, d.at("pad_token_id").get<int64_t>());
  EXPECT_EQ(c.final_logit_softcapping.has_value(), !d.at("final_logit_softcapping").is_null());
  EXPECT_EQ(c.hidden_size_per_layer_input, d.at("hidden_size_per_layer_input").get<int64_t>());
  EXPECT_EQ(c.vocab_size_per_layer_input, d.at("vocab_size_per_layer_input").get<int64_t>());
  EXPECT_EQ(c.attention_k_eq_v, d.at("attention_k_eq_v").get<bool>());
  EXPECT_EQ(c.use_double_wide_mlp, d.at("use_double_wide_mlp").get<bool>());
  EXPECT_EQ(c.num_kv_shared_layers, d.at("num_kv_shared_layers").get<int64_t>());
  EXPECT_EQ(c.enable_moe_block, d.at("enable_moe_block").get<bool>());
  EXPECT_EQ(c.hidden_activation, d.at("hidden_activation").get<std::string>());
  EXPECT_EQ(c.bidirectional, d.at("use_bidirectional_attention") == "all");
  ASSERT_EQ(c.layer_types.size(), d.at("layer_types").size());
  for (size_t l = 0; l < c.layer_types.size(); ++l) EXPECT_EQ(layer_type_name(c.layer_types[l]), d.at("layer_types")[l]);
  for (const auto& [name, rope] : fixture.at("rope").items()) {
    SCOPED_TRACE(name);
    const LayerType type = name == "sliding_attention" ? LayerType::kSliding : LayerType::kFull;
    const RopeParameters& r = c.rope.at(type);
    EXPECT_EQ(r.rope_type, rope.at("rope_type").get<std::string>());
    EXPECT_EQ(r.theta, rope.at("rope_theta").get<double>());
    EXPECT_EQ(r.partial_rotary_factor, rope.value("partial_rotary_factor", 1.0));
    int64_t head_dim = 0;
    for (const LayerSpec& s : c.layers) head_dim = s.type == type ? s.head_dim : head_dim;
    EXPECT_EQ(head_dim, rope.at("head_dim").get<int64_t>());
    const std::vector<double> want = rope.at("inv_freq").get<std::vector<double>>();
    const torch::Tensor got = rope_inv_freq(r, head_dim).to(torch::kFloat64);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
    // Both compute in float32; a different order of the same operations may move the last bit.
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i].item<double>(), want[i], 2e-7 * want[i] + 1e-12) << i;
  }
}

TEST(ConfigErrors, NotAGemma4TextConfig) {
  json j = test::tiny_moe_config();
  j["model_type"] = "gemma3_text";
  expect_error(j, "'model_type' is 'gemma3_text'");
}

TEST(ConfigErrors, FileErrorsNameThePath) {
  try {
    load_config("/nonexistent/config.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace gemma4
