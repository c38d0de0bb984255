#pragma once
// Measurements above the layers (measure_model.cpp): the edges alone, the whole model directly.
#include <torch/types.h>

#include "bench/memory/stack.h"
#include "impl/backend.h"
#include "reference/config.h"
#include "reference/layer_ops.h"

namespace gemma4::memory {

// The edges: token embeddings and per-layer inputs, the RoPE tables of every layer type (decode:
// made once per run, so part of the baseline), then the final norm and the LM head with its
// soft-cap over the last layer's output (a leaf standing for it): in training over every token,
// with the loss, backward from the loss and from upstream gradients of the embeddings and
// per-layer inputs; in serving over each sequence's last token only.
PartFigures measure_edges(const Config& config, Phase phase, const StepShape& shape, const LayerOps& ops,
                          const torch::TensorOptions& options);

// The whole model (every weight made on the device): a training step through Model::forward and
// the loss's backward (with every layer checkpointed in kTrainCheckpointed), or one decode step
// through Model::decode against caches holding `context` entries. Not for prefill: Model runs its
// head over every position, a serving engine over the last.
PartFigures measure_whole(const Config& config, Phase phase, const StepShape& shape, const impl::Backend& backend,
                          const torch::TensorOptions& options);

}  // namespace gemma4::memory
