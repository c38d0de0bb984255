#include "golden/decode_golden.h"

#include <ATen/ATen.h>

#include "golden/h5_tensors.h"
#include "reference/error.h"
#include "reference/hf_checkpoint.h"
#include "reference/weights.h"

namespace gemma4::golden {
namespace {

using torch::Tensor;

std::string root_string(const h5::File& file, const std::string& name) {
  if (!file.has_attr("/", name)) throw Error(file.path() + ": missing root attribute '" + name + "'");
  return file.attr_string("/", name);
}

Tensor dataset(const std::string& path, const TensorMap& group, const std::string& prefix, const std::string& name,
               torch::ScalarType dtype, int64_t rank) {
  const auto it = group.find(name);
  if (it == group.end()) throw Error(path + ": missing dataset '" + prefix + name + "'");
  if (it->second.scalar_type() != dtype || it->second.dim() != rank) {
    throw Error(path + ": dataset '" + prefix + name + "' must be " + c10::toString(dtype) + " of rank " +
                std::to_string(rank) + ", is " + c10::toString(it->second.scalar_type()) + " " +
                shape_string(it->second.sizes()));
  }
  return it->second;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every cache dataset is [B, Hkv, T, D] for a layer with a `first`, and its entries end where the
// prompt ends (the cache after the prompt).
void check_cache_entries(const DecodeGolden& g) {
  for (const auto& [name, t] : g.expected) {
    if (name == "scores") continue;
    const int layer = cache_layer(name);
    if (layer < 0 || !(ends_with(name, ".keys") || ends_with(name, ".values"))) {
      throw Error(g.path + ": unexpected dataset 'expected/" + name + "'");
    }
    if (t.dim() != 4 || t.size(0) != g.input_ids.size(0)) {
      throw Error(g.path + ": 'expected/" + name + "' must be [B, Hkv, T, D]");
    }
    const auto first = g.cache_first.find(layer);
    if (first == g.cache_first.end()) {
      throw Error(g.path + ": missing dataset 'expected/cache/layers." + std::to_string(layer) + ".first'");
    }
    if (first->second < 0 || first->second + t.size(2) != g.prompt_length()) {
      throw Error(g.path + ": layer " + std::to_string(layer) + "'s " + std::to_string(t.size(2)) +
                  " entries from index " + std::to_string(first->second) + " do not end at the prompt's end " +
                  std::to_string(g.prompt_length()));
    }
  }
}

}  // namespace

int cache_layer(const std::string& name) {
  const std::string prefix = "cache/layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return -1;
  try {
    return std::stoi(name.substr(prefix.size(), dot - prefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

bool is_decode_golden(const std::string& path) {
  try {
    const h5::File file = h5::File::open_read(path);
    return file.has_attr("/", "kind") && file.attr_string("/", "kind") == "decode";
  } catch (const Error&) {
    return false;
  }
}

DecodeGolden read_decode_golden(const std::string& path) {
  const h5::File file = h5::File::open_read(path);
  if (!file.has_attr("/", "format_version") || file.attr_int("/", "format_version") != kFormatVersion) {
    throw Error(path + ": not a decode golden of format_version " + std::to_string(kFormatVersion));
  }
  if (root_string(file, "kind") != "decode") throw Error(path + ": kind is not 'decode'");
  if (root_string(file, "dtype") != "f32") throw Error(path + ": decode goldens are f32");
  DecodeGolden g;
  g.path = path;
  g.name = root_string(file, "name");
  g.description = file.has_attr("/", "description") ? file.attr_string("/", "description") : "";
  g.generator = root_string(file, "generator");
  g.kv_key = parse_kv_key_convention(root_string(file, "kv_key"));
  g.case_dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  try {
    g.config = nlohmann::json::parse(root_string(file, "config"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": root attribute 'config' is not JSON: " + e.what());
  }
  g.weights_mode = read_weights_mode(file, path, WeightsMode::kStored);
  if (g.weights_mode == WeightsMode::kCheckpoint) g.case_dir = read_checkpoint_dir(file, path);
  if (g.weights_mode == WeightsMode::kGenerated || g.weights_mode == WeightsMode::kConstructed) {
    if (!file.has_attr("/", "seed")) {
      throw Error(path + ": weights = " + weights_mode_name(g.weights_mode) + " but no root attribute 'seed'");
    }
    g.seed = static_cast<uint64_t>(file.attr_int("/", "seed"));
  }
  if (!file.has_attr("/", "max_new_tokens")) throw Error(path + ": missing root attribute 'max_new_tokens'");
  g.max_new_tokens = file.attr_int("/", "max_new_tokens");

  for (const char* group : {"inputs", "expected"}) {
    if (!file.exists(group)) throw Error(path + ": missing group '" + group + "'");
  }
  const TensorMap inputs = read_tree(file, "inputs");
  TensorMap expected = read_tree(file, "expected");
  g.input_ids = dataset(path, inputs, "inputs/", "input_ids", torch::kInt64, 2);
  g.attention_mask = dataset(path, inputs, "inputs/", "attention_mask", torch::kInt64, 2);
  if (g.attention_mask.sizes() != g.input_ids.sizes()) throw Error(path + ": inputs/attention_mask is not [B, S]");
  g.sequences = dataset(path, expected, "expected/", "sequences", torch::kInt64, 2);
  const Tensor scores = dataset(path, expected, "expected/", "scores", torch::kFloat32, 3);
  const int64_t B = g.input_ids.size(0), S = g.input_ids.size(1), N = g.max_new_tokens;
  if (N < 1 || g.sequences.sizes() != torch::IntArrayRef{B, S + N} || scores.size(0) != N || scores.size(1) != B) {
    throw Error(path +
                ": sequences must be [B, S + N] and scores [N, B, V] with N = max_new_tokens = " + std::to_string(N));
  }
  if (!g.sequences.slice(1, 0, S).equal(g.input_ids)) throw Error(path + ": sequences do not start with input_ids");

  for (auto& [name, t] : expected) {
    if (t.is_floating_point() && !at::isfinite(t).all().item<bool>()) {
      throw Error(path + ": dataset 'expected/" + name + "' holds NaN or infinity");
    }
    if (name == "sequences") continue;
    if (cache_layer(name) >= 0 && ends_with(name, ".first")) {
      if (t.scalar_type() != torch::kInt64 || t.numel() != 1)
        throw Error(path + ": 'expected/" + name + "' must be int64 [1]");
      g.cache_first[cache_layer(name)] = t.item<int64_t>();
      continue;
    }
    g.expected[name] = t;
  }
  check_cache_entries(g);
  if (file.exists("judged")) g.judged = read_tree(file, "judged");  // none without caches (golden/real/)
  for (const auto& [name, mask] : g.judged) {
    const auto it = g.expected.find(name);
    if (it == g.expected.end()) throw Error(path + ": 'judged/" + name + "' names no dataset of expected/");
    const Tensor& t = it->second;
    if (mask.scalar_type() != torch::kInt64 || mask.sizes() != torch::IntArrayRef{t.size(0), 1, t.size(2), 1}) {
      throw Error(path + ": 'judged/" + name + "' must be int64 [B, 1, T, 1]");
    }
  }
  return g;
}

Model decode_model(const DecodeGolden& g, torch::ScalarType dtype, const torch::Device& device) {
  // stored: the checkpoint beside the file; checkpoint: the one its attribute names (case_dir both).
  if (g.weights_mode == WeightsMode::kStored || g.weights_mode == WeightsMode::kCheckpoint) {
    return load_model(g.case_dir, dtype, device);
  }
  const Config config = parse_config(g.config);
  return Model(config, seeded_weights(g.weights_mode, config, g.seed, dtype, device));
}

TensorMap decode_candidate(const DecodeGolden& g, const Model& model, const gemma4::GenerateOptions& options,
                           const std::vector<Draft>* drafts) {
  if (drafts) {
    const Tensor logits = speculative_logits(model, g.sequences, g.attention_mask, g.prompt_length(), options, *drafts);
    return {{"scores", logits.slice(1, g.prompt_length() - 1, g.prompt_length() - 1 + g.max_new_tokens).transpose(0, 1)}};
  }
  std::map<int, CacheContents> caches;
  const Tensor logits = decode_logits(model, g.sequences, g.attention_mask, g.prompt_length(), options, &caches);
  TensorMap out;
  // The logits at index t chose token t + 1: step i's at S - 1 + i.
  out["scores"] = logits.slice(1, g.prompt_length() - 1, g.prompt_length() - 1 + g.max_new_tokens).transpose(0, 1);
  for (const auto& [layer, first] : g.cache_first) {
    const auto held = caches.find(layer);
    if (held == caches.end()) throw Error("layer " + std::to_string(layer) + " has no cache of its own");
    const CacheContents& c = held->second;
    const int64_t want = g.expected.at("cache/layers." + std::to_string(layer) + ".keys").size(2);
    if (first < c.first || first + want > c.first + c.k.size(2)) {
      throw Error("layer " + std::to_string(layer) + "'s cache holds indices " + std::to_string(c.first) + ".." +
                  std::to_string(c.first + c.k.size(2) - 1) + " after the prompt; the golden has " +
                  std::to_string(first) + ".." + std::to_string(first + want - 1));
    }
    const std::string key = "cache/layers." + std::to_string(layer);
    out[key + ".keys"] = c.k.slice(2, first - c.first, first - c.first + want).to(torch::kFloat32).cpu();
    out[key + ".values"] = c.v.slice(2, first - c.first, first - c.first + want).to(torch::kFloat32).cpu();
  }
  return out;
}

VerifyReport verify_decode_golden(const DecodeGolden& g, const torch::Device& device) {
  const Model model = decode_model(g, torch::kFloat32, device);
  VerifyReport report;
  // The golden's datasets as an f32 golden case, judged as every golden file is (golden::judge).
  GoldenCase as_golden;
  as_golden.dtype = "f32";
  as_golden.expected = g.expected;
  as_golden.judged = g.judged;
  auto judge_run = [&](const std::string& label, const TensorMap& candidate) {
    for (TensorCheck& check : judge(as_golden, candidate).checks) {
      check.name = label + check.name;
      report.checks.push_back(std::move(check));
    }
  };
  gemma4::GenerateOptions options;
  options.kv_key = g.kv_key;
  judge_run("whole-prompt/", decode_candidate(g, model, options));
  options.prefill_chunk = 5;
  judge_run("prefill-chunk-5/", decode_candidate(g, model, options));

  // generate's own choices: token ids are exact (any difference is >= 1, far above check_fp32's bound).
  options.prefill_chunk = 0;
  options.max_new_tokens = g.max_new_tokens;
  for (bool cache : {true, false}) {
    options.use_cache = cache;
    const Tensor sequences = generate(model, g.input_ids, g.attention_mask, options).sequences;
    const Tensor expected = g.sequences.to(torch::kFloat32);
    report.checks.push_back({std::string("generate-") + (cache ? "cache" : "no-cache") + "/sequences",
                             check_fp32(sequences.to(torch::kFloat32), expected), ""});
  }
  return report;
}

}  // namespace gemma4::golden
