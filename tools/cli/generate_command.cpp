// gemma4-conform generate: greedy generation with the reference (issue "Decode conformance"), the
// contract other tools rely on. Reads a Hugging Face checkpoint and a prompt file, and writes what
// transformers' generate(do_sample=False, output_logits=True, return_dict_in_generate=True) gives:
// sequences [B, S+N] int64 and scores [N, B, V] float32 (each step's logits).
#include <torch/version.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "git_sha.h"  // generated at build time
#include "golden/h5_tensors.h"
#include "reference/error.h"
#include "reference/generate.h"
#include "reference/hf_checkpoint.h"
#include "reference/inputs.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"
#include "tools/cli/output_file.h"

namespace gemma4::cli {
namespace {

const std::vector<Option> kGenerateOptions = {
    {"model", "DIR", "Hugging Face checkpoint directory (config.json + safetensors)", true},
    {"inputs", "FILE",
     "safetensors with int64 input_ids [B,S] and optional attention_mask [B,S] (without it, inferred from pad tokens "
     "as "
     "transformers' generate does)",
     true},
    {"max-new-tokens", "N", "how many tokens to generate (exactly N: no stop at end-of-sequence)", true},
    {"out", "FILE.h5", "output HDF5 file: sequences, scores", true},
    {"dtype", "f32|bf16|f16", "compute dtype (default f32)"},
    {"device", "cpu|cuda", "device (default cpu)"},
    {"kv-key", "layer-index|layer-type", "shared-KV key convention (default layer-type, transformers >= 5.8)"},
    {"no-cache", "", "recompute the full forward over every token at each step instead of a KV cache"},
    {"prefill-chunk", "C", "feed the prompt to the cache C tokens at a time (default: all at once)"},
};

// transformers' pad and end-of-sequence ids for generation: generation_config.json in the model
// directory where present, else the text config.
std::pair<int64_t, std::vector<int64_t>> generation_special_tokens(const std::string& model_dir, const Model& model) {
  nlohmann::json source = model.config().text_config_json;
  const std::string path = model_dir + "/generation_config.json";
  if (std::ifstream file(path); file) {
    try {
      source = nlohmann::json::parse(file);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": not valid JSON (" + e.what() + ")");
    }
  }
  int64_t pad = model.config().pad_token_id;
  if (source.contains("pad_token_id"))
    pad = source["pad_token_id"].is_number_integer() ? source["pad_token_id"].get<int64_t>() : -1;
  std::vector<int64_t> eos;
  if (const auto it = source.find("eos_token_id"); it != source.end()) {
    if (it->is_number_integer()) eos.push_back(it->get<int64_t>());
    if (it->is_array()) {
      for (const auto& id : *it) {
        if (id.is_number_integer()) eos.push_back(id.get<int64_t>());
      }
    }
  }
  return {pad, eos};
}

int64_t parse_count(const Args& args, const std::string& name, int64_t minimum) {
  const std::string text = args.get(name);
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < minimum) {
    throw UsageError{"--" + name + " must be an integer >= " + std::to_string(minimum) + ", got '" + text + "'"};
  }
  return value;
}

}  // namespace

int generation_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("generate", "Greedy generation with the reference Gemma-4 decoder, as transformers' generate.",
                  kGenerateOptions, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  const torch::ScalarType dtype = parse_dtype(args.get("dtype", "f32"));
  const torch::Device device = parse_device(args.get("device", "cpu"));
  GenerateOptions options;
  options.max_new_tokens = parse_count(args, "max-new-tokens", 1);
  options.use_cache = !args.has("no-cache");
  if (args.has("prefill-chunk")) {
    if (!options.use_cache) throw UsageError{"--prefill-chunk needs the cache (drop --no-cache)"};
    options.prefill_chunk = parse_count(args, "prefill-chunk", 1);
  }
  options.kv_key = parse_kv_key_convention(args.get("kv-key", "layer-type"));

  OutputFile out_file(args.get("out"));
  const std::string& out_path = out_file.path;
  h5::File& file = out_file.h5;

  const Model model = load_model(args.get("model"), dtype, device);
  const ForwardInputs inputs = load_inputs(args.get("inputs"));
  if (inputs.labels.defined()) throw Error(args.get("inputs") + ": labels have no meaning for generate; remove them");
  torch::Tensor mask = inputs.attention_mask;
  if (!mask.defined()) {  // as transformers' generate: inferred from pad tokens in the prompt
    const auto [pad, eos] = generation_special_tokens(args.get("model"), model);
    mask = inferred_generation_mask(inputs.input_ids, pad, eos);
    if ((mask == 0).any().item<bool>()) {
      std::cout << "no attention_mask in " << args.get("inputs") << ": inferred from pad token " << pad
                << " in the prompt, as transformers' generate does\n";
    }
  }
  const GenerateOutputs out = generate(model, inputs.input_ids, mask, options);

  file.set_attr("/", "generator", std::string("reference ") + GEMMA4_GIT_SHA);
  file.set_attr("/", "torch", std::string(TORCH_VERSION));
  file.set_attr("/", "dtype", args.get("dtype", "f32"));
  file.set_attr("/", "device", args.get("device", "cpu"));
  file.set_attr("/", "kv_key", args.get("kv-key", "layer-type"));
  file.set_attr("/", "use_cache", static_cast<int64_t>(options.use_cache));
  file.write("sequences", out.sequences);
  file.write("scores", out.scores);
  out_file.keep = true;
  std::cout << "wrote " << out_path << ": sequences " << out.sequences.sizes() << ", scores " << out.scores.sizes()
            << (options.use_cache ? " (KV cache)" : " (no cache)") << "\n";
  return 0;
}

}  // namespace gemma4::cli
