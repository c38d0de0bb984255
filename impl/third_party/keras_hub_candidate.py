#!/usr/bin/env python3
"""Candidate adapter: keras-hub's Gemma-4 (Gemma4Backbone, Keras 3 on the PyTorch backend) on a case.

What it judges: keras-hub 0.32.0's text decoder (embedding scale, per-layer embeddings, KV sharing,
K=V global layers, proportional RoPE, sliding window, MoE, final logit softcap, padding mask) as its
users get it from a Hugging Face checkpoint. How:

- Loading is keras-hub's own Hugging Face converter, `Gemma4Backbone.from_preset(CASE_DIR,
  dtype=...)` (keras_hub/src/utils/transformers/convert_gemma4.py), which needs no tokenizer files.
  The dtype policy float32 / bfloat16 / float16 makes variables and compute that dtype.
- The checkpoint is the case as saved, or its config in the released convention (--config,
  candidate_io.ConfigStyle): nothing else is corrected for keras-hub, so what its converter misreads
  (transformers' per_layer_config, a config without layer_types, `use_bidirectional_attention: "all"`,
  an untied lm_head) shows as a failure.
- Forward: the backbone's inputs as Gemma4CausalLMPreprocessor makes them (token_ids, padding_mask
  = the case's attention_mask or ones, position_ids = arange), logits = Gemma4CausalLM's head
  (`token_embedding(h, reverse=True)`, which applies final_logit_soft_cap).
- Loss: transformers' (cross entropy of logits[t] against labels[t+1], mean over labels != -100),
  computed in torch on the logits; `backward()` fills the keras variables, which are torch
  parameters. Each gradient goes back to its checkpoint key through the converter's own hook.

    KERAS_BACKEND=torch PYTHONPATH=.cache/pinned/keras-hub:impl/third_party \
        python impl/third_party/keras_hub_candidate.py golden/transformers/e2b_like --dtype bf16 --out c.h5
"""
from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported: gradients come from torch autograd

import numpy as np

from candidate_io import arguments, checkpoint_dir, golden_name, read_case, run, write_candidate

POLICIES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


class PortRecorder:
    """Records every (keras variable, checkpoint key, hook) the converter ports, to map gradients back."""

    def __init__(self):
        self.ports = []

    def __enter__(self):
        from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

        self.cls, self.original = SafetensorLoader, SafetensorLoader.port_weight
        recorder = self

        def port_weight(loader, keras_variable, hf_weight_key, hook_fn=None):
            shape = loader.get_tensor(hf_weight_key).shape
            recorder.ports.append((keras_variable, hf_weight_key, hook_fn, shape))
            return recorder.original(loader, keras_variable, hf_weight_key, hook_fn)

        SafetensorLoader.port_weight = port_weight
        return self

    def __exit__(self, *exc):
        self.cls.port_weight = self.original


def gather_index(hook, checkpoint_shape, keras_shape) -> np.ndarray:
    """For each element of the keras variable, the flat index of the checkpoint element it holds.

    Every Gemma-4 hook is a reshape / transpose / slice / squeeze, so running it on an array of
    indices tells where each value went; the gradient of a checkpoint tensor is then the keras
    gradient scattered (added) back to those indices (exact, and right for slices such as
    experts.gate_up_proj feeding two keras variables).
    """
    index = np.arange(int(np.prod(checkpoint_shape)), dtype=np.int64).reshape(checkpoint_shape)
    moved = hook(index, list(keras_shape)) if hook else index
    if tuple(moved.shape) != tuple(keras_shape):
        moved = moved.reshape(keras_shape)
    probe = np.random.default_rng(0).standard_normal(checkpoint_shape)
    if not np.array_equal(np.reshape(hook(probe, list(keras_shape)) if hook else probe, keras_shape),
                          probe.reshape(-1)[moved]):
        raise RuntimeError(f"converter hook {hook} is not a pure gather; cannot map its gradient")
    return moved


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    os.environ["KERAS_TORCH_DEVICE"] = args.device  # before keras is imported (else: CUDA whenever present)
    case = read_case(args.case_dir)
    import keras
    import keras_hub
    import torch

    if keras.config.backend() != "torch":
        raise RuntimeError(f"keras backend {keras.config.backend()}, expected torch")
    with PortRecorder() as recorder:
        backbone = keras_hub.models.Gemma4Backbone.from_preset(
            str(checkpoint_dir(case, args.config, args.work)), dtype=POLICIES[args.dtype])

    # Gemma4CausalLM's head (gemma4_causal_lm.py: token_embedding(hidden, reverse=True); its own
    # final_logit_cap stays None because token_embedding already applies final_logit_soft_cap),
    # plus the hidden states the golden names (hidden_states/0 = the scaled embedding that enters
    # layer 0, /i = layer i-1's output, the last one after the final norm).
    layers = backbone.num_layers
    probes = {"outputs/logits": backbone.token_embedding(backbone.output, reverse=True),
              "outputs/hidden_states/0": backbone.get_layer("decoder_block_0").input[0],
              f"outputs/hidden_states/{layers}": backbone.output}
    for i in range(1, layers):
        probes[f"outputs/hidden_states/{i}"] = backbone.get_layer(f"decoder_block_{i - 1}").output[0]
    model = keras.Model(backbone.input, probes)

    ids = case.inputs["input_ids"]
    batch, length = ids.shape
    feed = {  # what Gemma4CausalLMPreprocessor feeds the backbone for text
        "token_ids": torch.as_tensor(ids, dtype=torch.int32, device=args.device),
        "padding_mask": torch.as_tensor(case.padding(), dtype=torch.int32, device=args.device),
        "position_ids": torch.arange(length, dtype=torch.int32, device=args.device).expand(batch, length).contiguous(),
    }
    with torch.set_grad_enabled(not args.forward_only):
        out = model(feed, training=False)
        logits = out["outputs/logits"]
        # transformers' ForCausalLMLoss: float32 logits, shift by one, mean over kept labels.
        labels = torch.as_tensor(case.inputs["labels"], dtype=torch.long, device=logits.device)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        if not args.forward_only:
            loss.backward()

    tree = {name: value.detach().float().cpu().numpy() for name, value in out.items()}
    tree["outputs/loss"] = loss.detach().float().cpu().numpy()
    if not args.forward_only:
        grads: dict[str, np.ndarray] = {}
        for variable, key, hook, shape in recorder.ports:
            if not variable.trainable:
                continue  # layer_scalar: a buffer in transformers, no gradient in the golden
            param = variable.value
            g = param.grad.float().cpu().numpy() if param.grad is not None else np.zeros(param.shape, np.float32)
            flat = grads.setdefault(golden_name(key), np.zeros(int(np.prod(shape)), np.float64))
            np.add.at(flat, gather_index(hook, shape, variable.shape).reshape(-1), g.reshape(-1))
            grads[golden_name(key)] = flat
        shapes = {golden_name(k): s for _, k, _, s in recorder.ports}
        for name, flat in grads.items():
            tree[f"grads/{name}"] = flat.reshape(shapes[name])
    write_candidate(args.out, tree, f"keras-hub {keras_hub.__version__} (keras {keras.__version__}, torch "
                                    f"{torch.__version__}, Gemma4Backbone.from_preset)", args.dtype)
    print(f"wrote {args.out}: {len(tree)} datasets ({args.dtype}, loss {loss.item():.6f})")
    return 0


if __name__ == "__main__":
    run(main)
