// Decode goldens (golden/decode_golden.h, FORMAT.md "Decode goldens"): the committed files read and
// verify with the reference; a wrong score, a wrong token or a cache entry the candidate lacks fails
// them; a damaged file is refused naming what is wrong.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "golden/decode_golden.h"
#include "golden/h5_tensors.h"
#include "golden/tests/test_files.h"
#include "reference/files.h"
#include "reference/hf_checkpoint.h"

namespace gemma4::golden {
namespace {

using test::error_of;
using test::temp_path;

const std::string kDir = std::string(GEMMA4_SOURCE_DIR) + "/golden/transformers";

std::string decode_file(const std::string& name) { return kDir + "/" + name + "/decode.f32.h5"; }

// A copy of `source` without dataset `skip` (every attribute the format names, every other dataset).
void copy_without(const std::string& source, const std::string& target, const std::string& skip) {
  const h5::File in = h5::File::open_read(source);
  h5::File out = h5::File::create(target);
  for (const char* name :
       {"kind", "name", "description", "config", "dtype", "generator", "torch_version", "device", "kv_key"}) {
    out.set_attr("/", name, in.attr_string("/", name));
  }
  out.set_attr("/", "format_version", in.attr_int("/", "format_version"));
  out.set_attr("/", "max_new_tokens", in.attr_int("/", "max_new_tokens"));
  for (const auto& [name, t] : read_tree(in, "/")) {
    if (name != skip) out.write(name, t);
  }
}

TEST(DecodeGolden, CommittedFilesVerifyWithTheReference) {
  for (const std::string& name : {"dense_keqv", "e2b_like", "moe", "padded_batch"}) {
    const DecodeGolden g = read_decode_golden(decode_file(name));
    EXPECT_TRUE(is_decode_golden(decode_file(name)));
    EXPECT_FALSE(g.cache_first.empty()) << name;
    const VerifyReport report = verify_decode_golden(g, torch::kCPU);
    EXPECT_TRUE(report.pass()) << name << ": " << report.failures() << " failures";
  }
  EXPECT_FALSE(is_decode_golden(kDir + "/moe/golden.f32.h5"));  // a model golden is not a decode one
}

// Negative controls: the verifier must see a wrong score, a wrong token, and a wrong cache entry.
TEST(DecodeGolden, AWrongScoreTokenOrCacheEntryFails) {
  const DecodeGolden good = read_decode_golden(decode_file("padded_batch"));
  auto failures = [](const DecodeGolden& g) { return verify_decode_golden(g, torch::kCPU).failures(); };

  DecodeGolden score = good;
  score.expected["scores"] = good.expected.at("scores").clone();
  score.expected["scores"][3][1][7] += 0.05;  // 20x the fp32 bound of this tensor (2.75e-3)
  EXPECT_EQ(failures(score), 2);              // whole-prompt and chunked scores

  DecodeGolden token = good;
  token.sequences = good.sequences.clone();
  token.sequences[0][-1] = (token.sequences[0][-1].item<int64_t>() + 1) % 128;
  EXPECT_GE(failures(token), 2);  // generate's own tokens, cached and uncached (and the forced scores)

  DecodeGolden cache = good;
  const std::string key = "cache/layers." + std::to_string(good.cache_first.begin()->first) + ".keys";
  cache.expected[key] = good.expected.at(key).clone();
  cache.expected[key][0][0][-1][0] += 0.05;
  EXPECT_EQ(failures(cache), 2);
}

TEST(DecodeGolden, ACacheThatDroppedAnEntryIsNamed) {
  DecodeGolden g = read_decode_golden(decode_file("padded_batch"));
  const int layer = g.cache_first.begin()->first;
  // A golden that holds the whole prompt for a sliding layer, which keeps only its window.
  g.cache_first[layer] = 0;
  const std::string key = "cache/layers." + std::to_string(layer);
  for (const char* part : {".keys", ".values"}) {
    const torch::Tensor t = g.expected.at(key + part);
    g.expected[key + part] = at::zeros({t.size(0), t.size(1), g.prompt_length(), t.size(3)});
  }
  g.judged.clear();
  const Model model = load_model(g.case_dir, torch::kFloat32, torch::kCPU);
  GenerateOptions options;
  options.prefill_chunk = 5;  // the reference's sliding cache then holds only what the steps need
  EXPECT_NE(error_of([&] { decode_candidate(g, model, options); }).find("layer " + std::to_string(layer)),
            std::string::npos);
}

TEST(DecodeGolden, DamagedFilesAreRefusedNamingTheProblem) {
  const std::string source = decode_file("e2b_like");
  for (const std::string& missing : {"expected/scores", "inputs/attention_mask", "expected/cache/layers.0.first"}) {
    const std::string path = temp_path("decode.h5");
    copy_without(source, path, missing);
    EXPECT_NE(error_of([&] { read_decode_golden(path); }).find(missing), std::string::npos) << missing;
  }
  EXPECT_NE(error_of([&] { read_decode_golden(kDir + "/moe/golden.f32.h5"); }).find("decode"), std::string::npos);
}

}  // namespace
}  // namespace gemma4::golden
