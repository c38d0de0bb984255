#!/usr/bin/env python3
"""Candidate adapter: vLLM's Gemma-4 (its offline engine, vllm.LLM) on a golden/transformers case, on a GPU.

Judges the model code a vLLM server runs (vllm/model_executor/models/gemma4.py and its attention
backend) on the case's checkpoint, as its users load one: `LLM(model=<case directory>)`
in the golden's dtype. vLLM has no full-logits output, so the adapter asks for what its sampler
returns with `logprobs_mode="raw_logits"`: the model's logits (after the final soft-cap, before any
sampling processor) of the whole vocabulary at each sampled step. Forward only (no backward).

- Prefill (default): each sequence of a batch row (Case.sequences(): its real tokens, a packed row
  split where position_ids restart) is evaluated from position 0; position t's logits are the one
  sampled step of a request whose prompt is the sequence's first t + 1 tokens (prefix caching off,
  so every request is a whole prefill through the paged KV cache).
- `--decode-from P`: positions from P on come from the decode path: one request per sequence, its
  first P tokens the prompt, then one token a step through vLLM's KV cache, teacher-forced: a logits
  processor (ForceTokens) makes the sampled token the case's next one. Raw logits are read before
  processors run, so forcing does not touch what is judged.
- Attention backend: FLASH_ATTN with FlashAttention 3 (Hopper) unless `--attention-backend` says
  otherwise. vLLM 0.25's own choice for Gemma-4 (its sliding and global head dims differ) is
  FlashAttention 4 when its sources are installed, else TRITON_ATTN; TRITON_ATTN refuses the tiny
  cases' head dim 16 (it needs at least 32) and FA4 needs CuTe DSL (nvidia-cutlass-dsl), not carried
  to the GPU host (ci/gpu/carry_pinned.sh vllm). Eager mode (no torch.compile, no CUDA graphs) unless
  `--compiled`. A backend vLLM refuses for the case's head size or dtype is "not supported".
- A bidirectional model (use_bidirectional_attention "all": every token attends to later ones) is not
  supported by this route: vLLM returns a model's logits only at sampled positions, the end of a
  prompt, so position t's logits cannot see the tokens after t; nor does a token-by-token decode.
  (Prompt logprobs see the whole prompt, but they are log-softmaxed: the loss, not the logits.
  vLLM 0.25's Gemma-4 reads the field only for "vision", gemma4_mm.py; what it computes for "all"
  is not judged here.)
- KV cache: a fixed 512 MiB (kv_cache_memory_bytes), not a share of the free memory measured by
  vLLM's start-up profiling, which fails when another process on the GPU frees memory meanwhile
  ("Error in memory profiling", seen with the scoreboard's parallel rows on one H200).
- A text-only Gemma4ForConditionalGeneration checkpoint (no vision_config) loads as Gemma4ForCausalLM
  (hf_overrides): vLLM's multimodal class builds its vision tower unconditionally.

    PYTHONPATH=.cache/pinned/vllm:impl/third_party python impl/third_party/vllm_candidate.py \\
        golden/transformers/e2b_like --dtype bf16 --device cuda --forward-only --out c.h5
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from candidate_io import NotSupported, arguments, checkpoint_dir, mean_token_loss, read_case, run, write_candidate

DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def force_tokens_processor():
    """vLLM's LogitsProcessor that makes each request's k-th sampled token its extra_args["forced"][k]
    (the teacher forcing of --decode-from); requests without that key are left alone."""
    import torch
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

    class ForceTokens(LogitsProcessor):
        def __init__(self, vllm_config, device, is_pin_memory):
            self.rows: dict[int, tuple[list[int], list[int]]] = {}  # batch row -> (forced, output tokens)

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, update: BatchUpdate | None) -> None:
            if update is None:
                return
            for index in update.removed:
                self.rows.pop(index, None)
            for index, params, _, output_ids in update.added:
                forced = (params.extra_args or {}).get("forced")
                self.rows.pop(index, None)
                if forced:
                    self.rows[index] = (forced, output_ids)
            for a, b, direction in update.moved:
                at_a, at_b = self.rows.pop(a, None), self.rows.pop(b, None)
                if at_a is not None:
                    self.rows[b] = at_a
                if direction == MoveDirectionality.SWAP and at_b is not None:
                    self.rows[a] = at_b

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            for index, (forced, output_ids) in self.rows.items():
                token = forced[min(len(output_ids), len(forced) - 1)]
                logits[index] = float("-inf")
                logits[index, token] = 0.0
            return logits

    return ForceTokens


def model_only(checkpoint: Path, target: Path) -> Path:
    """A directory of the checkpoint's config.json and model*.safetensors only (links): vLLM's loader reads
    every *.safetensors of a directory, and a case directory also holds inputs.safetensors."""
    target.mkdir(parents=True, exist_ok=True)
    for path in [checkpoint / "config.json", *checkpoint.glob("model*.safetensors*")]:
        (target / path.name).symlink_to(path.resolve())
    return target


def logits_row(step, vocab: int) -> np.ndarray:
    """One sampled step's {token: Logprob} (raw logits here) as a [V] vector; every token must be there."""
    row = np.full(vocab, np.nan, dtype=np.float32)
    for token, value in step.items():
        row[token] = value.logprob
    if np.isnan(row).any():
        raise RuntimeError(f"vLLM returned {int((~np.isnan(row)).sum())} of {vocab} logits for a step")
    return row


def main() -> int:
    def options(parser):
        parser.add_argument("--decode-from", type=int, metavar="P",
                            help="each sequence's tokens from P on one at a time through vLLM's KV cache, teacher-forced")
        parser.add_argument("--attention-backend", default="FLASH_ATTN",
                            help="vLLM's attention backend (AttentionBackendEnum name; default FLASH_ATTN)")
        parser.add_argument("--compiled", action="store_true", help="torch.compile and CUDA graphs (vLLM's default), "
                                                                       "not eager mode")

    args = arguments(__doc__.split("\n\n")[0], options)
    if args.device != "cuda":
        raise NotSupported("vLLM's wheel is built for CUDA GPUs; this adapter runs on one (--device cuda)")
    if not args.forward_only:
        raise NotSupported("vLLM has no backward (run with --forward-only)")
    case = read_case(args.case_dir)
    if case.config.get("use_bidirectional_attention") == "all":
        raise NotSupported("a bidirectional model (use_bidirectional_attention 'all'): vLLM returns logits only at the "
                           "end of a prompt, so position t's logits cannot see the later tokens it attends to")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: our processor class
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")  # FlashInfer is not installed (ci/gpu/carry_pinned.sh vllm)
    import transformers
    import vllm
    from vllm import LLM, SamplingParams

    ids, vocab = case.inputs["input_ids"], case.config["vocab_size"]
    checkpoint = model_only(checkpoint_dir(case, args.config, args.work), args.work / "vllm")
    config = json.loads((checkpoint / "config.json").read_text())
    text_only = config["architectures"][0].endswith("ConditionalGeneration") and not config.get("vision_config")
    overrides = {"hf_overrides": {"architectures": ["Gemma4ForCausalLM"]}} if text_only else {}
    # FlashAttention 3 (Hopper), not 4: vLLM's Gemma-4 config picks FA4 whenever its sources are there, and
    # FA4 runs on CuTe DSL (nvidia-cutlass-dsl), which is not carried to the GPU host.
    attention = {"backend": args.attention_backend,
                 **({"flash_attn_version": 3} if args.attention_backend == "FLASH_ATTN" else {})}
    try:
        llm = LLM(model=str(checkpoint), dtype=DTYPES[args.dtype], skip_tokenizer_init=True, seed=0,
                  enforce_eager=not args.compiled, max_model_len=ids.shape[1] + 2, max_logprobs=vocab,
                  logprobs_mode="raw_logits", enable_prefix_caching=False, async_scheduling=False,
                  gpu_memory_utilization=0.08, kv_cache_memory_bytes=512 << 20, generation_config="vllm",
                  attention_config=attention, logits_processors=[force_tokens_processor()],
                  **overrides)
    except ValueError as e:  # vLLM's refusal of a backend for this head size or dtype: not supported, its words
        if "is not valid for this configuration" in str(e):
            raise NotSupported(f"vLLM {vllm.__version__}: {str(e).splitlines()[0][:240]}") from e
        raise

    # (row, position) each request's sampled steps give, in the order of the requests.
    requests, targets = [], []
    for b, index in case.sequences():
        tokens = [int(t) for t in ids[b][index]]
        prefill = len(tokens) if args.decode_from is None else min(args.decode_from, len(tokens))
        for t in range(prefill):
            requests.append(({"prompt_token_ids": tokens[:t + 1]}, SamplingParams(max_tokens=1, temperature=0.0,
                                                                                   logprobs=vocab, detokenize=False)))
            targets.append([(b, index[t])])
        if prefill < len(tokens):  # steps 1.. of one request: positions prefill .. end through the decode path
            forced = tokens[prefill:] + [0]
            requests.append(({"prompt_token_ids": tokens[:prefill]},
                             SamplingParams(max_tokens=len(forced), temperature=0.0, logprobs=vocab, detokenize=False,
                                            ignore_eos=True, extra_args={"forced": forced})))
            targets.append([None] + [(b, index[t]) for t in range(prefill, len(tokens))])
    outputs = llm.generate([r[0] for r in requests], [r[1] for r in requests], use_tqdm=False)

    logits = np.zeros((*ids.shape, vocab), dtype=np.float32)
    for (prompt, params), where, out in zip(requests, targets, outputs):
        sample = out.outputs[0]
        forced = (params.extra_args or {}).get("forced")
        if forced and list(sample.token_ids) != forced:
            raise RuntimeError(f"teacher forcing failed: vLLM sampled {list(sample.token_ids)}, forced {forced}")
        if len(sample.logprobs) != len(where):
            raise RuntimeError(f"vLLM returned {len(sample.logprobs)} steps for a request of {len(where)}")
        for step, position in zip(sample.logprobs, where):
            if position is not None:
                logits[position] = logits_row(step, vocab)
    if not np.isfinite(logits).all():
        raise RuntimeError("vLLM returned non-finite logits")
    tree = {"outputs/logits": logits}
    if "labels" in case.inputs:
        tree["outputs/loss"] = np.float32(mean_token_loss(logits, case.inputs["labels"]))
    mode = "prefill" if args.decode_from is None else f"decode from {args.decode_from}"
    write_candidate(args.out, tree, f"vLLM {vllm.__version__} ({args.attention_backend}, "
                                    f"{'compiled' if args.compiled else 'eager'}, {mode}, "
                                    f"transformers {transformers.__version__})", args.dtype)
    print(f"wrote {args.out}: logits {logits.shape} ({args.dtype}, {len(requests)} requests, {mode})")
    return 0


if __name__ == "__main__":
    run(main)
