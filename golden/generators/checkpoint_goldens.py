#!/usr/bin/env python3
"""Real-size goldens from your own Gemma-4 checkpoint: the released weights (or any fine-tune) on this
machine, computed by transformers in fp32, so that an implementation is judged on the weights it
will run. Nothing is committed: each file names the checkpoint directory (root attribute
`checkpoint`, weights = checkpoint; golden/FORMAT.md) and the suite loads the weights from there.

    python golden/generators/checkpoint_goldens.py CHECKPOINT --out DIR/real [--name NAME]
        [--dtype f32 bf16] [--device cpu|cuda] [--decode] [--conform build/bin/gemma4-conform]

writes DIR/real/NAME.<dtype>.h5 (and NAME.decode.f32.h5 with --decode): the real-size case of
golden/FORMAT.md ("Real-size goldens": B = 2 rows of S = 2 x window + 1 tokens, a left-padded and a
packed row, BOS at each sequence start) on the checkpoint's whole text model: every layer, the
released vocabulary. Then judge any backend on them:

    gemma4-conform conform --backend NAME --dtype bf16 --golden-dir DIR --filter '^real_size/'
    gemma4-conform golden inspect DIR/real/NAME.f32.h5      # what the model does with the inputs

Sizes: the logits are B x S x V floats (E2B: 2 x 1025 x 262144, 2.1 GB a file; 31B: 4.3 GB), a bf16
file holds them twice (expected and truth); transformers' fp32 forward and backward hold the model
three times (weights, gradients, optimizer-free activations): E2B needs about 40 GB of memory, 31B
does not fit a single 141 GB GPU. bf16/f16 files need baseline/: --conform runs `golden baseline`,
which recomputes the model with every in-tree variant (minutes per variant on a CPU).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_cases import DTYPES, PAD_ID  # noqa: E402
from hf_real_cases import SEED, fill_baselines, write_case, write_decode  # noqa: E402
from real_weights import Weights, text_config  # noqa: E402


def checkpoint_config(checkpoint: Path) -> dict:
    config = text_config(checkpoint)
    for drop in ("model_type", "architectures", "dtype", "torch_dtype", "transformers_version"):
        config.pop(drop, None)
    if config.get("pad_token_id", PAD_ID) != PAD_ID:
        raise SystemExit(f"{checkpoint}: pad_token_id {config['pad_token_id']}, the real-size inputs pad with {PAD_ID}")
    return config


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="a Hugging Face Gemma-4 checkpoint directory (config.json, safetensors)")
    p.add_argument("--out", type=Path, required=True, help="where NAME.<dtype>.h5 go (a golden dir's real/)")
    p.add_argument("--name", help="the files' name (default: the checkpoint directory's)")
    p.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=["f32", "bf16"])
    p.add_argument("--device", default="cpu", help="cpu or cuda: where transformers computes")
    p.add_argument("--seed", type=int, default=SEED, help="the tokens' seed")
    p.add_argument("--decode", action="store_true", help="also NAME.decode.f32.h5: greedy decoding past the window")
    p.add_argument("--conform", type=Path, help="gemma4-conform, to fill baseline/ of bf16/f16 files")
    args = p.parse_args(argv)
    if not (args.checkpoint / "config.json").is_file():
        p.error(f"{args.checkpoint}: no config.json (not a Hugging Face checkpoint directory)")
    config = checkpoint_config(args.checkpoint)
    name, weights = args.name or args.checkpoint.resolve().name, Weights("checkpoint", args.checkpoint)
    reduced = []
    for dtype_name in args.dtype:
        start = time.monotonic()
        path = write_case(name, config, weights, dtype_name, args.out, args.device, args.seed)
        print(f"{path}: {path.stat().st_size} bytes, {time.monotonic() - start:.1f} s", flush=True)
        if dtype_name != "f32":
            reduced.append(str(path))
    if args.decode:
        start = time.monotonic()
        path = write_decode(name, config, weights, args.out, args.seed, args.device)
        print(f"{path}: {path.stat().st_size} bytes, {time.monotonic() - start:.1f} s", flush=True)
    fill_baselines(args.conform, reduced, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
