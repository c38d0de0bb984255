// gemma4-conform forward: the contract other tools rely on (issue "Foundation"). Reads a Hugging
// Face checkpoint and an inputs file, runs the reference, and writes logits, hidden states and,
// with labels, the loss and the gradient of every trainable tensor, to HDF5.
#include <torch/version.h>

#include <cstdio>
#include <iostream>

#include "git_sha.h"  // generated at build time

#include "golden/h5_tensors.h"
#include "reference/error.h"
#include "reference/hf_checkpoint.h"
#include "reference/inputs.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"
#include "tools/cli/output_file.h"

namespace gemma4::cli {
namespace {

const std::vector<Option> kForwardOptions = {
    {"model", "DIR", "Hugging Face checkpoint directory (config.json + safetensors)", true},
    {"inputs", "FILE", "safetensors with int64 input_ids [B,S], optional labels, attention_mask", true},
    {"out", "FILE.h5", "output HDF5 file", true},
    {"dtype", "f32|bf16|f16", "compute dtype (default f32)"},
    {"device", "cpu|cuda", "device (default cpu)"},
    {"kv-key", "layer-index|layer-type", "shared-KV key convention (default layer-type, transformers >= 5.8)"},
    {"checkpoint", "", "activation checkpointing on every layer"},
};

void write_outputs(h5::File& file, const Model& model, const ForwardOutputs& out, const Args& args) {
  file.set_attr("/", "generator", std::string("reference ") + GEMMA4_GIT_SHA);
  file.set_attr("/", "torch", std::string(TORCH_VERSION));
  file.set_attr("/", "dtype", args.get("dtype", "f32"));
  file.set_attr("/", "device", args.get("device", "cpu"));
  file.set_attr("/", "kv_key", args.get("kv-key", "layer-type"));
  file.set_attr("/", "checkpoint", static_cast<int64_t>(args.has("checkpoint")));
  file.set_attr("/", "config", model.config().text_config_json.dump());
  file.write("logits", out.logits.to(torch::kFloat32));
  for (size_t i = 0; i < out.hidden_states.size(); ++i) {
    file.write("hidden_states/" + std::to_string(i), out.hidden_states[i].to(torch::kFloat32));
  }
  if (!out.loss.defined()) return;
  file.write("loss", out.loss.detach().to(torch::kFloat32));
  for (const auto& [key, tensor] : model.named_trainable_tensors()) {
    // No gradient reached this tensor: its gradient is zero (the conformance suite checks which
    // tensors must receive one).
    const torch::Tensor grad = tensor.grad().defined() ? tensor.grad() : torch::zeros_like(tensor);
    file.write("grads/" + key, grad.to(torch::kFloat32));
  }
}

}  // namespace

int forward_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("forward", "Run the reference Gemma-4 decoder on a checkpoint.", kForwardOptions, argv)) return 0;
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  const torch::ScalarType dtype = parse_dtype(args.get("dtype", "f32"));
  const torch::Device device = parse_device(args.get("device", "cpu"));
  ForwardOptions options;
  options.kv_key = parse_kv_key_convention(args.get("kv-key", "layer-type"));

  OutputFile out_file(args.get("out"));
  const std::string& out_path = out_file.path;
  h5::File& file = out_file.h5;

  Model model = load_model(args.get("model"), dtype, device);
  const ForwardInputs inputs = load_inputs(args.get("inputs"));
  if (args.has("checkpoint")) options.checkpoint_layers.assign(model.config().num_hidden_layers, true);

  const bool training = inputs.labels.defined();
  model.set_requires_grad(training);
  torch::AutoGradMode grad_mode(training);
  const ForwardOutputs out = model.forward(inputs, options);
  if (training) out.loss.backward();
  write_outputs(file, model, out, args);
  out_file.keep = true;
  std::cout << "wrote " << out_path << ": logits " << out.logits.sizes();
  if (training) std::cout << ", loss " << out.loss.item<double>();
  std::cout << "\n";
  return 0;
}

}  // namespace gemma4::cli
