#!/usr/bin/env python3
"""Write a candidate file (golden/FORMAT.md, "Candidate files") with Hugging Face transformers.

The proof that `gemma4-conform golden check` judges code we did not write: transformers itself,
given only what a golden case publishes (a checkpoint directory under golden/transformers/ and its
inputs.safetensors), computes logits, loss, hidden states and every gradient, and this script
writes them under the golden's names. Nothing here calls our C++.

    python golden/generators/transformers_candidate.py golden/transformers/padded_batch --dtype bf16 --out c.h5
    gemma4-conform golden check golden/transformers/padded_batch/golden.bf16.h5 c.h5

`--attn sdpa` runs PyTorch's SDPA attention instead of eager (a legitimate implementation that
differs in the don't-care rows), `--experts grouped_mm` transformers' grouped-GEMM MoE experts; `--bug NAME` plants one real bug class, to see the check fail:
  attention-scale  scores scaled by head_dim^-0.5 (Gemma-4 uses 1.0: q and k are RMS-normalised)
  gelu-exact       the erf GELU instead of gelu_pytorch_tanh (below bf16/f16 resolution: f32 fails)
  rope-theta       the sliding layers' RoPE base 10x too large
`--no-padding-idx` builds the embeddings without transformers' padding_idx, as other ports do: the
pad token's row then trains from a real position that holds the pad id. That is a legitimate
choice (FORMAT.md, "Implementation-defined values"), so the golden must not judge that row.

Needs: pip install transformers==5.17.0 safetensors h5py (into the project's .venv).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import h5py
import torch
from safetensors.torch import load_file

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
BUGS = ("none", "attention-scale", "gelu-exact", "rope-theta")


def load_model(case_dir: Path, dtype: torch.dtype, attn: str, bug: str, experts: str = "eager",
               padding_idx: bool = True) -> torch.nn.Module:
    import transformers

    config = transformers.AutoConfig.from_pretrained(case_dir)
    text = config.get_text_config()
    if bug == "gelu-exact":
        text.hidden_activation = "gelu"
    if bug == "rope-theta":
        text.rope_parameters["sliding_attention"]["rope_theta"] *= 10
    architecture = json.loads((case_dir / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(case_dir, config=config, dtype=dtype,
                                                               attn_implementation=attn,
                                                               experts_implementation=experts)
    if bug == "attention-scale":
        for module in model.modules():
            if type(module).__name__ == "Gemma4TextAttention":
                module.scaling = module.head_dim ** -0.5
    if not padding_idx:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                module.padding_idx = None  # F.embedding then sends the pad row its gradient too
    return model.eval()


def text_decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The module the golden's names are relative to (layers.N..., embed_tokens, norm)."""
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def candidate(model: torch.nn.Module, inputs: dict[str, torch.Tensor], forward_only: bool) -> dict[str, torch.Tensor]:
    decoder = text_decoder(model)
    params = dict(decoder.named_parameters())
    if not any(model.lm_head.weight is p for p in params.values()):
        params["lm_head.weight"] = model.lm_head.weight  # untied head; a tied one is embed_tokens
    with torch.set_grad_enabled(not forward_only):
        out = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                    labels=inputs.get("labels"), output_hidden_states=True)
        if not forward_only:
            out.loss.backward()
    tree = {"outputs/logits": out.logits}
    if out.loss is not None:
        tree["outputs/loss"] = out.loss
    # The last entry of transformers' hidden_states is after the final norm, as in the golden.
    for i, hidden in enumerate(out.hidden_states):
        tree[f"outputs/hidden_states/{i}"] = hidden
    if not forward_only:
        for name, param in params.items():
            tree[f"grads/{name}"] = param.grad if param.grad is not None else torch.zeros_like(param)
    return tree


def write(path: Path, tree: dict[str, torch.Tensor], attrs: dict[str, str]) -> None:
    with h5py.File(path, "w") as f:
        for key, value in attrs.items():
            f.attrs[key] = value
        for name, tensor in sorted(tree.items()):
            # HDF5 has no bfloat16: widen to float32 (exact), as the format says.
            f.create_dataset(name, data=tensor.detach().float().cpu().numpy())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("case_dir", type=Path, help="a Hugging Face checkpoint directory with inputs.safetensors "
                                               "(golden/transformers/<case>)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="the golden's dtype")
    p.add_argument("--out", type=Path, required=True, help="the candidate HDF5 file to write")
    p.add_argument("--attn", choices=("eager", "sdpa"), default="eager", help="transformers' attention")
    p.add_argument("--experts", choices=("eager", "grouped_mm"), default="eager",
                   help="transformers' MoE experts (grouped_mm needs 16-byte strides: f32 only at these sizes)")
    p.add_argument("--bug", choices=BUGS, default="none", help="plant one bug class (a negative control)")
    p.add_argument("--no-padding-idx", action="store_true",
                   help="embeddings without padding_idx (the pad row trains): legitimate, must pass")
    p.add_argument("--forward-only", action="store_true", help="logits, loss and hidden states only")
    p.add_argument("--device", default="cpu", help="where transformers runs (cpu, cuda)")
    args = p.parse_args(argv)
    if not (args.case_dir / "config.json").is_file() or not (args.case_dir / "inputs.safetensors").is_file():
        p.error(f"{args.case_dir}: needs config.json, model weights and inputs.safetensors")

    torch.manual_seed(0)
    model = load_model(args.case_dir, DTYPES[args.dtype], args.attn, args.bug, args.experts,
                       padding_idx=not args.no_padding_idx).to(args.device)
    inputs = {k: v.to(args.device) for k, v in load_file(str(args.case_dir / "inputs.safetensors")).items()}
    tree = candidate(model, inputs, args.forward_only)
    import transformers
    write(args.out, tree, {"generator": f"transformers {transformers.__version__} ({args.attn}, bug {args.bug})",
                           "dtype": args.dtype})
    print(f"wrote {args.out}: {len(tree)} datasets ({args.dtype}, {args.attn} attention, bug {args.bug})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
