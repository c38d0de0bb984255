#!/usr/bin/env python3
"""Candidate adapter: transformers' own GGUF loader, `AutoModelForCausalLM.from_pretrained(DIR,
gguf_file=NAME)`, which reads a llama.cpp GGUF file (its metadata for the config, gguf-py to
dequantize every tensor) into transformers' Gemma-4: how a transformers user fine-tunes or evaluates
a GGUF model. On a quantized case (golden/generators/quantized_cases.py) its golden is the reference
on the file's dequantized weights; the model runs in bf16 on the CPU.

    PYTHONPATH=impl/third_party python impl/third_party/transformers_gguf_candidate.py CASE \
        --gguf CASE/model.Q8_0.gguf --dtype bf16 --forward-only --out c.h5

Each sequence (candidate_io.Case.sequences) runs alone from position 0; forward only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import candidate_io as io


def main() -> int:
    def options(parser):
        parser.add_argument("--gguf", type=Path, required=True, help="the GGUF file to load")

    args = io.arguments(__doc__.split("\n\n")[0], options)
    if not args.forward_only:
        raise io.NotSupported("a GGUF model is judged forward only here (run with --forward-only)")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    case = io.read_case(args.case_dir)
    # The loader's own failure (a config it cannot build from the file) is the implementation's: it
    # propagates and fails the case with its message.
    model = AutoModelForCausalLM.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name, dtype=torch.bfloat16)
    model = model.to(args.device).eval()
    ids = case.inputs["input_ids"]
    logits = np.zeros(ids.shape + (case.config["vocab_size"],), np.float32)
    with torch.no_grad():
        for b, index in case.sequences():
            out = model(input_ids=torch.from_numpy(ids[b, index][None].astype(np.int64)).to(args.device))
            logits[b, index] = out.logits[0].float().cpu().numpy()
    tree = {"outputs/logits": logits}
    if "labels" in case.inputs:
        tree["outputs/loss"] = np.float32(io.mean_token_loss(logits, case.inputs["labels"]))
    io.write_candidate(args.out, tree, f"transformers {transformers.__version__} (gguf_file={args.gguf.name})", args.dtype)
    print(f"wrote {args.out}: logits {logits.shape}")
    return 0


if __name__ == "__main__":
    io.run(main)
