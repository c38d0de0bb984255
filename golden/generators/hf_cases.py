#!/usr/bin/env python3
"""Write Gemma-4 test cases whose expected outputs come from Hugging Face transformers itself.

A tiny case directory (`generate`) holds everything the C++ reference needs to be checked
without Python:

    config.json                      the HF config (flat gemma4_text, or nested gemma4 for the
                                     Gemma4ForConditionalGeneration layout)
    model.safetensors                the weights (float32), or model-0000K-of-0000N.safetensors
                                     shards + model.safetensors.index.json
    inputs.safetensors               int64 input_ids [B,S], labels [B,S] (-100 at padding) and,
                                     for padded cases only, attention_mask [B,S]
    golden.f32.h5                    golden files, format v2 (golden/FORMAT.md, kind "model"):
    golden.bf16.h5                   inputs/, weights/ (the text model's tensors in the file's
    golden.f16.h5                    dtype), expected/outputs/ (logits, loss, hidden_states/<i>,
                                     attention_output/<l>, shared_kv/<l>/k|v) and expected/grads/,
                                     all from transformers' eager run in that dtype; the bf16 and
                                     f16 files add truth/: the same run in float32 on the same
                                     rounded weights (the tolerance rule's truth); judged/
                                     marks padded positions don't-care, and baseline/ (filled
                                     by `gemma4-conform golden baseline`) holds the baseline
                                     family's errors

config.json and the weights are loader fixtures; the golden files are self-contained. The
expected outputs are computed by a model that transformers loads back from the case directory
with from_pretrained, so they also prove that the files on disk are what transformers reads.

`generate-geometry` writes a real layer geometry with few layers for a GPU host
(golden/generators/gpu_compare_transformers.sh), in the older layout that script compares:
expected.h5 / expected_bf16.h5 with logits, hidden_states/<i>, loss and grads/<checkpoint key>.

Subcommands:
    defaults --out FILE                      what transformers makes of a config.json that gives only
                                             the required fields (every default, RoPE's inv_freq per
                                             layer type): the reference's defaults are tested on it
    list                                     tiny case names
    generate --case NAME|--all --out DIR     tiny CPU-sized cases (committed as golden data)
    generate-geometry --geometry G --out DIR real layer geometry, few layers, for a GPU host
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig
from transformers.models.gemma4.modeling_gemma4 import (
    Gemma4RMSNorm,
    Gemma4TextRotaryEmbedding,
    Gemma4TextDecoderLayer,
    Gemma4TextExperts,
    Gemma4TextModel,
    Gemma4TextRouter,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIGS = REPO_ROOT / "reference" / "configs"

PAD_ID = 0  # Gemma4TextConfig's default pad_token_id; nn.Embedding(padding_idx=PAD_ID) in transformers
SLIDING, FULL = "sliding_attention", "full_attention"
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


# --------------------------------------------------------------------------------------------
# Case definitions
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    description: str  # one line: what the case exercises (the golden files' `description`)
    text_config: dict[str, Any]  # Gemma4TextConfig keyword arguments
    batch: int
    seq: int
    # "causal": Gemma4ForCausalLM keys (model.layers.N...), flat config.
    # "conditional": Gemma4ForConditionalGeneration keys (model.language_model.layers.N...),
    #                nested config, like the released checkpoints.
    layout: str = "causal"
    # How the global-layer geometry is written to config.json:
    # "per_layer_config": as transformers 5.17 save_pretrained writes it.
    # "global_fields":    the older top-level global_head_dim / num_global_key_value_heads.
    geometry_style: str = "per_layer_config"
    write_layer_types: bool = True  # False: config.json has no layer_types (default pattern)
    padding: tuple[tuple[int, int], ...] = ()  # per row (left pads, right pads); () = none
    shards: int = 1
    plant_extra_tensors: bool = False  # tensors a loader must ignore (conditional layout only)


def _tiny_base(**overrides: Any) -> dict[str, Any]:
    # Dimensions are chosen so that no weight is square (a transposed read cannot go unnoticed),
    # q width (heads x head_dim) differs from hidden_size, and every case directory stays well
    # under 1 MB: the weights and their grads dominate the size.
    base = dict(
        vocab_size=128,
        hidden_size=40,
        intermediate_size=24,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=32,
        sliding_window=8,
        final_logit_softcapping=30.0,
        hidden_size_per_layer_input=0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
    )
    base.update(overrides)
    return base


TINY_CASES: dict[str, Case] = {
    case.name: case
    for case in [
        # 31B-like: K=V on global layers with fewer global KV heads (4 q, 2 kv, 1 global kv),
        # softcap, tied embeddings, no PLE.
        Case(
            name="dense_keqv",
            description="31B-like: K=V global layers with fewer global KV heads, softcap, tied embeddings",
            text_config=_tiny_base(
                num_hidden_layers=4,
                layer_types=[SLIDING, FULL, SLIDING, FULL],
                num_attention_heads=4,
                num_key_value_heads=2,
                attention_k_eq_v=True,
                num_global_key_value_heads=1,
            ),
            batch=2,
            seq=32,  # 4x the sliding window
        ),
        # E2B-like: PLE, KV sharing, double-wide MLP on shared layers, MQA; released-checkpoint
        # layout with the older config serialization, sharded, with tensors to ignore.
        # First shared layer = 6 - 3 = 3. Sources: layer 1 (the LAST sliding layer before the
        # sharing point, not layer 0) and layer 2 (full); layers 3 and 4 both read layer 1.
        Case(
            name="e2b_like",
            description="E2B-like: PLE, KV sharing, double-wide MLP, MQA; sharded conditional-generation checkpoint",
            text_config=_tiny_base(
                intermediate_size=16,
                num_hidden_layers=6,
                layer_types=[SLIDING, SLIDING, FULL, SLIDING, SLIDING, FULL],
                num_kv_shared_layers=3,
                hidden_size_per_layer_input=8,
                vocab_size_per_layer_input=128,
                use_double_wide_mlp=True,
                attention_k_eq_v=False,
            ),
            batch=2,
            seq=28,
            layout="conditional",
            geometry_style="global_fields",
            shards=3,
            plant_extra_tensors=True,
        ),
        # 26B-A4B-like: MoE beside the dense MLP, K=V, untied lm_head, no layer_types in
        # config.json (default pattern: layer 5 full, and layer 6 forced full as the last).
        # hidden_size 24 keeps seven MoE layers under the size budget.
        Case(
            name="moe",
            description="26B-A4B-like: MoE beside the dense MLP, K=V, untied lm_head, default layer pattern",
            text_config=_tiny_base(
                hidden_size=24,
                intermediate_size=16,
                num_key_value_heads=2,
                num_global_key_value_heads=1,
                num_hidden_layers=7,
                attention_k_eq_v=True,
                enable_moe_block=True,
                num_experts=8,
                top_k_experts=2,
                moe_intermediate_size=4,
                tie_word_embeddings=False,
            ),
            batch=2,
            seq=24,
            geometry_style="global_fields",
            write_layer_types=False,
        ),
        # Padding: row 0 left-padded, row 1 right-padded, row 2 unpadded.
        Case(
            name="padded_batch",
            description="attention mask: one left-padded, one right-padded and one unpadded row",
            text_config=_tiny_base(
                num_hidden_layers=3,
                layer_types=[SLIDING, SLIDING, FULL],
                num_key_value_heads=2,
                attention_k_eq_v=True,
                num_global_key_value_heads=1,
            ),
            batch=3,
            seq=26,
            padding=((5, 0), (0, 7), (0, 0)),
        ),
        # use_bidirectional_attention == "all": no causal mask, two-sided sliding window.
        Case(
            name="bidirectional",
            description="use_bidirectional_attention all: no causal mask, two-sided sliding window",
            text_config=_tiny_base(
                num_hidden_layers=3,
                layer_types=[SLIDING, SLIDING, FULL],
                use_bidirectional_attention="all",
            ),
            batch=2,
            seq=30,
        ),
    ]
}


# Real geometry, few layers: (config file, layer_types, num_kv_shared_layers).
GEOMETRIES: dict[str, tuple[str, list[str], int]] = {
    "31b": ("gemma-4-31b.json", [SLIDING, FULL], 0),
    "26b-a4b": ("gemma-4-26b-a4b.json", [SLIDING, FULL], 0),
    "e2b": ("gemma-4-e2b.json", [SLIDING, FULL, SLIDING, FULL], 2),  # layers 2,3 share from 0,1
}
GEOMETRY_VOCAB = 4096


def geometry_case(geometry: str, seq: int, configs_dir: Path) -> Case:
    """A Case that keeps every geometry field of a released config but few layers and vocab."""
    file_name, layer_types, num_kv_shared = GEOMETRIES[geometry]
    released = json.loads((configs_dir / file_name).read_text())
    released = released.get("text_config", released)
    text_config = {k: v for k, v in released.items() if k not in ("model_type", "architectures")}
    text_config.update(
        num_hidden_layers=len(layer_types),
        layer_types=list(layer_types),
        num_kv_shared_layers=num_kv_shared,
        vocab_size=GEOMETRY_VOCAB,
        vocab_size_per_layer_input=GEOMETRY_VOCAB,
    )
    return Case(name=f"geometry_{geometry}", description=f"{geometry} geometry, {len(layer_types)} layers",
                text_config=text_config, batch=1, seq=seq)


# --------------------------------------------------------------------------------------------
# Model construction and randomisation
# --------------------------------------------------------------------------------------------

def build_text_config(case: Case) -> Gemma4TextConfig:
    return Gemma4TextConfig(**case.text_config)


def build_model(case: Case) -> torch.nn.Module:
    """The in-memory model whose random weights become the checkpoint (CPU, float32)."""
    text_config = build_text_config(case)
    if case.layout == "conditional":
        return Gemma4ForConditionalGeneration(Gemma4Config(text_config=text_config))
    return Gemma4ForCausalLM(text_config)


def embedding_std(model: torch.nn.Module) -> float:
    # Std 1 as asked, except that a tied embedding is also the lm_head: at real hidden sizes
    # (2816..5376) std 1 would give logits of std ~sqrt(H) that all saturate the softcap of 30.
    # Capping at 8/sqrt(H) keeps the logits' std near 8 there and leaves tiny cases at 1.
    text_config = model.config.get_text_config()
    if not text_config.tie_word_embeddings:
        return 1.0
    return min(1.0, 8.0 / math.sqrt(text_config.hidden_size))


def random_value(kind: str, shape: torch.Size, std: float, generator: torch.Generator) -> torch.Tensor:
    # Drawn on the CPU from one generator so that a seed gives the same weights on every device.
    if kind == "normal":
        return torch.randn(shape, generator=generator, dtype=torch.float32) * std
    return torch.rand(shape, generator=generator, dtype=torch.float32) + 0.5  # uniform(0.5, 1.5)


def init_rule(module_name: str, module: torch.nn.Module, attr: str, tensor: torch.Tensor,
              embed_std: float) -> tuple[str, float]:
    """How one parameter or persistent buffer is randomised: ("normal", std) or ("uniform", 0)."""
    if isinstance(module, torch.nn.Embedding) and attr == "weight":
        # Only the main embedding can be tied to the lm_head; the PLE table keeps std 1.
        return "normal", embed_std if module_name.endswith(".embed_tokens") else 1.0
    if isinstance(module, torch.nn.Linear) and attr == "weight":
        return "normal", 1.0 / math.sqrt(module.in_features)
    if isinstance(module, Gemma4RMSNorm) and attr == "weight":
        return "uniform", 0.0
    if isinstance(module, Gemma4TextRouter) and attr in ("scale", "per_expert_scale"):
        return "uniform", 0.0
    if isinstance(module, Gemma4TextExperts) and attr in ("gate_up_proj", "down_proj"):
        return "normal", 1.0 / math.sqrt(tensor.shape[-1])  # [E, out, in]: fan_in is the last dim
    if isinstance(module, Gemma4TextDecoderLayer) and attr == "layer_scalar":
        return "uniform", 0.0
    raise ValueError(f"no randomisation rule for {type(module).__name__}.{attr}: extend init_rule")


@torch.no_grad()
def randomise_(model: torch.nn.Module, seed: int) -> None:
    """Move every parameter and persistent buffer away from its init (all-ones norms hide bugs)."""
    generator = torch.Generator().manual_seed(seed)
    embed_std = embedding_std(model)
    persistent = set(model.state_dict().keys())
    # named_parameters() lists a tied weight once, under the embedding's name, so the lm_head
    # (which shares it) cannot overwrite it with the Linear rule.
    tensors = list(model.named_parameters()) + [
        (name, buf) for name, buf in model.named_buffers() if name in persistent
    ]
    for name, tensor in sorted(tensors, key=lambda item: item[0]):
        module_name, _, attr = name.rpartition(".")
        kind, std = init_rule(module_name, model.get_submodule(module_name), attr, tensor, embed_std)
        tensor.copy_(random_value(kind, tensor.shape, std, generator))


# --------------------------------------------------------------------------------------------
# Writing the checkpoint and config.json
# --------------------------------------------------------------------------------------------

def save_checkpoint(model: torch.nn.Module, case: Case, case_dir: Path) -> None:
    """Weights (float32) and config.json, through transformers' own save_pretrained."""
    total_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    # save_pretrained shards greedily; a limit a bit above total/N gives N shards.
    max_shard = total_bytes // case.shards + 1 if case.shards > 1 else "50GB"
    model.save_pretrained(case_dir, max_shard_size=max_shard, safe_serialization=True)
    (case_dir / "generation_config.json").unlink(missing_ok=True)  # not part of the contract
    rewrite_config(case, case_dir / "config.json")
    if case.plant_extra_tensors:
        plant_extra_tensors(model, case_dir)


def global_geometry(text_config: dict[str, Any]) -> tuple[int, int | None]:
    """(global_head_dim, num_global_key_value_heads) as the case asked for them."""
    return text_config.get("global_head_dim", 512), text_config.get("num_global_key_value_heads")


def to_older_serialization(text: dict[str, Any], case: Case) -> dict[str, Any]:
    """Replace per_layer_config by the older top-level global_head_dim fields (written before 5.15)."""
    text = dict(text)
    text.pop("per_layer_config", None)
    global_head_dim, num_global_kv = global_geometry(case.text_config)
    text["global_head_dim"] = global_head_dim
    text["num_global_key_value_heads"] = num_global_kv
    return dict(sorted(text.items()))


def rewrite_config(case: Case, path: Path) -> None:
    config = json.loads(path.read_text())
    text = config["text_config"] if case.layout == "conditional" else config
    if case.geometry_style == "global_fields":
        text = to_older_serialization(text, case)
    if not case.write_layer_types:
        text.pop("layer_types", None)
    if case.layout == "conditional":
        # Minimal nested form of the released checkpoints: text only, no vision/audio configs.
        config = {
            "architectures": ["Gemma4ForConditionalGeneration"],
            "model_type": "gemma4",
            "text_config": text,
            "tie_word_embeddings": text["tie_word_embeddings"],
            "transformers_version": config["transformers_version"],
        }
    else:
        config = text
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def plant_extra_tensors(model: torch.nn.Module, case_dir: Path) -> None:
    """Add tensors that real checkpoints carry and a text loader must ignore: a vision-tower
    weight, and the k_proj/v_proj/k_norm that older files kept on KV-shared layers."""
    text_config = model.config.get_text_config()
    first_shared = text_config.num_hidden_layers - text_config.num_kv_shared_layers
    layer = text_config.num_hidden_layers - 1 if first_shared < text_config.num_hidden_layers else None
    generator = torch.Generator().manual_seed(12345)
    extras = {"model.vision_tower.dummy.weight": torch.randn(4, 6, generator=generator)}
    if layer is not None:
        head_dim = text_config.per_layer_config[layer].head_dim
        kv_dim = text_config.per_layer_config[layer].num_key_value_heads * head_dim
        prefix = f"model.language_model.layers.{layer}.self_attn"
        extras[f"{prefix}.k_proj.weight"] = torch.randn(kv_dim, text_config.hidden_size, generator=generator)
        extras[f"{prefix}.v_proj.weight"] = torch.randn(kv_dim, text_config.hidden_size, generator=generator)
        extras[f"{prefix}.k_norm.weight"] = torch.rand(head_dim, generator=generator) + 0.5
    add_tensors_to_last_shard(case_dir, extras)


def add_tensors_to_last_shard(case_dir: Path, extras: dict[str, torch.Tensor]) -> None:
    index_path = case_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    last_shard = sorted(set(index["weight_map"].values()))[-1]
    tensors = read_safetensors(case_dir / last_shard)
    tensors.update(extras)
    save_file(tensors, str(case_dir / last_shard), metadata={"format": "pt"})
    for key, tensor in extras.items():
        index["weight_map"][key] = last_shard
        index["metadata"]["total_size"] += tensor.numel() * tensor.element_size()
        if "total_parameters" in index["metadata"]:
            index["metadata"]["total_parameters"] += tensor.numel()
    index["weight_map"] = dict(sorted(index["weight_map"].items()))
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as f:
        return {key: f.get_tensor(key) for key in f.keys()}


def checkpoint_tensors(case_dir: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(case_dir.glob("model*.safetensors")):
        tensors.update(read_safetensors(path))
    return tensors


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------

def make_inputs(case: Case, vocab_size: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    input_ids = torch.randint(1, vocab_size, (case.batch, case.seq), generator=generator, dtype=torch.int64)
    # One real (attended, labelled) token equal to pad_token_id: transformers' embeddings are
    # nn.Embedding(padding_idx=pad_token_id), so that row gets no gradient from the lookup.
    # The last row is never padded.
    input_ids[case.batch - 1, 3] = PAD_ID
    attention_mask = torch.ones_like(input_ids)
    for row, (left, right) in enumerate(case.padding):
        attention_mask[row, :left] = 0
        attention_mask[row, case.seq - right :] = 0
    input_ids = torch.where(attention_mask.bool(), input_ids, PAD_ID)
    # logits[t] predicts labels[t + 1]: a label predicted from a padded position would make the
    # loss depend on an implementation-defined row (golden/FORMAT.md, "Don't-care positions").
    real = attention_mask.bool()
    predictor_real = torch.cat([torch.ones_like(real[:, :1]), real[:, :-1]], dim=1)
    labels = torch.where(real & predictor_real, input_ids, -100)
    inputs = {"input_ids": input_ids, "labels": labels}
    if case.padding:
        inputs["attention_mask"] = attention_mask
    return inputs


# --------------------------------------------------------------------------------------------
# The reference computation: transformers, loaded back from the case directory
# --------------------------------------------------------------------------------------------

def load_reference(case: Case, case_dir: Path, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """The model as transformers loads it from disk; fails on missing or reshaped weights.

    Loading with dtype=bfloat16 (not casting with .to) matters: .to(bfloat16) also rounds the
    non-persistent RoPE inv_freq buffers to bf16, which from_pretrained keeps in fp32."""
    model_class = Gemma4ForConditionalGeneration if case.layout == "conditional" else Gemma4ForCausalLM
    model, info = model_class.from_pretrained(
        case_dir,
        dtype=dtype,
        attn_implementation="eager",
        experts_implementation="eager",
        output_loading_info=True,
    )
    if info["missing_keys"] or info["mismatched_keys"]:
        raise RuntimeError(f"{case.name}: transformers did not load every weight: {info}")
    text_config = model.config.get_text_config()
    assert text_config._attn_implementation == "eager", text_config._attn_implementation
    return model.to(device).eval()


def assert_loaded_exactly(model: torch.nn.Module, case_dir: Path) -> None:
    """Every tensor transformers holds equals the one on disk (no silent re-initialisation)."""
    on_disk = checkpoint_tensors(case_dir)
    for key, tensor in model.state_dict().items():
        if key in on_disk:
            if not torch.equal(tensor.cpu(), on_disk[key]):
                raise RuntimeError(f"{key}: loaded tensor differs from the checkpoint")
        elif not key.endswith("lm_head.weight"):  # a tied lm_head is not stored
            raise RuntimeError(f"{key}: not in the checkpoint")


def run_reference(model: torch.nn.Module, inputs: dict[str, torch.Tensor], device: str) -> dict[str, Any]:
    """Forward with labels and hidden states, then backward of HF's loss."""
    model.zero_grad(set_to_none=True)
    output = model(
        input_ids=inputs["input_ids"].to(device),
        attention_mask=inputs["attention_mask"].to(device) if "attention_mask" in inputs else None,
        labels=inputs["labels"].to(device),
        output_hidden_states=True,
        use_cache=False,
    )
    output.loss.backward()
    # named_parameters() lists a tied lm_head once, under the embedding key: its grad is the sum
    # of the lookup and the lm_head contributions, which is what the checkpoint key receives.
    grads = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            grads[name] = param.grad if param.grad is not None else torch.zeros_like(param)
            if param.grad is None:
                print(f"  note: {name} received no gradient (stored as zeros)")
    return {
        "logits": output.logits.detach(),
        "hidden_states": [h.detach() for h in output.hidden_states],
        "loss": output.loss.detach(),
        "grads": grads,
    }


def check_outputs(case: Case, result: dict[str, Any], num_layers: int, checkpoint_keys: set[str]) -> None:
    logits = result["logits"].float()
    if not torch.isfinite(logits).all() or not torch.isfinite(result["loss"]):
        raise RuntimeError(f"{case.name}: non-finite logits or loss")
    if len(result["hidden_states"]) != num_layers + 1:
        raise RuntimeError(f"{case.name}: {len(result['hidden_states'])} hidden states for {num_layers} layers")
    unknown = set(result["grads"]) - checkpoint_keys
    if unknown:
        raise RuntimeError(f"{case.name}: grads with no checkpoint key: {sorted(unknown)}")
    for name, grad in result["grads"].items():
        if not torch.isfinite(grad).all():
            raise RuntimeError(f"{case.name}: non-finite grad {name}")


def write_expected(path: Path, result: dict[str, Any], attrs: dict[str, Any]) -> None:
    """The older layout generate-geometry writes, which golden/generators/gpu_compare_transformers.sh compares."""
    def as_f32(tensor: torch.Tensor) -> np.ndarray:
        return tensor.detach().to("cpu", torch.float32).numpy()

    with h5py.File(path, "w") as f:
        for key, value in attrs.items():
            f.attrs[key] = value
        f.create_dataset("logits", data=as_f32(result["logits"]))
        f.create_dataset("loss", data=as_f32(result["loss"]))
        for i, hidden in enumerate(result["hidden_states"]):
            f.create_dataset(f"hidden_states/{i}", data=as_f32(hidden))
        for name in sorted(result["grads"]):
            f.create_dataset(f"grads/{name}", data=as_f32(result["grads"][name]))


def expected_attrs(case: Case, dtype_name: str, device: str, seed: int) -> dict[str, Any]:
    return {
        "generator": f"transformers {transformers.__version__}",
        "torch": str(torch.__version__),  # TorchVersion, a str subclass h5py cannot store
        "case": case.name,
        "dtype": dtype_name,
        "device": device,
        "seed": int(seed),
        "attn_implementation": "eager",
        "experts_implementation": "eager",
        "weights": "float32 on disk; loaded with from_pretrained(dtype=...)",
        "tf32": "off",
    }


def compute_expected(case: Case, case_dir: Path, inputs: dict[str, torch.Tensor], dtype_name: str,
                     device: str, seed: int, out_name: str) -> dict[str, Any]:
    model = load_reference(case, case_dir, DTYPES[dtype_name], device)
    if dtype_name == "f32":
        assert_loaded_exactly(model, case_dir)
    result = run_reference(model, inputs, device)
    text_config = model.config.get_text_config()
    check_outputs(case, result, text_config.num_hidden_layers, set(checkpoint_tensors_keys(case_dir)))
    write_expected(case_dir / out_name, result, expected_attrs(case, dtype_name, device, seed))
    summary = {
        "logits_absmax": result["logits"].float().abs().max().item(),
        "loss": result["loss"].float().item(),
        "logits": result["logits"].float().cpu(),
    }
    del model, result
    free_memory(device)
    return summary


def checkpoint_tensors_keys(case_dir: Path) -> list[str]:
    keys: list[str] = []
    for path in sorted(case_dir.glob("model*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            keys.extend(f.keys())
    return keys


def free_memory(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def check_text_model_equivalence(case: Case, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                                 logits: torch.Tensor) -> None:
    """For the conditional layout: the same weights in a Gemma4ForCausalLM give the same logits,
    so the C++ text decoder is held to text-decoder numerics, not to a wrapper's."""
    causal = Gemma4ForCausalLM(model.config.get_text_config())
    state = {
        key.replace("model.language_model.", "model.", 1): value
        for key, value in model.state_dict().items()
        if key.startswith("model.language_model.") or key == "lm_head.weight"
    }
    causal.load_state_dict(state, strict=True)
    causal.set_attn_implementation("eager")
    with torch.no_grad():
        out = causal.eval()(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"), use_cache=False)
    diff = (out.logits.float() - logits).abs().max().item()
    if diff > 1e-4:
        raise RuntimeError(f"{case.name}: Gemma4ForCausalLM and the conditional layout differ by {diff}")


# --------------------------------------------------------------------------------------------
# Golden files, format v2 (golden/FORMAT.md, kind "model")
# --------------------------------------------------------------------------------------------

# One file per dtype, golden.<dtype>.h5; the reduced-precision ones carry a float32 truth/.
GOLDEN_DTYPES = ("f32", "bf16", "f16")


def text_decoder(model: torch.nn.Module) -> Gemma4TextModel:
    """The text model whose root the golden names are relative to, whatever the layout."""
    return model.model.language_model if isinstance(model, Gemma4ForConditionalGeneration) else model.model


def golden_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """Every trainable parameter by its golden name (`layers.0.mlp.up_proj.weight`).

    A tied lm_head is the embedding's Parameter, so it is listed once, as embed_tokens.weight."""
    decoder = text_decoder(model)
    params = dict(decoder.named_parameters())
    if not any(model.lm_head.weight is p for p in params.values()):
        params["lm_head.weight"] = model.lm_head.weight
    if len(params) != len(list(model.parameters())):
        raise RuntimeError("the model has parameters outside the text decoder and lm_head")
    return params


def golden_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters plus the persistent buffers (layer_scalar): what weights/ stores."""
    decoder = text_decoder(model)
    persistent = set(decoder.state_dict().keys())
    buffers = {name: buf for name, buf in decoder.named_buffers() if name in persistent}
    return {**golden_parameters(model), **buffers}


def run_golden(model: torch.nn.Module, inputs: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    """Forward and backward of HF's loss, as the dataset tree under expected/ or truth/.

    The attention outputs and the shared K/V are not model outputs: forward hooks on every
    self_attn read them (output[0], and what a storing layer wrote into shared_kv_states)."""
    decoder = text_decoder(model)
    shared_types = {layer.self_attn.layer_type for layer in decoder.layers if layer.self_attn.is_kv_shared_layer}
    captured: dict[str, torch.Tensor] = {}

    def capture(index: int):
        def hook(module, args, kwargs, output):
            captured[f"outputs/attention_output/{index}"] = output[0].detach()
            # store_full_length_kv is also true without sharing (last layer of each type):
            # only a layer whose K/V some shared layer reads is a storing layer.
            if module.store_full_length_kv and module.layer_type in shared_types:
                k, v = kwargs["shared_kv_states"][module.layer_type]
                captured[f"outputs/shared_kv/{index}/k"] = k.detach()
                captured[f"outputs/shared_kv/{index}/v"] = v.detach()
        return hook

    handles = [layer.self_attn.register_forward_hook(capture(i), with_kwargs=True)
               for i, layer in enumerate(decoder.layers)]
    try:
        result = run_reference(model, inputs, device)
    finally:
        for handle in handles:
            handle.remove()
    tree = {"outputs/logits": result["logits"], "outputs/loss": result["loss"], **captured}
    for i, hidden in enumerate(result["hidden_states"]):
        tree[f"outputs/hidden_states/{i}"] = hidden
    # run_reference has noted (and zero-filled) any parameter that received no gradient.
    for name, param in golden_parameters(model).items():
        tree[f"grads/{name}"] = param.grad if param.grad is not None else torch.zeros_like(param)
    check_golden_tree(model, tree)
    return tree


def check_golden_tree(model: torch.nn.Module, tree: dict[str, torch.Tensor]) -> None:
    layers = model.config.get_text_config().num_hidden_layers
    for prefix, count in (("outputs/hidden_states/", layers + 1), ("outputs/attention_output/", layers)):
        found = sum(name.startswith(prefix) for name in tree)
        if found != count:
            raise RuntimeError(f"{found} datasets {prefix}* for {layers} layers, expected {count}")
    for name, tensor in tree.items():
        if not torch.isfinite(tensor).all():
            raise RuntimeError(f"non-finite {name}")


@torch.no_grad()
def load_truth(case: Case, case_dir: Path, dtype: torch.dtype, device: str) -> torch.nn.Module:
    """transformers in float32 on the weights rounded to `dtype`: the truth/ of a bf16/f16 file.

    Rounding the loaded float32 tensors in place equals loading a checkpoint of the rounded
    weights; the non-persistent RoPE and embedding-scale buffers stay float32, as from_pretrained
    leaves them."""
    model = load_reference(case, case_dir, torch.float32, device)
    for tensor in model.state_dict().values():
        tensor.copy_(tensor.to(dtype).float())
    return model


def assert_same_weights(rounded: dict[str, torch.Tensor], truth: dict[str, torch.Tensor]) -> None:
    if rounded.keys() != truth.keys():
        raise RuntimeError("the truth model's weights are named differently")
    for name, tensor in rounded.items():
        if not torch.equal(tensor.float(), truth[name]):
            raise RuntimeError(f"{name}: the truth model's weight differs from the rounded one")


def golden_attrs(case: Case, config_path: Path, dtype_name: str, device: str, seed: int) -> dict[str, Any]:
    """Root attributes. `config` is the text part of config.json, as the C++ loader reads it."""
    config = json.loads(config_path.read_text())
    attrs: dict[str, Any] = {
        "format_version": np.int64(2),
        "kind": "model",
        "case": f"transformers/{case.name}",
        "description": case.description,
        "generator": f"transformers {transformers.__version__}",
        "config": json.dumps(config.get("text_config", config), sort_keys=True),
        "dtype": dtype_name,
        "device": device,
        "seed": np.int64(seed),
        "torch_version": str(torch.__version__),  # TorchVersion, a str subclass h5py cannot store
        "tolerance_class": "fp32" if dtype_name == "f32" else "reduced-precision",
        "weights": "stored",
        "kv_key": "layer-type",  # transformers >= 5.8 keys shared_kv_states by layer type
    }
    if dtype_name != "f32":
        attrs["truth_dtype"] = "f32"
    if device == "cuda":
        attrs["cuda_version"] = str(torch.version.cuda)
        attrs["gpu_name"] = torch.cuda.get_device_name()
    return attrs


def write_golden(path: Path, attrs: dict[str, Any], datasets: dict[str, torch.Tensor]) -> None:
    """Floats as float32 (exact for bf16/f16 values), integers as int64, in sorted order.

    Three files per case with weights, grads and a truth tree would take ~14 MB of committed
    data, so every non-scalar dataset is one deflate-compressed chunk behind a byte shuffle
    (bf16/f16 values widened to float32 end in zero bytes, which deflate removes); HDF5 reads
    it transparently. The v1.10 file format gives a single chunk a few bytes of index instead of
    a B-tree node; HDF5 1.10 (the C++ side's library) reads it."""
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        for key in sorted(attrs):
            f.attrs[key] = attrs[key]
        for name in sorted(datasets):
            tensor = datasets[name].detach().cpu()
            data = (tensor.to(torch.float32) if tensor.is_floating_point() else tensor.to(torch.int64)).numpy()
            if data.ndim == 0:
                f.create_dataset(name, data=data)
            else:
                f.create_dataset(name, data=data, chunks=data.shape, shuffle=True, compression="gzip",
                                 compression_opts=9)


@functools.cache
def judged_rule():
    """judged/ (golden/FORMAT.md): the C++ rule itself (golden/model_cases.cpp model_judged), through
    the project's Python package, the one installed in this Python (ci/build.sh's .venv) or else the
    build tree's (build/python): per-position outputs are don't-care at padded positions, and the
    pad row of the embedding gradients where the pad id is a real token (every case plants one)."""
    try:
        from gemma4_conform import _core
    except ImportError:
        sys.path.append(str(REPO_ROOT / "build" / "python"))
        try:
            from gemma4_conform import _core
        except ImportError as err:
            raise SystemExit(f"judged/ needs the project's Python package gemma4_conform: install it "
                             f"(ci/build.sh) or build it (build/python): {err}") from err
    return _core.model_judged


def fill_baselines(case_dir: Path, conform: Path) -> None:
    """baseline/ of the bf16/f16 files: the C++ reference and its in-tree variants recompute the
    case and record their errors against truth/ (`gemma4-conform golden baseline`)."""
    files = [str(case_dir / f"golden.{d}.h5") for d in GOLDEN_DTYPES if d != "f32"]
    if not conform.exists():
        raise SystemExit(f"{conform} not found: build it (ci/build.sh) or pass --conform; "
                         "bf16/f16 golden files need baseline/ (golden/FORMAT.md)")
    subprocess.run([str(conform), "golden", "baseline", *files], check=True)


def generate_golden(case: Case, case_dir: Path, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                    dtype_name: str, device: str, seed: int) -> dict[str, Any]:
    """One golden file: transformers in `dtype_name`, plus the float32 truth when reduced."""
    dtype = DTYPES[dtype_name]
    reference = load_reference(case, case_dir, dtype, device)
    if dtype_name == "f32":
        assert_loaded_exactly(reference, case_dir)
    weights = {name: t.detach() for name, t in golden_weights(reference).items()}
    expected = run_golden(reference, inputs, device)
    if case.layout == "conditional" and dtype_name == "f32":
        check_text_model_equivalence(case, model, inputs, expected["outputs/logits"].cpu())
    datasets = {f"inputs/{name}": t for name, t in inputs.items()}
    datasets.update({f"weights/{name}": t for name, t in weights.items()})
    datasets.update({f"expected/{name}": t for name, t in expected.items()})
    datasets.update({f"judged/{name}": mask for name, mask in judged_rule()(inputs, expected, PAD_ID).items()})
    if dtype_name != "f32":
        truth_model = load_truth(case, case_dir, dtype, device)
        assert_same_weights(weights, golden_weights(truth_model))
        datasets.update({f"truth/{name}": t for name, t in run_golden(truth_model, inputs, device).items()})
        del truth_model
    write_golden(case_dir / f"golden.{dtype_name}.h5", golden_attrs(case, case_dir / "config.json", dtype_name,
                                                                      device, seed), datasets)
    summary = {
        "logits_absmax": expected["outputs/logits"].float().abs().max().item(),
        "loss": expected["outputs/loss"].float().item(),
    }
    del reference, expected, datasets
    free_memory(device)
    return summary


# --------------------------------------------------------------------------------------------
# Case generation
# --------------------------------------------------------------------------------------------

def set_deterministic(seed: int) -> None:
    # Weights and tokens come from explicit generators; this covers anything else that draws.
    torch.manual_seed(seed)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    torch.use_deterministic_algorithms(True, warn_only=True)
    # fp32 must mean fp32 on a GPU: no TF32 in matmuls.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def prepare_case_dir(case: Case, out: Path, seed: int) -> tuple[Path, torch.nn.Module, dict[str, torch.Tensor]]:
    """Random weights -> checkpoint + config.json; random tokens -> inputs.safetensors."""
    case_dir = out / case.name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    set_deterministic(seed)
    model = build_model(case)
    randomise_(model, seed)
    save_checkpoint(model, case, case_dir)
    inputs = make_inputs(case, model.config.get_text_config().vocab_size, seed)
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(case_dir / "inputs.safetensors"))
    return case_dir, model, inputs


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def generate_tiny(case: Case, out: Path, device: str, seed: int, conform: Path) -> None:
    case_dir, model, inputs = prepare_case_dir(case, out, seed)
    for dtype_name in GOLDEN_DTYPES:
        summary = generate_golden(case, case_dir, model, inputs, dtype_name, device, seed)
        print_summary(case, case_dir, summary, label=dtype_name)
    fill_baselines(case_dir, conform)


def generate_geometry(geometry: str, seq: int, out: Path, device: str, seed: int, configs_dir: Path) -> None:
    case = geometry_case(geometry, seq, configs_dir)
    case_dir, model, inputs = prepare_case_dir(case, out, seed)
    del model  # the reference is loaded back from disk; keep one copy of the weights at a time
    free_memory(device)
    for dtype_name, out_name in (("f32", "expected.h5"), ("bf16", "expected_bf16.h5")):
        summary = compute_expected(case, case_dir, inputs, dtype_name, device, seed, out_name)
        print_summary(case, case_dir, summary, label=dtype_name)
        if device.startswith("cuda"):
            print(f"  peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
            torch.cuda.reset_peak_memory_stats()


def print_summary(case: Case, case_dir: Path, summary: dict[str, Any], label: str = "") -> None:
    tag = f"{case.name}{' ' + label if label else ''}"
    print(
        f"{tag}: B={case.batch} S={case.seq} total {directory_bytes(case_dir)} bytes, "
        f"logits absmax {summary['logits_absmax']:.3f}, loss {summary['loss']:.6f}"
    )


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

# The fields a config.json must give (reference/config.cpp kRequiredFields); everything else is
# left to transformers' defaults.
MINIMAL_CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=7,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)
DEFAULT_FIELDS = ("sliding_window", "rms_norm_eps", "tie_word_embeddings", "pad_token_id", "final_logit_softcapping",
                  "hidden_size_per_layer_input", "vocab_size_per_layer_input", "attention_k_eq_v",
                  "use_double_wide_mlp", "num_kv_shared_layers", "enable_moe_block", "layer_types",
                  "hidden_activation", "use_bidirectional_attention")


def write_defaults(out: Path) -> None:
    """transformers' own resolution of MINIMAL_CONFIG: the defaulted fields, each layer type's head
    dim, and RoPE's inverse frequencies per layer type from Gemma4TextRotaryEmbedding itself."""
    config = Gemma4TextConfig(**MINIMAL_CONFIG)
    resolved = config.to_dict()
    rotary = Gemma4TextRotaryEmbedding(config)
    rope = {}
    for layer_type in rotary.layer_types:
        rope[layer_type] = {
            **config.rope_parameters[layer_type],
            "head_dim": int(config.per_layer_config[layer_type].head_dim),
            "inv_freq": [float(x) for x in getattr(rotary, f"{layer_type}_inv_freq").double()],
            "attention_scaling": float(getattr(rotary, f"{layer_type}_attention_scaling")),
        }
    document = {
        "generator": f"transformers {transformers.__version__}",
        "description": "what transformers makes of a config.json with only the required fields "
                       "(golden/generators/hf_cases.py defaults); "
                       "reference/tests/test_config.cpp holds the reference to it",
        "config": {"model_type": "gemma4_text", **MINIMAL_CONFIG},
        "resolved": {field: resolved.get(field) for field in DEFAULT_FIELDS},
        "rope": rope,
    }
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="print the tiny case names, one per line")

    defaults = sub.add_parser("defaults", help="write transformers' defaults for a minimal config.json (JSON)")
    defaults.add_argument("--out", type=Path, required=True)

    gen = sub.add_parser("generate", help="write tiny cases (DIR/NAME/...)")
    which = gen.add_mutually_exclusive_group(required=True)
    which.add_argument("--case", choices=sorted(TINY_CASES), help="one case")
    which.add_argument("--all", action="store_true", help="every case")
    gen.add_argument("--out", type=Path, required=True, help="output directory")
    gen.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--conform", type=Path, default=REPO_ROOT / "build" / "bin" / "gemma4-conform",
                     help="the gemma4-conform binary that fills baseline/ of the bf16/f16 files "
                          "(default build/bin/gemma4-conform)")

    geo = sub.add_parser("generate-geometry", help="real geometry, few layers (DIR/geometry_G/...)")
    geo.add_argument("--geometry", required=True, choices=sorted(GEOMETRIES))
    geo.add_argument("--seq", type=int, default=2048)
    geo.add_argument("--out", type=Path, required=True)
    geo.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    geo.add_argument("--seed", type=int, default=0)
    geo.add_argument("--configs", type=Path, default=DEFAULT_CONFIGS,
                     help=f"released text configs (default {DEFAULT_CONFIGS})")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.command == "list":
        print("\n".join(TINY_CASES))
        return 0
    # Keep the per-case summary readable (the forced-full last layer of `moe` warns by design).
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if args.command == "defaults":
        write_defaults(args.out)
        return 0
    if args.command == "generate":
        judged_rule()  # before any case is written
        names = list(TINY_CASES) if args.all else [args.case]
        for name in names:
            generate_tiny(TINY_CASES[name], args.out, args.device, args.seed, args.conform)
        return 0
    generate_geometry(args.geometry, args.seq, args.out, args.device, args.seed, args.configs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
