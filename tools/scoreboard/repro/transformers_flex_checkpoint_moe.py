"""transformers 5.17 FlexAttention + activation checkpointing on a Gemma-4 MoE model: are the
gradients those of the plain run? (The scoreboard's failing cell: conform-model
multithreaded_recompute/checkpointed/transformers/moe, NVIDIA H200, bf16.)

Loads golden/transformers/moe (a tiny Gemma-4 with MoE, K=V global layers, an untied head) on CUDA
with attn_implementation flex_attention and sdpa, runs one training step plain twice and under
gradient checkpointing twice, and prints for each run the largest gradient difference from the
first plain run (and which tensor), so run-to-run noise and the checkpointing difference are seen
side by side. Also: whether flex_attention's forward repeats bit for bit.

    python tools/scoreboard/repro/transformers_flex_checkpoint_moe.py [--dtype bf16|f32] [--first CASE ...]

--first runs one plain step of other golden/transformers cases first, in the same process, as
conform-model does (one compiled flex_attention serves every model of the process).
"""
import argparse
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file

CASES = Path(__file__).resolve().parents[3] / "golden/transformers"
CASE = CASES / "moe"


def step(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(**inputs)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.detach().float().clone() for n, p in model.named_parameters()
                                 if p.grad is not None}


def worst(a, b):
    name = max(a, key=lambda n: (a[n] - b[n]).abs().max().item())
    cos = torch.nn.functional.cosine_similarity(a[name].flatten(), b[name].flatten(), dim=0).item()
    return f"{(a[name] - b[name]).abs().max().item():.3e} at {name} (cosine {cos:.4f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    p.add_argument("--first", nargs="*", default=[], help="golden/transformers cases to run before, plain")
    args = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    inputs = {k: v.cuda() for k, v in load_file(str(CASE / "inputs.safetensors")).items()}
    for attn in ("sdpa", "flex_attention"):
        for other in args.first:
            first = transformers.AutoModelForCausalLM.from_pretrained(
                CASES / other, dtype=dtype, attn_implementation=attn, experts_implementation="eager").cuda().train()
            step(first, {k: v.cuda() for k, v in load_file(str(CASES / other / "inputs.safetensors")).items()})
            del first
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_pretrained(CASE, dtype=dtype, attn_implementation=attn,
                                                                  experts_implementation="eager").cuda().train()
        logits0, plain0 = step(model, inputs)
        logits1, plain1 = step(model, inputs)
        print(f"{attn} {args.dtype}: forward repeats bit for bit: {torch.equal(logits0, logits1)}")
        print(f"  plain run 2 vs 1:        {worst(plain1, plain0)}")
        model.gradient_checkpointing_enable()
        for i in (1, 2):
            _, ckpt = step(model, inputs)
            print(f"  checkpointed run {i} vs plain 1: {worst(ckpt, plain0)}")
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
