#!/usr/bin/env python3
"""Candidate adapter: Google DeepMind's JAX Gemma-4 (the `gemma` package, gemma.gm.nn.gemma4) on a case.

What it judges: gemma 4.0.1's text decoder, `gemma.gm.nn.gemma4._transformer.Transformer`, the
module behind gm.nn.Gemma4_E2B / E4B / 31B / 26B_A4B (embedding scale, per-layer embeddings, KV
sharing, K=V global layers, proportional RoPE, sliding window, padding, final logit softcap), in
flax linen on JAX, forward and backward. Its MoE is ported below but not judged yet: the one MoE
case has an untied head, which the package cannot load. How:

- The package has no Hugging Face loader (its checkpoints are Orbax trees from Kaggle), so this
  adapter builds its `TransformerConfig` from the case's config.json (`gemma_config`) and moves
  each checkpoint tensor to its parameter (`PORTS`: a reshape or transpose each, nothing computed).
  A config the package cannot express is "not supported" with the field named: an untied lm_head
  (the package decodes with the input embedding), bidirectional attention over text, KV-sharing
  sources other than the package's rule, a norm epsilon other than its fixed 1e-6.
- Forward: `Transformer.apply(params, tokens, positions=arange, attention_mask=causal & the case's
  padding)`, the mask passed explicitly because the package otherwise treats token id 0 as padding.
  Hidden states are captured from the blocks (flax `capture_intermediates`); the last one is the
  model's own `return_hidden_states` output, after the final norm.
- Loss: transformers' (cross entropy of logits[t] against labels[t+1], mean over labels != -100) in
  float32; `jax.grad` of it over the parameters, each gradient moved back to its checkpoint name by
  the inverse of its port.
- Parameters are in the golden's dtype (the Transformer's `dtype`), so activations are too.

Its environment (impl/third_party/pinned_envs.sh jax-gemma, Python >= 3.12): gemma 4.0.1 and
kauldron 1.4.4 without their training and data dependencies. kauldron's typing module imports
TensorFlow for one isinstance alias (kauldron/typing/array_types.py: `tf.Tensor`); the environment
puts a one-class module named tensorflow in its place (impl/third_party/stubs/tensorflow).

    PYTHONPATH=impl/third_party:impl/third_party/stubs .cache/pinned/jax-gemma/bin/python \\
        impl/third_party/jax_gemma_candidate.py golden/transformers/e2b_like --dtype bf16 --out c.h5
"""
from __future__ import annotations

import numpy as np

from candidate_io import (NotSupported, arguments, golden_name, mean_token_loss, read_case, released_text_config, run,
                          write_candidate)

DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
PACKAGE_EPS = 1e-6  # gemma.gm.nn.gemma4._layers.RMSNorm's fixed epsilon


def kv_sources(text: dict) -> list[int]:
    """transformers' rule: a KV-shared layer reads the last unshared layer of its own type."""
    types, n = text["layer_types"], text["num_hidden_layers"]
    first_shared = n - int(text.get("num_kv_shared_layers") or 0)
    return [i if i < first_shared else max(j for j in range(first_shared) if types[j] == types[i]) for i in range(n)]


def gemma_config(text: dict):
    """The package's TransformerConfig for a transformers text config (released convention), or
    NotSupported naming the field it cannot express."""
    from gemma.gm.nn.gemma4 import _config, _modules

    if text.get("use_bidirectional_attention") not in (None, "vision"):
        raise NotSupported(f"use_bidirectional_attention={text['use_bidirectional_attention']!r}: the package "
                           "has causal text attention, bidirectional only for image tokens ('vision')")
    if not np.isclose(text.get("rms_norm_eps", PACKAGE_EPS), PACKAGE_EPS):
        raise NotSupported(f"rms_norm_eps={text['rms_norm_eps']}: the package's RMSNorm fixes 1e-6")
    if text.get("hidden_activation") not in ("gelu_pytorch_tanh", None):
        raise NotSupported(f"hidden_activation={text['hidden_activation']!r}: the package uses tanh-GELU")
    per_layer = int(text.get("hidden_size_per_layer_input") or 0)
    if per_layer and text.get("vocab_size_per_layer_input", text["vocab_size"]) != text["vocab_size"]:
        raise NotSupported("vocab_size_per_layer_input != vocab_size: the package indexes both tables by one vocabulary")
    rope = text["rope_parameters"]
    for kind, params in rope.items():
        if params.get("rope_type", "default") not in ("default", "proportional") or params.get("factor", 1.0) != 1.0:
            raise NotSupported(f"rope_parameters[{kind!r}]={params}: the package has default/proportional RoPE only")
    types = [_modules.AttentionType.GLOBAL if t == "full_attention" else _modules.AttentionType.LOCAL_SLIDING
             for t in text["layer_types"]]
    n, shared = text["num_hidden_layers"], int(text.get("num_kv_shared_layers") or 0)
    sharing = _config.KVCacheSharingConfig(frac_shared_layers=shared / n, share_global=True, share_local=True) \
        if shared else None
    package_sources = _config.create_kv_cache_sharing_patterns(sharing, n, types)
    if package_sources != kv_sources(text):
        raise NotSupported(f"KV sharing: transformers reads layers {kv_sources(text)}, the package's rule "
                           f"(the last unshared global / the one before it) {package_sources}")
    moe = bool(text.get("enable_moe_block"))
    return _config.TransformerConfig(
        num_embed=text["vocab_size"], embed_dim=text["hidden_size"], hidden_dim=text["intermediate_size"],
        num_heads=text["num_attention_heads"], head_dim=text["head_dim"], num_kv_heads=text["num_key_value_heads"],
        final_logit_softcap=text.get("final_logit_softcapping"), use_post_attn_norm=True, use_post_ffw_norm=True,
        attention_types=tuple(types), sliding_window_size=text["sliding_window"],
        global_key_size=text["global_head_dim"], num_global_kv_heads=text.get("num_global_key_value_heads"),
        k_eq_v_global=bool(text.get("attention_k_eq_v")),
        global_rope_proportion=rope["full_attention"].get("partial_rotary_factor", 1.0),
        local_rope_proportion=rope["sliding_attention"].get("partial_rotary_factor", 1.0),
        global_base_frequency=rope["full_attention"]["rope_theta"],
        local_base_frequency=rope["sliding_attention"]["rope_theta"],
        per_layer_input_dim=per_layer, kv_cache_sharing_config=sharing,
        override_kv_shared_ffw_hidden=2 * text["intermediate_size"] if text.get("use_double_wide_mlp") else None,
        enable_moe=moe, num_experts=int(text.get("num_experts") or 0),
        expert_dim=int(text.get("moe_intermediate_size") or 0), top_k_experts=int(text.get("top_k_experts") or 0),
        moe_dense_hidden_dim=text["intermediate_size"] if moe else 0)


# A port: the parameter's path, and how a checkpoint tensor becomes it (to) and back (back); each a
# reshape or transpose, so `back` maps a gradient exactly.
def _same():
    return (lambda w, _: w), (lambda g, _: g)


def _transposed(axes):
    inverse = tuple(np.argsort(axes))
    return (lambda w, _: np.transpose(w, axes)), (lambda g, _: np.transpose(g, inverse))


def _heads_in(w, heads):  # [heads * H, D] -> [heads, D, H] (q_einsum, k_einsum)
    return np.transpose(w.reshape(heads, -1, w.shape[-1]), (0, 2, 1))


def _heads_in_back(g, _):  # [heads, D, H] -> [heads * H, D]
    return np.transpose(g, (0, 2, 1)).reshape(-1, g.shape[1])


def _heads_out(w, heads):  # [D, heads * H] -> [heads, H, D] (attn_vec_einsum)
    return np.transpose(w.reshape(w.shape[0], heads, -1), (1, 2, 0))


def ports(text: dict) -> dict[str, tuple]:
    """Golden name -> (parameter path, to, back, heads); `heads` is what the reshape needs."""
    n, heads = text["num_hidden_layers"], text["num_attention_heads"]
    per_layer = int(text.get("hidden_size_per_layer_input") or 0)
    out = {"embed_tokens.weight": (("embedder", "input_embedding"), *_same(), None),
           "norm.weight": (("final_norm", "scale"), *_same(), None)}
    if per_layer:
        out["embed_tokens_per_layer.weight"] = (
            ("embedder", "per_layer_embeddings"), lambda w, _: w.reshape(w.shape[0], n, per_layer),
            lambda g, _: g.reshape(g.shape[0], -1), None)
        out["per_layer_model_projection.weight"] = (  # [n*P, D] -> [D, n, P]
            ("embedder", "per_layer_model_projection", "w"), lambda w, _: w.T.reshape(w.shape[1], n, per_layer),
            lambda g, _: g.reshape(g.shape[0], -1).T, None)
        out["per_layer_projection_norm.weight"] = (("embedder", "per_layer_projection_norm", "scale"), *_same(), None)
    moe = bool(text.get("enable_moe_block"))
    norms = {"input_layernorm": "pre_attention_norm", "post_attention_layernorm": "post_attention_norm",
             "post_per_layer_input_norm": "post_per_layer_input_norm"}
    # transformers' MoE layer: the dense MLP between pre_feedforward_layernorm and
    # post_feedforward_layernorm_1, the experts between the _2 norms; the package's: mlp2 between
    # pre_ffw2_norm and post_ffw2_norm, the experts (mlp) between pre_ffw_norm and post_ffw1_norm.
    norms.update({"pre_feedforward_layernorm": "pre_ffw2_norm", "post_feedforward_layernorm_1": "post_ffw2_norm",
                  "pre_feedforward_layernorm_2": "pre_ffw_norm", "post_feedforward_layernorm_2": "post_ffw1_norm",
                  "post_feedforward_layernorm": "post_ffw_norm"} if moe else
                 {"pre_feedforward_layernorm": "pre_ffw_norm", "post_feedforward_layernorm": "post_ffw_norm"})
    dense = "mlp2" if moe else "mlp"
    for i in range(n):
        layer, hf = f"layer_{i}", f"layers.{i}."
        global_layer = text["layer_types"][i] == "full_attention"
        kv_heads = (text.get("num_global_key_value_heads") or text["num_key_value_heads"]) if global_layer \
            else text["num_key_value_heads"]
        for name, param in norms.items():
            out[hf + name + ".weight"] = ((layer, param, "scale"), *_same(), None)
        out[hf + "layer_scalar"] = ((layer, "skip_scale"), *_same(), None)
        out[hf + "self_attn.q_norm.weight"] = ((layer, "attn", "query_norm", "scale"), *_same(), None)
        out[hf + "self_attn.k_norm.weight"] = ((layer, "attn", "key_norm", "scale"), *_same(), None)
        out[hf + "self_attn.q_proj.weight"] = ((layer, "attn", "q_einsum", "w"), _heads_in, _heads_in_back, heads)
        out[hf + "self_attn.o_proj.weight"] = (
            (layer, "attn", "attn_vec_einsum", "w"), _heads_out,
            lambda g, h: np.transpose(g, (2, 0, 1)).reshape(g.shape[2], -1), heads)
        if global_layer and text.get("attention_k_eq_v"):
            out[hf + "self_attn.k_proj.weight"] = ((layer, "attn", "k_einsum", "w"), _heads_in, _heads_in_back, kv_heads)
        else:  # kv_einsum [2, K, D, H]: index 0 the keys, 1 the values
            for index, proj in enumerate(("k_proj", "v_proj")):
                out[hf + f"self_attn.{proj}.weight"] = (
                    (layer, "attn", "kv_einsum", "w", index), _heads_in, _heads_in_back, kv_heads)
        for index, proj in enumerate(("gate_proj", "up_proj")):  # gating_einsum [2, F, D]: gate, then up
            out[hf + f"mlp.{proj}.weight"] = ((layer, dense, "gating_einsum", index), *_same(), None)
        out[hf + "mlp.down_proj.weight"] = ((layer, dense, "linear"), *_transposed((1, 0)), None)
        if moe:
            experts = text["num_experts"]
            out[hf + "router.proj.weight"] = ((layer, "mlp", "router_logits", "w"), *_transposed((1, 0)), None)
            out[hf + "router.scale"] = ((layer, "mlp", "router_scale"), *_same(), None)
            out[hf + "router.per_expert_scale"] = ((layer, "mlp", "per_expert_scale"), *_same(), None)
            out[hf + "experts.gate_up_proj"] = (  # [E, 2F, D] -> [E, 2, F, D]: gate rows first
                (layer, "mlp", "gating_einsum", "w"), lambda w, _: w.reshape(experts, 2, -1, w.shape[-1]),
                lambda g, _: g.reshape(experts, -1, g.shape[-1]), None)
            out[hf + "experts.down_proj"] = ((layer, "mlp", "linear", "w"), *_transposed((0, 2, 1)), None)
        if per_layer:
            out[hf + "per_layer_input_gate.weight"] = ((layer, "per_layer_input_gate", "w"), *_transposed((1, 0)), None)
            out[hf + "per_layer_projection.weight"] = ((layer, "per_layer_projection", "w"), *_transposed((1, 0)), None)
    return out


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def load_params(initial: dict, checkpoint: dict[str, np.ndarray], text: dict, dtype) -> dict:
    """The package's parameter tree filled from the checkpoint. Every parameter the model uses must
    be ported (a leftover is an error, never a random weight); only a KV-shared layer's own key and
    value projections may stay zero: the package computes them and then reads its source's K/V."""
    import jax

    by_name = {golden_name(k): v for k, v in checkpoint.items()}
    if "lm_head.weight" in by_name and not np.array_equal(by_name["lm_head.weight"], by_name["embed_tokens.weight"]):
        raise NotSupported("an untied lm_head: the package decodes with the input embedding (Embedder.decode)")
    params = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, np.float32), initial["params"])
    filled = set()
    for name, (path, to, _, heads) in ports(text).items():
        if name not in by_name:
            continue
        value = to(by_name[name], heads)
        holder, key = _get(params, path[:-1]), path[-1]  # key: a dict key, or a slice of a stacked array
        if value.shape != holder[key].shape:
            raise ValueError(f"{name}: shape {value.shape} does not fit {'/'.join(map(str, path))} {holder[key].shape}")
        holder[key] = value
        filled.add(tuple(p for p in path if not isinstance(p, int)))
    sources = kv_sources(text)
    for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
        keys = tuple(k.key for k in path)
        layer = int(keys[0].removeprefix("layer_")) if keys[0].startswith("layer_") else -1
        unused = layer >= 0 and sources[layer] != layer and keys[1] == "attn" and keys[2] in ("kv_einsum", "k_einsum",
                                                                                              "key_norm")
        if keys not in filled and not unused:
            raise ValueError(f"parameter {'/'.join(keys)}: no checkpoint tensor ported to it")
    return {"params": jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a, dtype), params)}


def gradients(grads: dict, text: dict, judged: set[str]) -> dict[str, np.ndarray]:
    """The parameter gradients as the golden's names: each port's inverse (sliced parameters
    give one tensor each)."""
    out = {}
    for name, (path, _, back, heads) in ports(text).items():
        if name in judged:
            out[f"grads/{name}"] = back(np.asarray(_get(grads["params"], path), np.float32), heads)
    missing = judged - {k.removeprefix("grads/") for k in out}
    if missing:
        raise ValueError(f"no gradient for {sorted(missing)[:5]}")
    return out


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cuda" if args.device == "cuda" else "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the GPU is shared with the judge
    case = read_case(args.case_dir)
    text = released_text_config(case.config)
    import gemma
    import jax
    import jax.numpy as jnp
    from gemma.gm.nn.gemma4 import _transformer

    if args.dtype == "f32":  # f32 matmuls in f32 (JAX's default on a GPU rounds their inputs to TF32)
        jax.config.update("jax_default_matmul_precision", "highest")
    dtype = jnp.dtype(DTYPES[args.dtype])
    model = _transformer.Transformer(config=gemma_config(text), dtype=dtype, tokens="batch.tokens")
    ids = jnp.asarray(case.inputs["input_ids"], jnp.int32)
    batch, length = ids.shape
    initial = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), ids[:, :1]))
    params = load_params(jax.tree_util.tree_map(lambda a: np.zeros(a.shape, np.float32), initial),
                         case.weights(), text, dtype)
    positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    keep = jnp.asarray(case.padding(), bool)
    mask = jnp.tril(jnp.ones((length, length), bool))[None] & keep[:, None, :]  # causal, padding keys masked
    labels = jnp.asarray(case.inputs["labels"], jnp.int32)

    def forward(p, capture=False):
        return model.apply(p, ids, positions=positions, attention_mask=mask, return_hidden_states=True,
                           capture_intermediates=(lambda m, method: method in ("__call__", "encode")) if capture
                           else False, mutable=["intermediates"] if capture else False)

    def loss_of(p):  # transformers' ForCausalLMLoss: float32 logits, shifted, mean over kept labels;
        output, state = forward(p, capture=True)  # the outputs and intermediates ride along (aux)
        logits = output.logits[:, :-1].astype(jnp.float32)
        targets = labels[:, 1:]
        kept = targets != -100
        picked = jnp.take_along_axis(logits, jnp.where(kept, targets, 0)[..., None], -1)[..., 0]
        nll = jax.nn.logsumexp(logits, -1) - picked
        return jnp.sum(nll * kept) / jnp.maximum(jnp.sum(kept), 1), (output, state)

    if args.forward_only:
        output, state = forward(params, capture=True)
    else:
        (loss, (output, state)), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
    inter = state["intermediates"]
    layers = text["num_hidden_layers"]
    tree = {"outputs/logits": np.asarray(output.logits, np.float32),
            "outputs/hidden_states/0": np.asarray(inter["embedder"]["encode"][0], np.float32),
            f"outputs/hidden_states/{layers}": np.asarray(output.hidden_states, np.float32)}
    for i in range(1, layers):  # a block returns (cache, outputs)
        tree[f"outputs/hidden_states/{i}"] = np.asarray(inter[f"layer_{i - 1}"]["__call__"][0][1], np.float32)
    if args.forward_only:
        loss = mean_token_loss(tree["outputs/logits"], case.inputs["labels"])
    else:
        tree.update(gradients(grads, text, case.judged_gradients(args.dtype)))
    tree["outputs/loss"] = np.asarray(loss, np.float32)
    write_candidate(args.out, tree, f"gemma {gemma.__version__} (gemma.gm.nn.gemma4, jax {jax.__version__}, "
                                    f"{jax.default_backend()})", args.dtype)
    print(f"wrote {args.out}: {len(tree)} datasets ({args.dtype}, loss {float(loss):.6f}, {jax.default_backend()})")
    return 0


if __name__ == "__main__":
    run(main)
