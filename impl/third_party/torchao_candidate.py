#!/usr/bin/env python3
"""Candidate adapter: transformers' Gemma-4 with torchao int4 weight-only weights, as a transformers
user runs a quantized checkpoint: `AutoModelForCausalLM.from_pretrained(DIR)` of a directory that
save_pretrained wrote from a model loaded with TorchAoConfig (golden/generators/quantized_cases.py
--types torchao-int4), on the CPU, in the dtype it was saved in (bf16). torchao's
IntxUnpackedToInt8Tensor dequantizes each weight to bf16 for the matmul.

    PYTHONPATH=.cache/pinned/torchao:impl/third_party python impl/third_party/torchao_candidate.py \
        CASE --torchao-model CASE/torchao --dtype bf16 --forward-only --out c.h5

Each sequence (a row's real tokens, a packed row's sequences: candidate_io.Case.sequences) runs alone
from position 0; padding positions' logits are 0 (not judged). Forward only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import candidate_io as io


def main() -> int:
    def options(parser):
        parser.add_argument("--torchao-model", type=Path, required=True,
                            help="the quantized model directory (transformers' save_pretrained)")

    args = io.arguments(__doc__.split("\n\n")[0], options)
    if not args.forward_only:
        raise io.NotSupported("a torchao int4 model is judged forward only (run with --forward-only)")
    import torch
    import torchao
    import transformers
    from transformers import AutoModelForCausalLM

    case = io.read_case(args.case_dir)
    model = AutoModelForCausalLM.from_pretrained(args.torchao_model).to(args.device).eval()
    ids = case.inputs["input_ids"]
    logits = np.zeros(ids.shape + (case.config["vocab_size"],), np.float32)
    with torch.no_grad():
        for b, index in case.sequences():
            out = model(input_ids=torch.from_numpy(ids[b, index][None].astype(np.int64)).to(args.device))
            logits[b, index] = out.logits[0].float().cpu().numpy()
    tree = {"outputs/logits": logits}
    if "labels" in case.inputs:
        tree["outputs/loss"] = np.float32(io.mean_token_loss(logits, case.inputs["labels"]))
    io.write_candidate(args.out, tree, f"transformers {transformers.__version__} + torchao {torchao.__version__} "
                                       f"(int4 weight-only, {model.dtype})", args.dtype)
    print(f"wrote {args.out}: logits {logits.shape}")
    return 0


if __name__ == "__main__":
    io.run(main)
