#include "reference/hf_checkpoint.h"

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "reference/error.h"
#include "reference/files.h"
#include "reference/safetensors.h"

namespace gemma4 {
namespace {

// Where each checkpoint key lives.
struct TensorIndex {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;
};

TensorIndex open_weights(const std::string& dir) {
  TensorIndex index;
  const std::string single = files::join(dir, "model.safetensors");
  const std::string sharded = files::join(dir, "model.safetensors.index.json");
  if (files::is_file(sharded)) {
    std::ifstream in(sharded);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(sharded + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j.at("weight_map").is_object()) {
      throw Error(sharded + ": no 'weight_map' object");
    }
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& [key, file] : j.at("weight_map").items()) {
      if (!file.is_string()) throw Error(sharded + ": weight_map['" + key + "'] is not a file name");
      const std::string name = file.get<std::string>();
      if (!by_file.count(name)) {
        index.files.push_back(std::make_unique<SafetensorsFile>(files::join(dir, name)));
        by_file[name] = index.files.back().get();
      }
      if (!by_file[name]->contains(key)) {
        throw Error(sharded + ": weight_map puts '" + key + "' in " + name + ", which does not hold it");
      }
      index.where[key] = by_file[name];
    }
  } else if (files::is_file(single)) {
    index.files.push_back(std::make_unique<SafetensorsFile>(single));
    for (const std::string& key : index.files.back()->names()) index.where[key] = index.files.back().get();
  } else {
    throw Error(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  return index;
}

// "model.language_model." when the checkpoint is in the conditional-generation layout.
std::string detect_prefix(const TensorIndex& index, const std::string& dir) {
  for (const char* prefix : {"model.language_model.", "model."}) {
    if (index.where.count(std::string(prefix) + "embed_tokens.weight")) return prefix;
  }
  throw Error(dir + ": no embedding tensor (looked for model.embed_tokens.weight and "
                             "model.language_model.embed_tokens.weight)");
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// "3 missing: a, b, c" with at most a few names, so the message stays one readable line.
std::string summarize(const std::vector<std::string>& names, const std::string& what) {
  std::string s = std::to_string(names.size()) + " " + what + ": ";
  const size_t shown = std::min<size_t>(names.size(), 6);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += ", ...";
  return s;
}

}  // namespace

Model load_model(const std::string& dir, torch::ScalarType dtype, const torch::Device& device) {
  if (!files::is_directory(dir)) throw Error(dir + ": not a directory");
  Config config = load_config(files::join(dir, "config.json"));
  const TensorIndex index = open_weights(dir);
  const std::string prefix = detect_prefix(index, dir);

  ModelWeights weights;
  std::vector<std::string> missing, wrong_shape, wrong_dtype;
  std::set<std::string> used;
  for (WeightSlot& slot : weight_slots(config, weights)) {
    const std::string key = slot.name == "lm_head.weight" ? slot.name : prefix + slot.name;
    auto it = index.where.find(key);
    if (it == index.where.end()) {
      missing.push_back(key);
      continue;
    }
    used.insert(key);
    const SafetensorsFile::Entry& entry = it->second->entry(key);
    if (entry.shape != slot.shape) {
      wrong_shape.push_back(key + " " + shape_string(entry.shape) + " vs config " + shape_string(slot.shape));
      continue;
    }
    if (!c10::isFloatingType(entry.dtype)) {
      wrong_dtype.push_back(key + " is " + safetensors_dtype_name(entry.dtype));
      continue;
    }
    *slot.tensor = it->second->read(key).to(device, dtype);
  }

  std::vector<std::string> unexpected;
  for (const auto& [key, file] : index.where) {
    if (used.count(key)) continue;
    // Other modalities of a conditional-generation checkpoint are not ours to load.
    const bool other_modality = prefix == "model.language_model." && !starts_with(key, prefix) && key != "lm_head.weight";
    if (other_modality) continue;
    const std::string name = starts_with(key, prefix) ? key.substr(prefix.size()) : key;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // tied: the embedding is used
    if (is_unused_shared_kv_weight(config, name)) continue;
    unexpected.push_back(key);
  }

  if (!missing.empty() || !unexpected.empty() || !wrong_shape.empty() || !wrong_dtype.empty()) {
    std::string message = dir + ": checkpoint does not match config.json:";
    if (!missing.empty()) message += " " + summarize(missing, "missing") + ";";
    if (!unexpected.empty()) message += " " + summarize(unexpected, "unexpected") + ";";
    if (!wrong_shape.empty()) message += " " + summarize(wrong_shape, "with wrong shape") + ";";
    if (!wrong_dtype.empty()) message += " " + summarize(wrong_dtype, "not floating point") + ";";
    message.pop_back();
    throw Error(message);
  }
  return Model(std::move(config), std::move(weights), prefix);
}

}  // namespace gemma4
