#!/usr/bin/env python3
"""Candidate adapter: EasyDeL 0.3.0's Gemma-4 (Flax NNX on JAX) on a case, forward and backward.

What it judges: EasyDeL's `Gemma4ForCausalLM` (a text checkpoint) or `Gemma4ForConditionalGeneration`
(a `gemma4` checkpoint, its text path), loaded the way EasyDeL's users load a Hugging Face checkpoint:
`AutoEasyDeLModelForCausalLM` / `AutoEasyDeLModelForImageTextToText.from_pretrained(dir,
from_torch=True, dtype=param_dtype=<the golden's dtype>)` on the CPU (EasyDeL's converter reads the
checkpoint through transformers 5.5.4, its pin). Two choices, both a user's explicit settings:

- `torch_dtype=float32`: EasyDeL's torch loader otherwise loads the checkpoint in float16 before
  converting it (easydel/infra/mixins/bridge.py:2253, `kwargs["torch_dtype"] = torch.float16` unless
  given), whatever param_dtype says; that rounding is a loader default, not the model, so every
  run here starts from the exact float32 weights and EasyDeL casts them to param_dtype itself.
- `--attn-dtype default` (the default) keeps EasyDeL's `attn_dtype`, bfloat16 whatever dtype says
  (easydel/infra/base_config.py:830): a float32 model attends in bfloat16, which is what its users
  get (tools/scoreboard/repro/easydel_attn_dtype_bf16.py). `--attn-dtype match` sets attn_dtype to
  the run's dtype (config_kwargs), the fix a user applies, and judges the rest of the model.
  Both pin attn_mechanism "vanilla" (EasyDeL's default; "auto" would overwrite attn_dtype).

Forward: `model(input_ids, attention_mask=the case's padding, position_ids=arange,
output_hidden_states=True)`; EasyDeL's hidden states follow transformers' convention (the embedding,
each layer's output, the last one after the final norm). Loss: transformers' (logits[t] against
labels[t+1], mean over labels != -100) in float32; `jax.grad` of it over the model's nnx.Param
state, each gradient moved back to its checkpoint name by the inverse of EasyDeL's conversion (a
transpose, or for MoE experts a concatenation: `inverse`). A checkpoint EasyDeL has no model class
for is "not supported" with EasyDeL's words; any other load error is a failure, as raised.

    OMP_NUM_THREADS=1 PYTHONPATH=impl/third_party:.cache/pinned/easydel .venv/bin/python \\
        impl/third_party/easydel_candidate.py golden/transformers/dense_keqv --config as-released --out c.h5
"""
from __future__ import annotations

import json
import os

import numpy as np

from candidate_io import NotSupported, arguments, checkpoint_dir, golden_name, mean_token_loss, read_case, run, \
    write_candidate

DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def extra_arguments(parser) -> None:
    parser.add_argument("--attn-dtype", choices=("default", "match"), default="default",
                        help="EasyDeL's attn_dtype: its default (bfloat16), or the run's dtype")


def load(directory, dtype_name: str, attn: str):
    """EasyDeL's model of the checkpoint in `directory`, its parameters in `dtype_name`."""
    import easydel as ed
    import jax.numpy as jnp
    import torch

    config = json.loads((directory / "config.json").read_text())
    multimodal = config.get("model_type") == "gemma4"  # Gemma4ForConditionalGeneration's checkpoint
    auto = ed.AutoEasyDeLModelForImageTextToText if multimodal else ed.AutoEasyDeLModelForCausalLM
    dtype = jnp.dtype(DTYPES[dtype_name])
    config_kwargs = {"attn_mechanism": "vanilla"}
    if attn == "match":
        config_kwargs["attn_dtype"] = dtype
    try:
        return auto.from_pretrained(str(directory), from_torch=True, dtype=dtype, param_dtype=dtype,
                                    torch_dtype=torch.float32, backend=ed.EasyDeLBackends.CPU,
                                    platform=ed.EasyDeLPlatforms.JAX, verbose=False, config_kwargs=config_kwargs)
    except (ValueError, KeyError) as error:
        # EasyDeL's registry raises these when no model class is registered for the architecture.
        if "not defined" in str(error) or "not registered" in str(error) or "not found" in str(error).lower():
            raise NotSupported(f"{auto.__name__}: {error}") from error
        raise


def parameter_name(path: tuple[str, ...]) -> tuple[str, str]:
    """EasyDeL's parameter path -> (checkpoint-style name, how its value maps back: 'same', 'T' (a
    2-D value transposed) or 'experts.down'/'experts.gate'/'experts.up'). EasyDeL stores a Linear as
    `kernel` [in, out] (the checkpoint's weight transposed), an embedding as `embedding`, an RMSNorm's
    scale as a 1-D `kernel`."""
    *head, leaf = path
    name = ".".join(head)
    if leaf == "embedding":
        return name + ".weight", "same"
    if name.endswith(("experts.gate_proj", "experts.up_proj", "experts.down_proj")):
        return name, "experts." + name.rsplit(".", 1)[1].removesuffix("_proj")
    if leaf == "kernel":  # a Linear's [in, out] goes back transposed; an RMSNorm's 1-D scale as it is
        return name + ".weight", "T"
    return ".".join(path), "same"  # layer_scalar, router.scale, router.per_expert_scale


def gradients(grads: dict, judged: set[str]) -> dict[str, np.ndarray]:
    """The gradients under the golden's names (`judged`: transformers' trainable parameters)."""
    import jax

    out, experts = {}, {}
    for path, value in jax.tree_util.tree_flatten_with_path(grads)[0]:
        keys = tuple(str(getattr(p, "key", p)) for p in path)
        name, how = parameter_name(keys)
        value = np.asarray(value, np.float32)
        if how == "T" and value.ndim == 2:
            value = value.T
        if how.startswith("experts."):
            # EasyDeL splits the checkpoint's experts.gate_up_proj [E, 2F, D] into gate_proj and
            # up_proj kernels [E, D, F] and stores experts.down_proj [E, D, F] as [E, F, D]
            # (Gemma4TextMLPStack.reform_param); the inverse puts them back.
            base = name.rsplit(".", 1)[0]
            experts.setdefault(base, {})[how] = np.swapaxes(value, -1, -2)
            continue
        out[golden_name(name)] = value
    for base, parts in experts.items():
        out[golden_name(base + ".gate_up_proj")] = np.concatenate((parts["experts.gate"], parts["experts.up"]), axis=1)
        out[golden_name(base + ".down_proj")] = parts["experts.down"]
    missing = judged - set(out)
    if missing:
        raise ValueError(f"no gradient for {sorted(missing)[:5]} (EasyDeL's names: {sorted(out)[:5]} ...)")
    return {f"grads/{k}": v for k, v in out.items() if k in judged}


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0], extra_arguments)
    if args.device != "cpu":
        raise NotSupported("this adapter runs EasyDeL's CPU build only (jax 0.9.2 without CUDA plugins)")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    case = read_case(args.case_dir)
    import easydel as ed
    import jax
    import jax.numpy as jnp
    from flax import nnx

    if args.dtype == "f32":  # f32 matmuls in f32 (the CPU's default already; explicit for the record)
        jax.config.update("jax_default_matmul_precision", "highest")
    model = load(checkpoint_dir(case, args.config, args.work), args.dtype, args.attn_dtype)
    ids = jnp.asarray(case.inputs["input_ids"], jnp.int32)
    batch, length = ids.shape
    keep = jnp.asarray(case.padding(), bool)
    positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    labels = jnp.asarray(case.inputs["labels"], jnp.int32)
    graph, params, rest = nnx.split(model, nnx.Param, ...)

    def forward(p):
        out = nnx.merge(graph, p, rest)(input_ids=ids, attention_mask=keep, position_ids=positions,
                                        output_hidden_states=True)
        return out.logits, out.hidden_states

    def loss_of(p):  # transformers' ForCausalLMLoss: float32 logits, shifted, mean over kept labels
        logits, hidden = forward(p)
        shifted = logits[:, :-1].astype(jnp.float32)
        targets = labels[:, 1:]
        kept = targets != -100
        picked = jnp.take_along_axis(shifted, jnp.where(kept, targets, 0)[..., None], -1)[..., 0]
        nll = jax.nn.logsumexp(shifted, -1) - picked
        return jnp.sum(nll * kept) / jnp.maximum(jnp.sum(kept), 1), (logits, hidden)

    with model.mesh:  # EasyDeL's sharding annotations need its mesh in context, even on one CPU
        if args.forward_only:
            logits, hidden = forward(params)
        else:
            (loss, (logits, hidden)), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
    tree = {"outputs/logits": np.asarray(logits, np.float32)}
    for i, h in enumerate(hidden or ()):
        tree[f"outputs/hidden_states/{i}"] = np.asarray(h, np.float32)
    if args.forward_only:
        loss = mean_token_loss(tree["outputs/logits"], case.inputs["labels"])
    else:
        tree.update(gradients(nnx.to_pure_dict(grads), case.judged_gradients(args.dtype)))
    tree["outputs/loss"] = np.asarray(loss, np.float32)
    write_candidate(args.out, tree, f"EasyDeL {ed.__version__} (jax {jax.__version__}, {jax.default_backend()}, "
                                    f"attn_dtype {jnp.dtype(model.config.attn_dtype).name})", args.dtype)
    print(f"wrote {args.out}: {len(tree)} datasets ({args.dtype}, loss {float(loss):.6f}, attn_dtype "
          f"{jnp.dtype(model.config.attn_dtype).name})")
    return 0


if __name__ == "__main__":
    run(main)
