#!/usr/bin/env python3
"""The weights a torchao int4 weight-only checkpoint holds (transformers' save_pretrained of a model
quantized with TorchAoConfig(IntxWeightOnlyConfig(int4, PerGroup(G)))): per quantized matrix
`<module>._weight_qdata` (int8 codes in -8..7), `_weight_scale` and `_weight_zero_point` per group of
G elements of a row, described in the safetensors metadata), as the Hugging Face checkpoint they were
made from, dequantized to fp32 as (q - z) s: the torchao analogue of gguf_dequantized.py (golden/
FORMAT.md, "Quantized subjects"), whose DIR layout, quantization.json and checks it shares. It reads
the file with safetensors alone, not with torchao or transformers, the subject's own loaders.

    python golden/generators/torchao_dequantized.py CHECKPOINT --torchao MODEL_DIR --out DIR

Each quantized tensor is held to what symmetric int4 quantization of the bf16 model can do, per group
from its largest magnitude a (torchao's choose_qparams, MappingType.SYMMETRIC): s = a / 7.5 stored in
bf16, q = clamp(round(w / s), -8, 7), so an element moves by at most s / 2 (the clamp at +7 of the
value a / s = 7.5 is that half step too), plus bf16's rounding u = 2^-8 of w before quantizing (u a)
and of s times up to 8 codes: a / 15 + u a + 8 u a / 7.5, all times (1 + u) for s's own rounding.
Unquantized tensors stored in bf16 may move by half their spacing. Beyond: exit 1 naming the tensors.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_dequantized import TensorRecord, load_checkpoint, write  # noqa: E402
from mlx_dequantized import float_bound  # noqa: E402

UNIT = 2.0 ** -8  # bf16's relative rounding


def int4_bound(w: np.ndarray, group: int) -> np.ndarray:
    groups = np.abs(w.astype(np.float64)).reshape(-1, group)
    a = groups.max(axis=1, keepdims=True)
    bound = (a / 15 + UNIT * a + 8 * UNIT * a / 7.5) * (1 + UNIT)
    return np.broadcast_to(bound, groups.shape).reshape(-1)


def ratio_of(change: np.ndarray, bound: np.ndarray) -> float:
    return float(np.where(bound > 0, change / np.where(bound > 0, bound, 1), np.where(change > 0, np.inf, 0)).max(initial=0))


def dequantized_checkpoint(model_dir: Path, checkpoint: dict[str, np.ndarray]) -> tuple[dict, list[TensorRecord]]:
    from safetensors import safe_open

    stored, layouts = {}, {}
    for path in sorted(model_dir.glob("model*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            layouts.update({k: json.loads(v) for k, v in (f.metadata() or {}).items() if v.startswith("{")})
            stored.update({k: f.get_tensor(k) for k in f.keys()})
    state, records, missing = {}, [], []
    for name, w in sorted(checkpoint.items()):
        module = name.removesuffix(".weight")
        if f"{module}._weight_qdata" in stored:
            layout = layouts.get(name, {}).get("_data", {})
            group = layout.get("block_size", [1, 0])[-1]
            target = layout.get("target_dtype", {}).get("_data")
            if target != "int4" or not group:
                raise SystemExit(f"{model_dir}: {name} is {target} in blocks {layout.get('block_size')}; "
                                 "only int4 per-group (IntxUnpackedToInt8Tensor) is read here")
            q = stored[f"{module}._weight_qdata"].double()
            scale = stored[f"{module}._weight_scale"].double().repeat_interleave(group, dim=-1)
            zero = stored[f"{module}._weight_zero_point"].double().repeat_interleave(group, dim=-1)
            value = ((q - zero) * scale).numpy().reshape(w.shape)
            bound, stored_type = int4_bound(w, group), f"torchao int4 g{group}"
        elif name in stored:
            value = stored[name].double().numpy().reshape(w.shape)
            stored_type = str(stored[name].dtype).removeprefix("torch.")
            bound = float_bound(w, stored_type)
        elif name == "lm_head.weight":
            continue  # tied to the embedding: not stored
        else:
            missing.append(name)
            continue
        change = np.abs(w.astype(np.float64) - value).reshape(-1)
        state[name] = value.astype(np.float32)
        records.append(TensorRecord(name, name, stored_type, float(change.max(initial=0.0)),
                                    float(np.abs(w).max(initial=0.0)),
                                    float((change ** 2).sum() / max(float((w.astype(np.float64) ** 2).sum()), 1e-300)),
                                    ratio_of(change, bound)))
    if missing:
        raise SystemExit(f"{model_dir}: no tensor for {', '.join(missing)} (another model, or dropped by the export)")
    return state, records


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="the Hugging Face checkpoint the torchao model was made from")
    p.add_argument("--torchao", type=Path, required=True, help="the quantized model directory (save_pretrained)")
    p.add_argument("--out", type=Path, required=True, help="the dequantized checkpoint's directory")
    args = p.parse_args(argv)
    state, records = dequantized_checkpoint(args.torchao, load_checkpoint(args.checkpoint))
    write(args.out, args.checkpoint, state, records, [])
    over = [r for r in records if r.bound_ratio is not None and r.bound_ratio > 1]
    worst = max((r.bound_ratio for r in records if r.bound_ratio is not None), default=0.0)
    print(f"wrote {args.out}: {len(records)} tensors, worst change / bound {worst:.3f}")
    if over:
        print(f"torchao_dequantized: {len(over)} tensor(s) moved further than quantization can: " +
              ", ".join(f"{r.checkpoint_name} ({r.bound_ratio:.3g}x its bound)" for r in over), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
