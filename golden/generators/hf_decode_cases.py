#!/usr/bin/env python3
"""Write decode goldens: greedy generation by Hugging Face transformers on the tiny cases.

For each case directory made by golden/generators/hf_cases.py (golden/transformers/<case>/), this loads the
checkpoint with transformers in float32 on the CPU (eager attention), runs

    generate(input_ids, attention_mask, do_sample=False, max_new_tokens=N, min_new_tokens=N,
             eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True,
             use_cache=True)

and writes <case>/decode.f32.h5 (golden/FORMAT.md, "Decode goldens"): the prompt, the sequences
and per-step logits, and the KV cache transformers holds right after the prompt's forward (the
prefill), for every layer that stores its own K/V.

`bidirectional` is not a decode case: every token there attends to later ones, so a cached K/V
computed before those existed is not what a full recompute gives (transformers 5.17 still runs
generate, and its cached and uncached logits differ by up to 4.6); gemma4-conform refuses it.

--check-cli PATH runs `PATH generate` (the repository's gemma4-conform) on each case with a KV
cache, without one, and with a chunked prefill, after the goldens are written, and compares its
sequences and scores with them; exit 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_cases as hc  # noqa: E402  (golden/generators/ is not a package)

DECODE_CASES = ("dense_keqv", "e2b_like", "moe", "padded_batch")
SEED = 0  # nothing here draws random numbers; set_deterministic seeds torch anyway
FILE_NAME = "decode.f32.h5"
# The CLI runs compared with the golden: (label, extra arguments of `gemma4-conform generate`).
CLI_RUNS = (("cached", []), ("uncached", ["--no-cache"]), ("prefill-chunk-5", ["--prefill-chunk", "5"]))


# --------------------------------------------------------------------------------------------
# The prompt and transformers' generate
# --------------------------------------------------------------------------------------------

def load_prompt(case_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask [B, S] from inputs.safetensors; labels are not a decode input.

    Unpadded cases store no mask: all ones then. The mask is always passed explicitly because
    every case's last row holds a real token equal to pad_token_id (hf_cases.make_inputs), which
    generate, left to infer a mask from pad tokens, would take for padding."""
    inputs = hc.read_safetensors(case_dir / "inputs.safetensors")
    input_ids = inputs["input_ids"].to(torch.int64)
    attention_mask = inputs.get("attention_mask", torch.ones_like(input_ids)).to(torch.int64)
    return input_ids, attention_mask


@torch.no_grad()
def greedy(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int):
    """The one generate call every decode golden comes from (golden/FORMAT.md quotes it).

    min_new_tokens = max_new_tokens with no eos: exactly N steps on every row, so sequences and
    scores have fixed shapes and no row is cut short or padded after an end-of-sequence."""
    return model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
        use_cache=True,
    )


def storing_layers(model: torch.nn.Module) -> list[int]:
    """Layers that compute and cache their own K/V; KV-shared layers read another layer's."""
    return [i for i, layer in enumerate(hc.text_decoder(model).layers) if not layer.self_attn.is_kv_shared_layer]


def cache_length(layer_type: str, seq: int, sliding_window: int) -> int:
    """T_L: how many prompt entries transformers 5.17's DynamicCache keeps after the prefill.

    DynamicSlidingWindowLayer keeps the last sliding_window - 1 tokens: the next query sees itself
    plus those, exactly its window. DynamicLayer (global attention) keeps every token."""
    return min(seq, sliding_window - 1) if layer_type == hc.SLIDING else seq


@torch.no_grad()
def prefill_cache(model: torch.nn.Module, input_ids: torch.Tensor,
                  attention_mask: torch.Tensor) -> tuple[dict[int, dict[str, torch.Tensor]], torch.Tensor]:
    """The cache right after the prompt's forward, per storing layer: keys, values, first.

    With max_new_tokens=1 generate runs the prompt once and stops, so its past_key_values has
    seen the prompt and nothing else (checked: every layer's seq length is S). Also returns that
    step's logits, which must equal the first step of the N-token call."""
    out = greedy(model, input_ids, attention_mask, 1)
    cache = out.past_key_values
    text_config = model.config.get_text_config()
    layers = storing_layers(model)
    # transformers builds cache layers only for the non-shared layers, in layer order.
    if len(cache.layers) != len(layers) or layers != list(range(len(layers))):
        raise RuntimeError(f"{len(cache.layers)} cache layers for storing layers {layers}")
    seq = input_ids.shape[1]
    result = {}
    for index in layers:
        layer = cache.layers[index]
        if layer.get_seq_length() != seq:
            raise RuntimeError(f"layer {index}: the cache has seen {layer.get_seq_length()} tokens, not {seq}")
        length = cache_length(text_config.layer_types[index], seq, text_config.sliding_window)
        if layer.keys.shape[2] != length or layer.values.shape[2] != length:
            raise RuntimeError(f"layer {index}: cache holds {tuple(layer.keys.shape)}, expected T={length}")
        result[index] = {"keys": layer.keys.clone(), "values": layer.values.clone(),
                         "first": torch.tensor([seq - length], dtype=torch.int64)}
    return result, out.logits[0]


# --------------------------------------------------------------------------------------------
# The decode golden file
# --------------------------------------------------------------------------------------------

def decode_attrs(case: hc.Case, case_dir: Path, new_tokens: int) -> dict:
    """Root attributes. config, generator and torch_version are hf_cases.py's own, so `config` is
    byte-identical to golden.f32.h5's (checked), the text config as the C++ loader reads it."""
    model_attrs = hc.golden_attrs(case, case_dir / "config.json", "f32", "cpu", SEED)
    with h5py.File(case_dir / "golden.f32.h5", "r") as f:
        if f.attrs["config"] != model_attrs["config"]:
            raise RuntimeError(f"{case.name}: config.json no longer matches golden.f32.h5's config")
    return {
        "format_version": np.int64(2),
        "kind": "decode",
        "name": f"transformers/{case.name}/decode",
        "description": f"greedy decode, {new_tokens} tokens: {case.description}",
        "config": model_attrs["config"],
        "dtype": "f32",
        "generator": model_attrs["generator"],
        "torch_version": model_attrs["torch_version"],
        "device": "cpu",
        "max_new_tokens": np.int64(new_tokens),
        "kv_key": "layer-type",  # transformers >= 5.8 keys shared_kv_states by layer type
    }


def decode_datasets(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    new_tokens: int) -> dict[str, torch.Tensor]:
    out = greedy(model, input_ids, attention_mask, new_tokens)
    scores = torch.stack(out.logits)  # [N, B, V]: the logits of each step, before any processor
    cache, first_step = prefill_cache(model, input_ids, attention_mask)
    if not torch.equal(first_step, scores[0]):
        raise RuntimeError("the 1-token and the N-token generate disagree on the first step's logits")
    datasets = {
        "inputs/input_ids": input_ids,
        "inputs/attention_mask": attention_mask,
        "expected/sequences": out.sequences,
        "expected/scores": scores,
    }
    batch = input_ids.shape[0]
    for index, entry in cache.items():
        name = f"cache/layers.{index}"
        length = entry["keys"].shape[2]
        first = int(entry["first"])
        # Entry t holds prompt token first + t. Padding entries are don't-care: which position id
        # they get and what a query row that sees no key returns are implementation-defined.
        real = attention_mask[:, first:first + length].ne(0).to(torch.int64).view(batch, 1, length, 1)
        datasets[f"expected/{name}.keys"] = entry["keys"]
        datasets[f"expected/{name}.values"] = entry["values"]
        datasets[f"expected/{name}.first"] = entry["first"]
        datasets[f"judged/{name}.keys"] = real
        datasets[f"judged/{name}.values"] = real.clone()
    return datasets


def verify_file(path: Path, model: torch.nn.Module, input_ids: torch.Tensor, new_tokens: int) -> None:
    """Read the file back: shapes, the prompt at the head of sequences, greedy = argmax(scores)."""
    text_config = model.config.get_text_config()
    batch, seq = input_ids.shape
    vocab = text_config.vocab_size
    with h5py.File(path, "r") as f:
        ids = f["inputs/input_ids"][()]
        sequences = f["expected/sequences"][()]
        scores = f["expected/scores"][()]
        checks = [(ids.shape, (batch, seq)), (f["inputs/attention_mask"].shape, (batch, seq)),
                  (sequences.shape, (batch, seq + new_tokens)), (scores.shape, (new_tokens, batch, vocab))]
        for index in storing_layers(model):
            layer = text_config.per_layer_config[index]
            length = cache_length(text_config.layer_types[index], seq, text_config.sliding_window)
            kv_shape = (batch, layer.num_key_value_heads, length, layer.head_dim)
            name = f"cache/layers.{index}"
            checks += [(f[f"expected/{name}.keys"].shape, kv_shape), (f[f"expected/{name}.values"].shape, kv_shape),
                       (tuple(f[f"expected/{name}.first"][()]), (seq - length,)),
                       (f[f"judged/{name}.keys"].shape, (batch, 1, length, 1)),
                       (f[f"judged/{name}.values"].shape, (batch, 1, length, 1))]
        for got, want in checks:
            if tuple(got) != tuple(want):
                raise RuntimeError(f"{path}: shape {tuple(got)}, expected {tuple(want)}")
        if not np.array_equal(sequences[:, :seq], ids):
            raise RuntimeError(f"{path}: sequences do not start with input_ids")
        if not np.array_equal(scores.argmax(-1).T, sequences[:, seq:]):
            raise RuntimeError(f"{path}: a new token is not the argmax of its step's scores")
        if not np.isfinite(scores).all():
            raise RuntimeError(f"{path}: non-finite scores")


def top2_gap(scores: torch.Tensor) -> float:
    """The smallest margin between the best and second-best logit over all steps and rows: how
    far a correct implementation's rounding is from flipping a greedy choice."""
    top = scores.topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]).min().item()


def write_case(cases_dir: Path, name: str, new_tokens: int) -> Path:
    case, case_dir = hc.TINY_CASES[name], cases_dir / name
    hc.set_deterministic(SEED)
    model = hc.load_reference(case, case_dir, torch.float32, "cpu")
    hc.assert_loaded_exactly(model, case_dir)
    input_ids, attention_mask = load_prompt(case_dir)
    datasets = decode_datasets(model, input_ids, attention_mask, new_tokens)
    path = case_dir / FILE_NAME
    hc.write_golden(path, decode_attrs(case, case_dir, new_tokens), datasets)
    verify_file(path, model, input_ids, new_tokens)
    batch, seq = input_ids.shape
    lengths = ", ".join(f"L{key.split('.')[1]}={t.shape[2]}" for key, t in datasets.items()
                        if key.startswith("expected/cache/") and key.endswith(".keys"))
    print(f"{name}: B={batch} S={seq} N={new_tokens} V={datasets['expected/scores'].shape[-1]} "
          f"T: {lengths}; min top-2 gap {top2_gap(datasets['expected/scores']):.3g}; "
          f"{path} {path.stat().st_size} bytes")
    return path


# --------------------------------------------------------------------------------------------
# --check-cli: the repository's own `gemma4-conform generate` against the golden
# --------------------------------------------------------------------------------------------

def check_cli(cli: Path, cases_dir: Path, name: str) -> bool:
    """Run the CLI three ways and compare with decode.f32.h5. Sequences must be equal; scores are
    held to FORMAT.md's fp32 rule, max|diff| <= 1e-4 * max|expected|."""
    case_dir = cases_dir / name
    with h5py.File(case_dir / FILE_NAME, "r") as f:
        input_ids = f["inputs/input_ids"][()]
        attention_mask = f["inputs/attention_mask"][()]
        sequences = f["expected/sequences"][()]
        scores = f["expected/scores"][()]
        new_tokens = int(f.attrs["max_new_tokens"])
    bound = 1e-4 * float(np.abs(scores).max())
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        prompt = Path(tmp) / "prompt.safetensors"
        save_file({"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask)},
                  str(prompt))
        for label, extra in CLI_RUNS:
            out = Path(tmp) / f"{label}.h5"
            command = [str(cli), "generate", "--model", str(case_dir), "--inputs", str(prompt),
                       "--max-new-tokens", str(new_tokens), "--out", str(out), *extra]
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{name} {label}: FAIL, exit {run.returncode}: {run.stderr.strip() or run.stdout.strip()}")
                ok = False
                continue
            with h5py.File(out, "r") as f:
                got_sequences, got_scores = f["sequences"][()], f["scores"][()]
            same = got_sequences.shape == sequences.shape and np.array_equal(got_sequences, sequences)
            if got_scores.shape != scores.shape:
                print(f"{name} {label}: FAIL, scores {got_scores.shape}, expected {scores.shape}")
                ok = False
                continue
            diff = float(np.abs(got_scores.astype(np.float64) - scores).max())
            passed = same and diff <= bound
            ok &= passed
            print(f"{name} {label}: {'ok' if passed else 'FAIL'}, sequences {'equal' if same else 'DIFFER'}, "
                  f"scores max|diff| {diff:.3g} (bound {bound:.3g})")
    return ok


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=hc.REPO_ROOT / "golden" / "transformers",
                        help="the case directories' parent (default golden/transformers)")
    parser.add_argument("--case", action="append", choices=DECODE_CASES, metavar="NAME",
                        help=f"a case to write (repeatable; default all: {', '.join(DECODE_CASES)})")
    parser.add_argument("--max-new-tokens", type=int, default=10, metavar="N",
                        help="tokens to generate per row (default 10)")
    parser.add_argument("--check-cli", type=Path, metavar="PATH",
                        help="also compare `PATH generate` (build/bin/gemma4-conform) with each golden: "
                             "cached, --no-cache and --prefill-chunk 5")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # generate warns on the right-padded row of padded_batch, and moe's forced-full last layer
    # warns by design: keep the per-case lines readable.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    names = args.case or list(DECODE_CASES)
    for name in names:
        write_case(args.cases, name, args.max_new_tokens)
    if args.check_cli is None:
        return 0
    results = [check_cli(args.check_cli, args.cases, name) for name in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
