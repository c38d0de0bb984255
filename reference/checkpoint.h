#pragma once
// Activation checkpointing: run a function without keeping its activations, and re-run it in
// backward. GEMMA4.md, "Known failure modes": what crosses the checkpoint boundary is a tensor or
// plain data. The function receives everything that varies per step (hidden state, the shared K/V
// it reads, masks, RoPE tables) as `inputs`; it may close over the layer's parameters and
// immutable config, never over a container that outlives the step.
#include <torch/types.h>

#include <functional>
#include <vector>

namespace gemma4 {

using CheckpointedFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& inputs)>;

// Returns fn(inputs), computed without recording a graph. Gradients of the outputs reach `inputs`
// and `params` (the tensors fn closes over that need gradient) through one autograd node, whose
// backward re-runs fn with grad enabled on whichever thread the autograd engine uses.
// Undefined tensors are allowed in inputs and outputs.
std::vector<torch::Tensor> checkpoint(const CheckpointedFn& fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params);

}  // namespace gemma4
