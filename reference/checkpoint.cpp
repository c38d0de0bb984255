#include "reference/checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace gemma4 {
namespace {

using torch::autograd::variable_list;

// The backward node. It owns detached copies of the inputs (sharing storage, no graph), so it
// holds no reference to the forward graph or to anything outside this step.
struct CheckpointBackward : torch::autograd::Node {
  CheckpointedFn fn;
  std::vector<torch::Tensor> saved_inputs;  // detached
  std::vector<bool> input_needs_grad;
  std::vector<torch::Tensor> params;
  std::vector<bool> output_defined;

  std::string name() const override { return "gemma4::CheckpointBackward"; }

  variable_list apply(variable_list&& grad_outputs) override {
    TORCH_CHECK(!saved_inputs.empty() || !params.empty(),
                "checkpointed function re-run after its saved inputs were released (backward twice?)");
    // Recompute with a fresh graph rooted at detached leaves.
    std::vector<torch::Tensor> inputs;
    for (size_t i = 0; i < saved_inputs.size(); ++i) {
      const torch::Tensor& x = saved_inputs[i];
      inputs.push_back(x.defined() ? x.detach().requires_grad_(input_needs_grad[i]) : x);
    }
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode enable_grad(true);
      outputs = fn(inputs);
    }
    // Differentiate the outputs that carry gradient w.r.t. everything that needs it.
    variable_list roots, root_grads, wrt;
    std::vector<size_t> wrt_slot;  // position of each `wrt` entry in this node's input list
    size_t out_index = 0;
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (!output_defined[o]) continue;
      const torch::Tensor& g = grad_outputs[out_index++];
      if (g.defined() && outputs[o].requires_grad()) {
        roots.push_back(outputs[o]);
        root_grads.push_back(g);
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined() && input_needs_grad[i]) {
        wrt.push_back(inputs[i]);
        wrt_slot.push_back(i);
      }
    }
    for (size_t p = 0; p < params.size(); ++p) {
      wrt.push_back(params[p]);
      wrt_slot.push_back(inputs.size() + p);
    }
    variable_list grads(inputs.size() + params.size());
    if (!roots.empty() && !wrt.empty()) {
      const variable_list computed = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false,
                                                           /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < computed.size(); ++k) grads[wrt_slot[k]] = computed[k];
    }
    return grads;
  }

  void release_variables() override {
    saved_inputs.clear();
    params.clear();
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(const CheckpointedFn& fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params) {
  bool any_needs_grad = torch::autograd::GradMode::is_enabled() && !params.empty();
  for (const torch::Tensor& x : inputs) any_needs_grad |= x.defined() && x.requires_grad();
  if (!torch::autograd::GradMode::is_enabled() || !any_needs_grad) return fn(inputs);

  auto node = std::shared_ptr<CheckpointBackward>(new CheckpointBackward(), torch::autograd::deleteNode);
  node->fn = fn;
  for (const torch::Tensor& x : inputs) {
    node->saved_inputs.push_back(x.defined() ? x.detach() : x);
    node->input_needs_grad.push_back(x.defined() && x.requires_grad());
  }
  node->params = params;
  variable_list edges_from(inputs.begin(), inputs.end());
  edges_from.insert(edges_from.end(), params.begin(), params.end());
  node->set_next_edges(torch::autograd::collect_next_edges(edges_from));

  std::vector<torch::Tensor> outputs;
  {
    torch::NoGradGuard no_grad;
    outputs = fn(node->saved_inputs);
  }
  for (torch::Tensor& out : outputs) {
    node->output_defined.push_back(out.defined());
    if (!out.defined()) continue;
    // A plain (non-view) tensor, so autograd accepts a new grad_fn on it.
    out = out.detach();
    torch::autograd::create_gradient_edge(out, node);
  }
  return outputs;
}

}  // namespace gemma4
