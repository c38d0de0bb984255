// Both shared-KV key conventions meet at the rendezvous on every released config, and give
// bitwise-identical numerics; a broken source assignment is caught.
#include <gtest/gtest.h>

#include <map>

#include "reference/error.h"
#include "reference/kv_sharing.h"
#include "reference/model.h"
#include "reference/tests/test_support.h"

namespace gemma4 {
namespace {

const char* const kReleased[] = {"gemma-4-e2b", "gemma-4-e4b", "gemma-4-31b", "gemma-4-26b-a4b"};
const KvKeyConvention kConventions[] = {KvKeyConvention::kLayerIndex, KvKeyConvention::kLayerType};

TEST(KvSharing, EveryReadKeyIsWrittenByAStoringLayerOfTheSameType) {
  for (const char* name : kReleased) {
    const Config c = load_config(test::released_configs_dir() + "/" + name + ".json");
    for (KvKeyConvention convention : kConventions) {
      SCOPED_TRACE(std::string(name) + " " + kv_key_convention_name(convention));
      EXPECT_NO_THROW(check_kv_rendezvous(c, convention));
      std::map<std::string, int> writer;  // key -> storing layer
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        if (c.layers[l].kv_shared) {
          const std::string key = kv_read_key(c, l, convention);
          ASSERT_TRUE(writer.count(key)) << "layer " << l << " reads '" << key << "', never written";
          EXPECT_EQ(writer[key], c.layers[l].kv_source);
          EXPECT_EQ(c.layer_types[writer[key]], c.layer_types[l]);
        }
        if (c.layers[l].stores_kv) writer[kv_write_key(c, l, convention)] = l;
      }
    }
  }
}

TEST(KvSharing, ConventionNames) {
  EXPECT_EQ(parse_kv_key_convention("layer-index"), KvKeyConvention::kLayerIndex);
  EXPECT_EQ(parse_kv_key_convention("layer-type"), KvKeyConvention::kLayerType);
  EXPECT_THROW(parse_kv_key_convention("kv_shared_layer_index"), Error);
}

// Negative control: a shared layer pointed at a source that does not store K/V must be caught
// under the layer-index convention (the layer-type key hides the mistake, which is why both
// conventions are checked).
TEST(KvSharing, RendezvousCheckCatchesAWrongSource) {
  Config c = load_config(test::released_configs_dir() + "/gemma-4-e2b.json");
  c.layers[20].kv_source = 12;  // layer 12 stores nothing
  EXPECT_THROW(check_kv_rendezvous(c, KvKeyConvention::kLayerIndex), Error);
}

TEST(KvSharing, BothConventionsGiveIdenticalOutputs) {
  const Config config = parse_config(test::tiny_shared_kv_config());
  Model model(config, random_weights(config, 7, torch::kFloat32, torch::kCPU));
  ForwardInputs in;
  in.input_ids = test::random_ids(2, 12, config.vocab_size, 3);
  ForwardOptions by_index, by_type;
  by_index.kv_key = KvKeyConvention::kLayerIndex;
  by_type.kv_key = KvKeyConvention::kLayerType;
  torch::NoGradGuard no_grad;
  const ForwardOutputs a = model.forward(in, by_index), b = model.forward(in, by_type);
  EXPECT_TRUE(torch::equal(a.logits, b.logits));
}

}  // namespace
}  // namespace gemma4
