"""Constructed weights: a Gemma-4 whose attention and residual stream behave like a trained model's,
recreated bit for bit from the counter generator (golden/FORMAT.md, "Constructed weights"; the C++
half is reference/constructed_weights.cpp, and the two must agree in every bit).

Random weights make a poor test subject at real size: unit q/k norm scales give score spreads of
about sqrt(head_dim), so every query attends to one key; bugs that need many comparable keys, an
attention sink or a distant token stay below bf16's resolution. Each weight here is the counter
generator's value for its name (golden_h5py_check.generated_weight) with a structure added, every
value computed in double from float32 inputs in the order written and rounded once to float32:

- hidden coordinates: the first quarter carries the token's identity, written by the embedding only
  (o_proj, down_proj, the experts' down_proj and the per-layer projection have zero rows there); the
  rest is the context, where two directions live: a constant one (every token's embedding holds it)
  and a BOS one (only the BOS token's);
- head dims: each layer type's head dims split into pair sets by RoPE frequency: "pos" (sliding:
  the 16 fastest pairs; global: the rotated pairs), "sink" (the 16 slowest pairs, never rotated on
  global layers) and "content" (the rest);
- keys: pos dims read the constant direction (so a query that also reads it scores by distance
  alone: a local head), sink dims read the BOS direction (a query reading the constant direction
  finds the BOS key: a sink head), content dims read the context (sliding) or the token identity
  (global: a query reading the identity through the same projection finds earlier copies of its
  own token anywhere in the context: a retrieval head);
- queries: each head's role sets how its energy splits over the three dim sets (ROLES); q_norm and
  k_norm scale each set (GAINS), which sets how peaked the attention is;
- the residual: the post-attention norm at sqrt(H) / 4 of the generator's scale (a fifth of the
  embedding's, at every width: where attention goes moves the logits beyond bf16 rounding), the
  other post-branch norms at sqrt(H) / 16, layer_scalar near 0.9, so no branch swamps the stream
  and bf16 stays close to fp32 over depth; the final norm at 16 / H, so the logits (tied to the
  embedding) reach the soft-cap's range at every width.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from golden_h5py_check import counter_uniform, generated_weight

CONSTRUCTION = 2  # root attribute `construction` of a file with weights = constructed
BOS_ID = 2        # Gemma's bos_token_id: the sink token the inputs plant at every sequence start

IDENTITY_FRACTION = 4   # the first H / 4 hidden coordinates are the token identity
CONSTANT_SCALE, BOS_SCALE = 1.0, 3.0  # the two context directions' weight in the embedding
POS_PAIRS, SINK_PAIRS = 16, 16        # RoPE pairs of the pos (sliding) and sink sets
QUERY_DIRECTION_GAIN = 0.7            # the constant direction's share of a normed hidden state
POST_ATTENTION, POST_BRANCH = 0.25, 0.0625  # times sqrt(H): post-attention norm; the other post-branch norms
LAYER_SCALAR, LAYER_SCALAR_SPREAD, FINAL_NORM = 0.9, 0.05, 16.0
# q_norm and k_norm scale of the pos, sink and content dims, by layer type
GAINS = {"sliding_attention": (0.45, 0.42, 0.25), "full_attention": (0.45, 0.28, 0.25)}
# Query head h takes role h % 4: its energy's shares of pos, sink and content dims (sum 1)
LOCAL, SINK, CONTENT, RETRIEVAL = "local", "sink", "content", "retrieval"
ROLES = {
    "sliding_attention": ((LOCAL, 0.5, 0.0, 0.5), (SINK, 0.0, 0.5, 0.5), (CONTENT, 0.0, 0.0, 1.0),
                          (LOCAL, 0.3, 0.2, 0.5)),
    "full_attention": ((SINK, 0.0, 0.6, 0.4), (RETRIEVAL, 0.0, 0.3, 0.7), (RETRIEVAL, 0.0, 0.0, 1.0),
                       (LOCAL, 0.4, 0.2, 0.4)),
}
BRANCH_OUTPUTS = ("self_attn.o_proj.weight", "mlp.down_proj.weight", "per_layer_projection.weight")
POST_BRANCH_NORMS = ("post_feedforward_layernorm.weight", "post_per_layer_input_norm.weight")


def _stream(seed: int, name: str, size: int) -> np.ndarray:
    """A zero-mean unit-variance stream (uniform(-sqrt 3, sqrt 3)), float32 widened to double."""
    return counter_uniform(seed, name, (size,), 0.0, math.sqrt(3.0)).astype(np.float64)


def identity_mask(hidden: int) -> np.ndarray:
    return (np.arange(hidden) < hidden // IDENTITY_FRACTION).astype(np.float64)


def directions(seed: int, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """The constant and the BOS direction: unit-variance streams on the context coordinates."""
    context = 1.0 - identity_mask(hidden)
    return (_stream(seed, "construct.constant", hidden) * context,
            _stream(seed, "construct.bos", hidden) * context)


def kv_source(config: dict[str, Any], layer: int) -> int:
    """The layer whose keys layer `layer` attends to (itself unless KV-shared)."""
    types = config["layer_types"]
    first_shared = config["num_hidden_layers"] - (config.get("num_kv_shared_layers") or 0)
    if layer < first_shared:
        return layer
    return max(i for i in range(first_shared) if types[i] == types[layer])


def layer_geometry(config: dict[str, Any], layer: int) -> tuple[str, int, int]:
    """(layer type, head dim, kv heads), read from the top-level fields as transformers does."""
    kind = config["layer_types"][layer]
    if kind == "sliding_attention":
        return kind, config["head_dim"], config["num_key_value_heads"]
    kv = config["num_key_value_heads"]
    if config.get("attention_k_eq_v") and config.get("num_global_key_value_heads"):
        kv = config["num_global_key_value_heads"]
    return kind, config.get("global_head_dim") or config["head_dim"], kv


def dim_sets(config: dict[str, Any], kind: str, head_dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boolean masks over a head's dims: pos, sink, content. Dim d is RoPE pair d mod D/2."""
    half = head_dim // 2
    pair = np.arange(head_dim) % half
    if kind == "sliding_attention":
        pos = pair < POS_PAIRS
    else:  # proportional RoPE rotates the first partial_rotary_factor * D/2 pairs
        factor = config["rope_parameters"]["full_attention"].get("partial_rotary_factor", 1.0)
        pos = pair < int(factor * half)
    sink = pair >= half - SINK_PAIRS
    return pos, sink, ~(pos | sink)


def role_scale(share: float, head_dim: int, dims: int) -> float:
    """Row scale that gives a dim set `share` of a query's energy (before q_norm normalises it)."""
    return math.sqrt(share * head_dim / dims)


def constructed_weight(config: dict[str, Any], seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """One weight, float32, before rounding to the file's dtype."""
    base = generated_weight(seed, name, shape).astype(np.float64)
    hidden = config["hidden_size"]
    identity = identity_mask(hidden)
    constant, bos = directions(seed, hidden)
    if name == "embed_tokens.weight":
        w = base + CONSTANT_SCALE * constant[None, :]
        w[BOS_ID] = w[BOS_ID] + BOS_SCALE * bos
        return w.astype(np.float32)
    if name == "norm.weight":
        return (base * (FINAL_NORM / hidden)).astype(np.float32)
    m = re.fullmatch(r"layers\.(\d+)\.(.+)", name)
    if not m:
        return base.astype(np.float32)
    layer, local = int(m.group(1)), m.group(2)
    if local == "post_attention_layernorm.weight":
        return (base * (POST_ATTENTION * math.sqrt(hidden))).astype(np.float32)
    if local in POST_BRANCH_NORMS:
        return (base * (POST_BRANCH * math.sqrt(hidden))).astype(np.float32)
    if local == "layer_scalar":
        return counter_uniform(seed, name, shape, LAYER_SCALAR, LAYER_SCALAR_SPREAD)
    if local in BRANCH_OUTPUTS:
        return (base * (1.0 - identity)[:, None]).astype(np.float32)
    if local == "experts.down_proj":
        return (base * (1.0 - identity)[None, :, None]).astype(np.float32)
    kind, head_dim, kv_heads = layer_geometry(config, layer)
    pos, sink, content = dim_sets(config, kind, head_dim)
    if local in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
        g_pos, g_sink, g_content = GAINS[kind]
        return (base * np.where(pos, g_pos, np.where(sink, g_sink, g_content))).astype(np.float32)
    source = kv_source(config, layer)
    u_pos = _stream(seed, f"layers.{source}.construct.pos", head_dim)
    u_sink = _stream(seed, f"layers.{source}.construct.sink", head_dim)
    key_name = f"layers.{source}.self_attn.k_proj.weight"
    if local == "self_attn.k_proj.weight":
        w = base.reshape(kv_heads, head_dim, hidden).copy()
        if kind == "full_attention":
            w[:, content, :] = w[:, content, :] * identity[None, None, :] * 2.0  # 2 = sqrt(IDENTITY_FRACTION)
        w[:, pos, :] = u_pos[pos][None, :, None] * constant[None, None, :] / hidden
        w[:, sink, :] = u_sink[sink][None, :, None] * bos[None, None, :] / hidden
        return w.reshape(shape).astype(np.float32)
    if local == "self_attn.q_proj.weight":
        heads = shape[0] // head_dim
        w = base.reshape(heads, head_dim, hidden).copy()
        keys = generated_weight(seed, key_name, (kv_heads * head_dim, hidden)).astype(np.float64)
        keys = keys.reshape(kv_heads, head_dim, hidden)
        roles = ROLES[kind]
        for h in range(heads):
            role, share_pos, share_sink, share_content = roles[h % len(roles)]
            a_pos = role_scale(share_pos, head_dim, int(pos.sum())) / QUERY_DIRECTION_GAIN
            a_sink = role_scale(share_sink, head_dim, int(sink.sum())) / QUERY_DIRECTION_GAIN
            a_content = role_scale(share_content, head_dim, int(content.sum()))
            if role == RETRIEVAL:  # the key's own identity projection: finds copies of its token
                rows = keys[h // (heads // kv_heads)][content, :] * identity[None, :] * 2.0
            else:
                rows = w[h][content, :]
            w[h, content, :] = a_content * rows
            w[h, pos, :] = a_pos * u_pos[pos][:, None] * constant[None, :] / hidden
            w[h, sink, :] = a_sink * u_sink[sink][:, None] * constant[None, :] / hidden
        return w.reshape(shape).astype(np.float32)
    return base.astype(np.float32)
