#!/usr/bin/env python3
"""The weights an MLX quantized model holds (what `mlx_lm.convert -q` or mlx_lm.utils.quantize_model
writes: per quantized matrix a packed `weight`, `scales` and `biases`, and config.json's
`quantization` {group_size, bits, mode}), as the Hugging Face checkpoint they were made from,
dequantized to fp32 by MLX's own mx.dequantize: the MLX analogue of gguf_dequantized.py (golden/
FORMAT.md, "Quantized subjects"), whose DIR layout, quantization.json and checks it shares.

    PYTHONPATH=.cache/pinned/mlx-lm python golden/generators/mlx_dequantized.py CHECKPOINT \
        --mlx MLX_MODEL_DIR --out DIR

mlx-lm keeps the checkpoint's names (model.layers.N...) and drops tensors it never uses (the K/V
projections of KV-shared layers, which no implementation reads): those stay the checkpoint's own.
A stored float tensor must equal the checkpoint's; a checkpoint tensor of the text model that the
MLX model lacks, other than those, is refused by name.

Each quantized tensor is held to what affine quantization to its bits can do, per group of
`group_size` consecutive elements of a row (MLX's affine_quantize, mlx/ops.cpp): with n = 2^bits - 1
steps, s = (max - min) / n, the bias is the extreme of larger magnitude e, snapped so that zero is
exact: s' = e / round(e / s). Codes q = clamp(round((w - e) / s'), 0, n), so an element moves by
half a step, s' / 2, or, where s' < s leaves the other extreme beyond n steps, by that overshoot,
(max - min) - n s', plus a margin of 2^-20 of the group's range for the fp32 arithmetic; a model
quantized in bf16 (as released checkpoints are) adds one bf16 rounding of w, of s' (times n codes),
of the bias and of the dequantized value. Unquantized tensors stored in bf16 or f16 may move by
half their spacing. Beyond: exit 1 naming the tensors (zeroed, scaled, foreign).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_dequantized import KEPT, TensorRecord, dequantized_state, dequantizer_main, float_bound  # noqa: E402

ARITHMETIC_MARGIN = 2.0 ** -20  # of the group's range: fp32 rounding of s, β and s q + β


def affine_bound(w: np.ndarray, group_size: int, bits: int, unit: float) -> np.ndarray:
    """Per element, the most affine quantization of its group may move it (the module docstring);
    `unit`: the relative rounding of the dtype the model was in when quantized (its scales' dtype)."""
    groups = w.astype(np.float64).reshape(-1, group_size)
    high, low = groups.max(axis=1, keepdims=True), groups.min(axis=1, keepdims=True)
    steps, spread = 2 ** bits - 1, high - low
    scale = np.maximum(spread / steps, 1e-7)
    edge = np.where(np.abs(low) > np.abs(high), low, high)
    q0 = np.round(edge / np.where(edge == low, scale, -scale))
    snapped = np.where(q0 != 0, np.abs(edge / np.where(q0 != 0, q0, 1)), scale)
    bound = snapped / 2 + np.maximum(spread - steps * snapped, 0) + spread * ARITHMETIC_MARGIN
    # In bf16 (f16): w rounded before quantizing, the scale (times up to n codes), the bias and the
    # dequantized value each rounded once, at most `unit` of the group's largest magnitude each.
    largest = np.maximum(np.abs(high), np.abs(low))
    bound = bound + unit * (steps * snapped + 3 * largest)
    return np.broadcast_to(bound, groups.shape).reshape(-1)


ROUNDING = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 0.0}


def dequantized_checkpoint(mlx_dir: Path, checkpoint: dict[str, np.ndarray]) -> tuple[dict, list[TensorRecord]]:
    """(the checkpoint with each tensor as the MLX model holds it, dequantized; a record per tensor)."""
    import mlx.core as mx

    quantization = json.loads((mlx_dir / "config.json").read_text()).get("quantization")
    if not quantization:
        raise SystemExit(f"{mlx_dir}/config.json: no 'quantization' (not a quantized MLX model)")
    group_size, bits, mode = quantization["group_size"], quantization["bits"], quantization.get("mode", "affine")
    if mode != "affine":
        raise SystemExit(f"{mlx_dir}: quantization mode {mode!r}, only 'affine' is read here")
    stored = {}
    for path in sorted(mlx_dir.glob("model*.safetensors")):
        stored.update(mx.load(str(path)))
    kind = f"mlx {mode} {bits}-bit g{group_size}"

    def one(name: str, w: np.ndarray):
        base = name.removesuffix(".weight")
        if f"{base}.scales" in stored:
            q = mx.dequantize(stored[name], stored[f"{base}.scales"], stored.get(f"{base}.biases"), group_size, bits)
            unit = ROUNDING[str(stored[f"{base}.scales"].dtype).removeprefix("mlx.core.")]
            return np.array(q.astype(mx.float32)), kind, affine_bound(w, group_size, bits, unit)
        if name in stored:
            stored_type = str(stored[name].dtype).removeprefix("mlx.core.")
            return np.array(stored[name].astype(mx.float32)), stored_type, float_bound(w, stored_type)
        if any(s in name for s in (".self_attn.k_proj.", ".self_attn.v_proj.", ".self_attn.k_norm.")):
            return KEPT  # a KV-shared layer's unused K/V: mlx-lm drops it, no implementation reads it
        return None

    return dequantized_state(checkpoint, one, mlx_dir)


def main(argv: list[str]) -> int:
    return dequantizer_main(argv, __doc__, "mlx", "the quantized MLX model directory", dequantized_checkpoint, "mlx_dequantized")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
