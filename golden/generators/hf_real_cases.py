#!/usr/bin/env python3
"""Real-size goldens: every released geometry at its real head dims, windows and sequence lengths,
computed by Hugging Face transformers (golden/FORMAT.md, "Real-size goldens").

Each case keeps what kernels and engines dispatch on and reduces only what no code path depends on:

  kept      head_dim 256 / global_head_dim 512, sliding_window 512 (E2B, E4B) or 1024 (31B,
            26B-A4B), the GQA ratios (sliding and global), K=V global layers, proportional partial
            RoPE on global layers, KV sharing with its double-wide MLP, per-layer embeddings,
            final_logit_softcapping, the MoE's 128 experts and top-8
  reduced   hidden_size 64, 8 query heads (the released ratios at 8: E2B 8/1, E4B 8/2, 31B and
            26B-A4B 8/4 sliding and 8/1 global), intermediate 64, moe_intermediate 16,
            per-layer input width 32, vocabulary 32, and the layers to one full pattern (5 or 6
            sliding layers and a global one) plus, where the model shares K/V, a shared tail of one
            sliding and one global layer

Inputs: B = 2 rows of S = 2 x window + 1 tokens. Row 0 is left-padded; row 1 packs two sequences
(position ids restart; transformers' own mask functions make its block-diagonal mask, row by row,
since transformers detects packing only in a row without an attention mask); BOS starts every
sequence and a marker token recurs more than a window later (planted_tokens). Weights are not
stored: they are the constructed weights (FORMAT.md, "Constructed weights"; constructed_weights.py)
for the file's seed, rounded to the dtype, so the reference recreates them bit for bit;
--weights generated gives the plain counter-generator weights and uniform tokens of the files before
them. --full-width keeps the released widths (e2b-full-width.*).

Stored: logits, loss, and the gradient of every trainable tensor of at most 4096 elements (every
norm weight, q_norm/k_norm of head dims 256 and 512 included, the embedding tables, the MLPs, the
router): the gradients that sum every position's backward, including each attention backward. The
large projections (q_proj, o_proj, the experts) are left out for size; their weight gradients are
GEMMs of the same quantities, judged in full by the tiny goldens.

    python golden/generators/hf_real_cases.py --out golden/real [--geometry e2b ...] [--dtype f32 bf16]
        [--device cuda] [--conform build/bin/gemma4-conform]

bf16/f16 files need baseline/ (`gemma4-conform golden baseline`, run here when --conform is given).

--candidate FILE.h5 writes a candidate file (FORMAT.md, "Candidate files") instead, for one
--geometry and --dtype: transformers with `--attn sdpa` (PyTorch's SDPA, another attention path than
the golden's eager one: a legitimate implementation that must pass) or `--bug no-softcap` (the final
logit soft-cap dropped, a negative control that must fail), judged by
`gemma4-conform golden check golden/real/<geometry>.<dtype>.h5 FILE.h5`.

--decode writes <geometry>.decode.f32.h5 instead: transformers' greedy generate (the call of
hf_decode_cases.py) of 8 tokens after a prompt of window + 40 tokens, so every sliding cache has
wrapped (transformers keeps window - 1 keys; a ring of window - 1 + 16 rows wraps too) and the
KV-shared layers read a wrapped cache; row 0 is left-padded by 45, so its real context crosses the
window edge during the steps. Scores and sequences only: the caches are megabytes at these sizes,
and the tiny decode goldens judge cache contents.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

sys.path.insert(0, str(Path(__file__).resolve().parent))
from constructed_weights import BOS_ID  # noqa: E402
from hf_cases import DTYPES, PAD_ID, judged_rule, set_deterministic, write_golden  # noqa: E402
from hf_decode_cases import greedy  # noqa: E402
from real_weights import MODES, Weights  # noqa: E402
from transformers_candidate import write as write_candidate  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIGS = REPO_ROOT / "reference" / "configs"
SLIDING, FULL = "sliding_attention", "full_attention"

HIDDEN, HEADS, INTERMEDIATE, MOE_INTERMEDIATE, PLE_WIDTH, VOCAB = 64, 8, 64, 16, 32, 32
MAX_STORED_GRAD = 4096  # elements: the gradients written (see the top of the file)
LEFT_PADDING = 5
SEED = 20261126

# geometry -> (released config, sliding layers per pattern, KV-shared tail)
GEOMETRIES = {
    "e2b": ("gemma-4-e2b.json", 4, True),
    "e4b": ("gemma-4-e4b.json", 5, True),
    "31b": ("gemma-4-31b.json", 5, False),
    "26b-a4b": ("gemma-4-26b-a4b.json", 5, False),
}


def real_config(geometry: str, full_width: bool = False) -> dict[str, Any]:
    """The released text config with the reductions of the module docstring; `full_width` keeps the
    released hidden, intermediate and per-layer widths and head counts (vocabulary and layers
    reduced all the same)."""
    file_name, sliding, shared_tail = GEOMETRIES[geometry]
    released = json.loads((CONFIGS / file_name).read_text())
    text = dict(released.get("text_config", released))
    layer_types = [SLIDING] * sliding + [FULL] + ([SLIDING, FULL] if shared_tail else [])
    text.update(num_hidden_layers=len(layer_types), layer_types=layer_types,
                num_kv_shared_layers=2 if shared_tail else 0,
                vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, pad_token_id=PAD_ID, bos_token_id=BOS_ID)
    if not full_width:
        ratio = text["num_attention_heads"] // HEADS
        text.update(hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
                    num_key_value_heads=text["num_key_value_heads"] // ratio)
        if text.get("num_global_key_value_heads"):
            text["num_global_key_value_heads"] = max(1, text["num_global_key_value_heads"] // ratio)
        if text.get("hidden_size_per_layer_input"):
            text["hidden_size_per_layer_input"] = PLE_WIDTH
        if text.get("enable_moe_block"):
            text["moe_intermediate_size"] = MOE_INTERMEDIATE
    for drop in ("model_type", "architectures", "dtype", "torch_dtype", "transformers_version"):
        text.pop(drop, None)
    return text


def seq_len(config: dict[str, Any]) -> int:
    return 2 * config["sliding_window"] + 1


def planted_tokens(length: int, seed: int, starts: list[int], marks: list[tuple[int, int]], vocab: int = VOCAB) -> torch.Tensor:
    """Tokens for a constructed model: BOS at each sequence start (where its sink heads find it), the
    marker token (the vocabulary's last) at each pair of `marks`, one more than a window before the
    other (a copy only a global layer's retrieval heads can fetch), random tokens from 3 to V - 2
    elsewhere: no BOS, marker or pad id among them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(BOS_ID + 1, vocab - 1, (length,), generator=generator, dtype=torch.int64)
    ids[starts] = BOS_ID
    for early, late in marks:
        ids[[early, late]] = vocab - 1
    return ids


def make_inputs(config: dict[str, Any], seed: int, planted: bool = True) -> dict[str, torch.Tensor]:
    """Row 0 left-padded, row 1 two packed sequences; labels -100 on padding, after padding and at
    the packed row's second start (a collator never asks one sequence to predict the next).
    `planted`: the tokens of a constructed model (planted_tokens); else uniform from 1 to V - 1."""
    S, window = seq_len(config), config["sliding_window"]
    first = window + 7  # the first packed sequence passes its own window; the second starts inside one
    if planted:
        vocab = config["vocab_size"]
        ids = torch.stack([planted_tokens(S, seed + 1, [LEFT_PADDING], [(LEFT_PADDING + 2, S - 2)], vocab),
                           planted_tokens(S, seed + 3, [0, first], [(2, first - 2)], vocab)])
    else:
        generator = torch.Generator().manual_seed(seed + 1)
        ids = torch.randint(1, VOCAB, (2, S), generator=generator, dtype=torch.int64)  # no real pad id
    mask = torch.ones_like(ids)
    mask[0, :LEFT_PADDING] = 0
    ids = torch.where(mask.bool(), ids, PAD_ID)
    positions = torch.arange(S).repeat(2, 1)
    positions[1, first:] = torch.arange(S - first)
    labels = ids.clone()
    labels[0, : LEFT_PADDING + 1] = -100
    labels[1, first] = -100
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "labels": labels}


def build_model(config: dict[str, Any], dtype_name: str, seed: int, truth: bool, device: str,
                weights: Weights = Weights("constructed")) -> torch.nn.Module:
    """transformers' model with the weights (constructed, generated or a checkpoint's) rounded to the
    dtype; `truth`: those rounded values widened to float32 (the tolerance rule's truth)."""
    model = Gemma4ForCausalLM(Gemma4TextConfig(**config)).float()
    decoder = model.model
    tensors = dict(decoder.named_parameters())
    tensors.update({n: b for n, b in decoder.named_buffers() if n.endswith("layer_scalar")})
    with torch.no_grad():
        for name, tensor in tensors.items():
            value = weights.value(config, seed, name, tuple(tensor.shape))
            tensor.copy_(value.to(DTYPES[dtype_name]).float())
        if not config.get("tie_word_embeddings", True):
            head = model.lm_head.weight
            head.copy_(weights.value(config, seed, "lm_head.weight", tuple(head.shape)).to(DTYPES[dtype_name]).float())
    if not truth:
        # .to(dtype) casts every float buffer, RoPE's inv_freq too (transformers #25681: the angle
        # then loses precision with the position, by radians at 2k). from_pretrained(dtype=...)
        # keeps inv_freq in float32; so does this.
        inv_freq = {n: b.clone() for n, b in model.named_buffers() if "inv_freq" in n}
        model = model.to(DTYPES[dtype_name])
        for n, b in model.named_buffers():
            if n in inv_freq:
                b.data = inv_freq[n]
    model.config._attn_implementation = "eager"
    return model.to(device).eval()


def masks(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each layer type's 4D mask, made by transformers row by row: row 0 from its attention mask,
    row 1 from its position ids alone (transformers' packed-sequence detection)."""
    config = model.config
    out = {}
    for layer_type, make in ((FULL, create_causal_mask), (SLIDING, create_sliding_window_causal_mask)):
        rows = []
        for row, attention_mask in ((0, inputs["attention_mask"][:1]), (1, None)):
            embeds = torch.zeros(1, inputs["input_ids"].shape[1], config.hidden_size,
                                 dtype=model.dtype, device=inputs["input_ids"].device)
            m = make(config=config, inputs_embeds=embeds, attention_mask=attention_mask, past_key_values=None,
                     position_ids=inputs["position_ids"][row:row + 1])
            if m is None or m.dim() != 4:
                raise RuntimeError(f"transformers gave no 4D {layer_type} mask for row {row}")
            rows.append(m)
        out[layer_type] = torch.cat(rows, 0)
    return out


def run(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = model(input_ids=inputs["input_ids"], attention_mask=masks(model, inputs),
                position_ids=inputs["position_ids"], labels=inputs["labels"])
    out.loss.backward()
    tree = {"outputs/logits": out.logits.detach(), "outputs/loss": out.loss.detach().float()}
    for name, p in model.model.named_parameters():
        if p.numel() <= MAX_STORED_GRAD:
            tree[f"grads/{name}"] = p.grad.detach() if p.grad is not None else torch.zeros_like(p)
    return tree


def case_label(geometry: str, full_width: bool) -> str:
    return f"{geometry}-full-width" if full_width else geometry


def attrs(label: str, config: dict[str, Any], dtype_name: str, device: str, seed: int, weights: Weights) -> dict[str, Any]:
    a: dict[str, Any] = {
        "format_version": np.int64(2), "kind": "model", "case": f"real/{label}",
        "description": f"{label} at its released head dims and window {config['sliding_window']}, hidden width "
                       f"{config['hidden_size']}, S = {seq_len(config)}, a left-padded and a packed row, "
                       f"{weights.mode} weights (transformers)",
        "generator": f"transformers {transformers.__version__}", "config": json.dumps(config, sort_keys=True),
        "dtype": dtype_name, "device": device, "seed": np.int64(seed), "torch_version": str(torch.__version__),
        "tolerance_class": "fp32" if dtype_name == "f32" else "reduced-precision",
        "kv_key": "layer-type", **weights.attrs(),
    }
    if dtype_name != "f32":
        a["truth_dtype"] = "f32"
    if device == "cuda":
        a["cuda_version"], a["gpu_name"] = str(torch.version.cuda), torch.cuda.get_device_name()
    return a


def generate(geometry: str, dtype_name: str, out: Path, device: str, seed: int, weights: str = "constructed",
             full_width: bool = False) -> Path:
    config = real_config(geometry, full_width)
    return write_case(case_label(geometry, full_width), config, Weights(weights), dtype_name, out, device, seed)


def write_case(label: str, config: dict[str, Any], weights: Weights, dtype_name: str, out: Path, device: str,
               seed: int, exact_truth: bool = False, extra_attrs: dict[str, Any] | None = None) -> Path:
    """<out>/<label>.<dtype>.h5: the case of `config` on its weights, computed by transformers.
    `exact_truth`: truth/ on the weights as given rather than rounded to the dtype (a quantized
    case's dequantized weights, which its subject uses unrounded; FORMAT.md, "Quantized subjects")."""
    set_deterministic(seed)
    inputs = make_inputs(config, seed, planted=weights.mode != "generated")
    on_device = {k: v.to(device) for k, v in inputs.items()}
    expected = run(build_model(config, dtype_name, seed, False, device, weights), on_device)
    datasets = {f"inputs/{k}": v for k, v in inputs.items()}
    datasets.update({f"expected/{k}": v for k, v in expected.items()})
    datasets.update({f"judged/{k}": m for k, m in judged_rule()(inputs, expected, PAD_ID).items()})
    if dtype_name != "f32":
        truth_weights = "f32" if exact_truth else dtype_name  # f32: no rounding of the given values
        truth = run(build_model(config, truth_weights, seed, True, device, weights), on_device)
        datasets.update({f"truth/{k}": v for k, v in truth.items()})
    path = out / f"{label}.{dtype_name}.h5"
    out.mkdir(parents=True, exist_ok=True)
    write_golden(path, {**attrs(label, config, dtype_name, device, seed, weights), **(extra_attrs or {})}, datasets)
    return path


def candidate(geometry: str, dtype_name: str, out: Path, device: str, seed: int, attn: str, bug: str,
              weights: str = "constructed", full_width: bool = False) -> Path:
    """A candidate file: transformers run as another implementation would, on the golden's inputs."""
    set_deterministic(seed)
    config = real_config(geometry, full_width)
    model = build_model(config, dtype_name, seed, False, device, Weights(weights))
    model.config._attn_implementation = attn
    if bug == "no-softcap":
        model.config.final_logit_softcapping = None
    inputs = {k: v.to(device) for k, v in make_inputs(config, seed, planted=weights == "constructed").items()}
    write_candidate(out, run(model, inputs), {"generator": f"transformers {transformers.__version__} "
                                                           f"({attn} attention, bug {bug})", "dtype": dtype_name})
    return out


NEW_TOKENS, DECODE_EXTRA, DECODE_PADDING = 8, 40, 45


@torch.no_grad()
def generate_decode(geometry: str, out: Path, seed: int, weights: str = "constructed", full_width: bool = False) -> Path:
    config = real_config(geometry, full_width)
    return write_decode(case_label(geometry, full_width), config, Weights(weights), out, seed)


@torch.no_grad()
def write_decode(label: str, config: dict[str, Any], weights: Weights, out: Path, seed: int,
                 device: str = "cpu") -> Path:
    """<out>/<label>.decode.f32.h5 (golden/FORMAT.md, "Decode goldens", real-size files). Unless the
    weights are generated: row 0 starts with BOS after its padding, row 1 with BOS and a marker that
    recurs at its last prompt token, more than a window later."""
    set_deterministic(seed)
    S = config["sliding_window"] + DECODE_EXTRA
    if weights.mode != "generated":
        vocab = config["vocab_size"]
        ids = torch.stack([planted_tokens(S, seed + 2, [DECODE_PADDING], [(DECODE_PADDING + 2, S - 1)], vocab),
                           planted_tokens(S, seed + 4, [0], [(2, S - 1)], vocab)])
    else:
        generator = torch.Generator().manual_seed(seed + 2)
        ids = torch.randint(1, VOCAB, (2, S), generator=generator, dtype=torch.int64)
    mask = torch.ones_like(ids)
    mask[0, :DECODE_PADDING] = 0
    ids = torch.where(mask.bool(), ids, PAD_ID)
    model = build_model(config, "f32", seed, True, device, weights)
    result = greedy(model, ids.to(device), mask.to(device), NEW_TOKENS)
    result.sequences, scores = result.sequences.cpu(), torch.stack(result.logits).cpu()  # scores [N, B, V]
    if not torch.equal(result.sequences[:, :S], ids) or not torch.equal(result.sequences[:, S:],
                                                                       scores.argmax(-1).transpose(0, 1)):
        raise RuntimeError("generate's sequences are not the prompt and the argmax of its scores")
    attrs = {
        "format_version": np.int64(2), "kind": "decode", "name": f"real/{label}/decode",
        "description": f"greedy decode, {NEW_TOKENS} tokens after {S} (window {config['sliding_window']} + "
                       f"{DECODE_EXTRA}; row 0 left-padded by {DECODE_PADDING}): {label}, real head dims",
        "config": json.dumps(config, sort_keys=True), "dtype": "f32", "device": device,
        "generator": f"transformers {transformers.__version__}", "torch_version": str(torch.__version__),
        "max_new_tokens": np.int64(NEW_TOKENS), "kv_key": "layer-type",
        "seed": np.int64(seed), **weights.attrs(),
    }
    path = out / f"{label}.decode.f32.h5"
    out.mkdir(parents=True, exist_ok=True)
    write_golden(path, attrs, {"inputs/input_ids": ids, "inputs/attention_mask": mask,
                               "expected/sequences": result.sequences, "expected/scores": scores})
    return path


def fill_baselines(conform: Path | None, reduced: list[str], device: str) -> None:
    """baseline/ of the bf16/f16 files just written (`gemma4-conform golden baseline`), or a reminder."""
    if reduced and conform:
        subprocess.run([str(conform), "golden", "baseline", *reduced, "--device", device], check=True)
    elif reduced:
        print("bf16/f16 files need baseline/: run gemma4-conform golden baseline on them", file=sys.stderr)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", type=Path, help="directory for <geometry>.<dtype>.h5 (needed but with --candidate)")
    p.add_argument("--geometry", nargs="+", choices=sorted(GEOMETRIES), default=sorted(GEOMETRIES))
    p.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["f32", "bf16"],
                   help="f16 is slow on CPUs without AVX-512 FP16: the GPU host makes it (ci/gpu/test.sh)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--conform", type=Path, help="gemma4-conform, to fill baseline/ of bf16/f16 files")
    p.add_argument("--decode", action="store_true", help="write the decode goldens (f32) instead")
    p.add_argument("--weights", choices=MODES, default="constructed",
                   help="constructed (trained-like, FORMAT.md) or generated (plain random, the files before it)")
    p.add_argument("--full-width", action="store_true",
                   help="the released hidden, intermediate and per-layer widths and head counts (<geometry>-full-width.*)")
    p.add_argument("--print-config", metavar="GEOMETRY", choices=sorted(GEOMETRIES),
                   help="print the reduced config and exit")
    p.add_argument("--candidate", type=Path, metavar="FILE.h5",
                   help="write a candidate file for one --geometry and --dtype instead (golden check)")
    p.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa", help="--candidate: transformers' attention")
    p.add_argument("--bug", choices=("none", "no-softcap"), default="none",
                   help="--candidate: plant one bug (a negative control)")
    args = p.parse_args(argv)
    if args.print_config:
        print(json.dumps(real_config(args.print_config, args.full_width), indent=1, sort_keys=True))
        return 0
    if args.candidate:
        if len(args.geometry) != 1 or len(args.dtype) != 1:
            p.error("--candidate needs exactly one --geometry and one --dtype")
        start = time.monotonic()
        candidate(args.geometry[0], args.dtype[0], args.candidate, args.device, args.seed, args.attn, args.bug,
                  args.weights, args.full_width)
        print(f"wrote {args.candidate} ({args.geometry[0]} {args.dtype[0]}, {args.attn} attention, bug {args.bug}): "
              f"{time.monotonic() - start:.1f} s", flush=True)
        return 0
    if args.out is None:
        p.error("--out is required (but with --print-config or --candidate)")
    if args.decode:
        for geometry in args.geometry:
            start = time.monotonic()
            path = generate_decode(geometry, args.out, args.seed, args.weights, args.full_width)
            print(f"{path}: {path.stat().st_size} bytes, {time.monotonic() - start:.1f} s", flush=True)
        return 0
    reduced = []
    for geometry in args.geometry:
        for dtype_name in args.dtype:
            start = time.monotonic()
            path = generate(geometry, dtype_name, args.out, args.device, args.seed, args.weights, args.full_width)
            print(f"{path}: {path.stat().st_size} bytes, {time.monotonic() - start:.1f} s", flush=True)
            if dtype_name != "f32":
                reduced.append(str(path))
    fill_baselines(args.conform, reduced, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
